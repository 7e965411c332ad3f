{{/*
Names and labels. Every template here runs in the context of the operator
chart that includes it (its .Chart, .Values, .Release).
*/}}
{{- define "flotilla.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flotilla.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "flotilla.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "flotilla.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flotilla.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flotilla.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flotilla.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "flotilla.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/component: operator
{{- end -}}

{{- define "flotilla.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flotilla.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* global.* wins over the chart's own image settings when set. */}}
{{- define "flotilla.image" -}}
{{- $g := default dict (default dict .Values.global).image -}}
{{- $registry := default .Values.image.registry $g.registry -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $g.tag -}}
{{- printf "%s/%s:%s" $registry .Values.image.repository $tag -}}
{{- end -}}

{{- define "flotilla.pullPolicy" -}}
{{- $g := default dict (default dict .Values.global).image -}}
{{- default .Values.image.pullPolicy $g.pullPolicy -}}
{{- end -}}

{{- define "flotilla.logFormat" -}}
{{- default .Values.logFormat (default dict .Values.global).logFormat -}}
{{- end -}}

{{- define "flotilla.pullSecrets" -}}
{{- $secrets := concat (default list (default dict .Values.global).imagePullSecrets) (default list .Values.imagePullSecrets) -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets }}
  - name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The operator's command line: the common flags of CONVENTIONS.md, then the
operator's own ("<chart>.args"), then extraArgs.
*/}}
{{- define "flotilla.args" -}}
- --metrics-bind-address=0.0.0.0:{{ .Values.metrics.port }}
- --health-probe-bind-address=0.0.0.0:{{ .Values.healthProbePort }}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-id={{ include "flotilla.fullname" . }}
- --log-format={{ include "flotilla.logFormat" . }}
{{- $own := include (printf "%s.args" .Chart.Name) . | trim }}
{{- if $own }}
{{ $own }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
