{{/*
What load-tester needs of the API: its LoadTests and SimpleDeployments
(status by server-side apply); pods: list and watch (its own, by label),
create (runners, SimpleDeployment children), get (a child by name), patch
(the runners' start and stop signals) and delete (old runs' runners,
replaced children); pods/log: get (a running runner's last lines, its
progress, every 5 s while a run goes on); list also counts a namespace's runner pods against
--max-runners-per-namespace. Services: get to check a test's target and
pin its cluster IP, list and watch (metadata only) to stop a run whose
target changes; EndpointSlices (list) to see ready endpoints before a run
starts. Events are added by flotilla.rbac. With
watchNamespace set, all of it is a Role in that namespace only.
e2e/tests/rbac.rs proves each rule is needed.
*/}}
{{- define "load-tester.rules" -}}
- apiGroups: ["flotilla.dev"]
  resources: ["loadtests", "simpledeployments"]
  verbs: ["list", "watch"]
- apiGroups: ["flotilla.dev"]
  resources: ["loadtests/status", "simpledeployments/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
{{- end -}}

{{- define "load-tester.loadgenImage" -}}
{{- $global := default dict .Values.global -}}
{{- $g := default dict $global.image -}}
{{- $registry := default .Values.loadgen.image.registry (default $global.imageRegistry $g.registry) -}}
{{- if .Values.loadgen.image.digest -}}
{{- printf "%s/%s@%s" $registry .Values.loadgen.image.repository .Values.loadgen.image.digest -}}
{{- else -}}
{{- $tag := default (default .Chart.AppVersion .Values.loadgen.image.tag) $g.tag -}}
{{- printf "%s/%s:%s" $registry .Values.loadgen.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "load-tester.args" -}}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%s" (include "flotilla.value" .Values.watchNamespace) | quote }}
{{- end }}
- {{ printf "--loadgen-image=%s" (include "flotilla.value" (include "load-tester.loadgenImage" .)) | quote }}
- {{ printf "--cluster-domain=%s" (include "flotilla.value" .Values.clusterDomain) | quote }}
- {{ printf "--min-rerun-interval=%s" (include "flotilla.value" .Values.minRerunInterval) | quote }}
- {{ printf "--max-runners-per-namespace=%s" (include "flotilla.value" .Values.maxRunnersPerNamespace) | quote }}
{{- include "flotilla.admissionGuardArgs" . }}
{{- end -}}

{{/* The LoadTest policy (loadtest-access.yaml) is <fullname>-loadtests. */}}
{{- define "load-tester.admissionPolicySuffix" -}}loadtests{{- end -}}

{{- define "load-tester.env" -}}
{{- end -}}

{{/* Nothing but the API server (runners are pods of their own). */}}
{{- define "load-tester.egress" -}}
{{- end -}}

{{/* load-tester's alerts (see flotilla.prometheusRule). */}}
{{- define "load-tester.alerts" -}}
{{- $sel := .sel }}
- alert: FlotillaLoadTestsFailing
  expr: sum(increase(flotilla_load_tester_runs_total{ {{- $sel -}} ,state="Failed"}[1h])) > 0
  labels:
    severity: info
  annotations:
    summary: {{ printf "%s: LoadTest runs failed (not a verdict: the run itself) in the last hour" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaLoadTestsFailing") }}
{{- end -}}

{{/* load-tester's dashboard panels (see flotilla.dashboard). */}}
{{- define "load-tester.dashboardPanels" -}}
- title: "Runs ended (1 h), by state and verdict"
  expr: {{ printf "sum by (state, verdict) (increase(flotilla_load_tester_runs_total{%s}[1h]))" .sel | quote }}
  unit: short
- title: "Requests sent by runs per second"
  expr: {{ printf "sum(rate(flotilla_load_tester_requests_total{%s}[5m]))" .sel | quote }}
  unit: reqps
{{- end -}}
