{{/*
The operator's CustomResourceDefinitions as templates (not Helm's crds/
directory, which installs them once and never upgrades them): upgraded with
the chart, behind `crds.enabled`, kept on uninstall with `crds.keep`
(`helm.sh/resource-policy: keep`) so that uninstalling never deletes users'
custom resources. The files in files/crds/ are the generated ones
(`cargo xtask crds`), byte-identical to the top-level crds/; only labels and
the keep annotation are added to their metadata.
*/}}
{{- define "flotilla.crds" -}}
{{- if .Values.crds.enabled }}
{{- $meta := include "flotilla.crdMetadata" . }}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" }}
---
{{ $.Files.Get $path | replace "\nmetadata:\n" $meta | trim }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The metadata lines added to each CRD (the name follows them). */}}
{{- define "flotilla.crdMetadata" -}}
{{- $labels := merge (dict "helm.sh/chart" (include "flotilla.chart" .) "app.kubernetes.io/name" (include "flotilla.name" .) "app.kubernetes.io/version" .Chart.AppVersion "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/part-of" "flotilla") (default dict .Values.commonLabels) -}}
{{- printf "\nmetadata:\n  labels:\n%s\n" (toYaml $labels | indent 4) -}}
{{- if .Values.crds.keep -}}
{{- printf "  annotations:\n    helm.sh/resource-policy: keep\n" -}}
{{- end -}}
{{- end -}}

{{/* The NOTES paragraph about this chart's CRDs. */}}
{{- define "flotilla.crdNotes" -}}
{{- $files := .Files.Glob "files/crds/*.yaml" }}
{{- $names := list }}
{{- range $path, $_ := $files }}{{ $names = append $names (base $path | trimSuffix ".yaml") }}{{ end }}
{{- if .Values.crds.enabled }}
CRDs {{ join ", " $names }}: part of this release; helm upgrade updates them
{{- if .Values.crds.keep }}, and helm uninstall leaves them (crds.keep) with every custom resource{{ end }}.
{{- else }}
This release leaves the CRDs alone (crds.enabled=false). Apply this version's yourself:
{{- range $path, $_ := $files }}
  kubectl apply --server-side -f https://github.com/flotilla-dev/flotilla/raw/v{{ $.Chart.AppVersion }}/crds/{{ base $path }}
{{- end }}
{{- end }}
{{- end -}}
