{{/*
An opt-in PrometheusRule: the alerts every operator shares, then the
operator's own ("<chart>.alerts", a list of rules that may use $sel).
Alerts select the operator's series by namespace and pod name, which holds
for a ServiceMonitor, a PodMonitor and annotation-based scraping alike;
prometheusRule.selector replaces that. Each alert links its runbook on the
documentation site's alerts page (docs/operating/alerts.md) at the release's tag.
*/}}
{{- define "flotilla.alertSelector" -}}
{{- default (printf "namespace=%q,pod=~%q" (include "flotilla.namespace" $) (printf "%s-.*" (include "flotilla.fullname" .))) .Values.prometheusRule.selector -}}
{{- end -}}

{{- define "flotilla.runbook" -}}
{{- printf "https://github.com/flotilla-dev/flotilla/blob/v%s/docs/operating/alerts.md#%s" .ctx.Chart.AppVersion (lower .alert) -}}
{{- end -}}

{{- define "flotilla.prometheusRule" -}}
{{- if .Values.prometheusRule.enabled }}
{{- $sel := include "flotilla.alertSelector" . }}
{{- $name := include "flotilla.fullname" . }}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ $name }}
  namespace: {{ default (include "flotilla.namespace" $) .Values.prometheusRule.namespace }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    {{- with .Values.prometheusRule.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    - name: {{ $name }}.operator
      rules:
        - alert: FlotillaOperatorDown
          expr: absent(up{ {{- $sel -}} } == 1)
          for: 5m
          labels:
            severity: critical
          annotations:
            summary: {{ printf "%s is not being scraped, or none of its pods is up" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaOperatorDown") }}
        {{- if .Values.leaderElection.enabled }}
        - alert: FlotillaNoLeader
          expr: (max(leader_election_master_status{ {{- $sel -}} }) or vector(0)) < 1
          for: 5m
          labels:
            severity: critical
          annotations:
            summary: {{ printf "no replica of %s has held the leader lease for 5 minutes: nothing is reconciled" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaNoLeader") }}
        {{- end }}
        - alert: FlotillaReconcileErrors
          expr: sum by (controller) (rate(controller_runtime_reconcile_errors_total{ {{- $sel -}} }[5m])) / sum by (controller) (rate(controller_runtime_reconcile_total{ {{- $sel -}} }[5m])) > 0.1
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: more than 10%% of {{ $labels.controller }} reconciles fail" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaReconcileErrors") }}
        - alert: FlotillaReconcilePanics
          expr: sum by (controller) (increase(controller_runtime_reconcile_panics_total{ {{- $sel -}} }[15m])) > 0
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: a {{ $labels.controller }} reconcile panicked (caught and retried; a bug to report)" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaReconcilePanics") }}
        - alert: FlotillaReconcileSlow
          expr: histogram_quantile(0.99, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket{ {{- $sel -}} }[10m]))) > 30
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: the slowest {{ $labels.controller }} reconciles take over 30 s; work is backing up" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaReconcileSlow") }}
        - alert: FlotillaReconcileStuck
          expr: max by (name) (workqueue_longest_running_processor_seconds{ {{- $sel -}} }) > 600
          for: 5m
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: a {{ $labels.name }} reconcile has been running for over 10 minutes" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaReconcileStuck") }}
        {{- /* service-dns's sync loop has no work queue (docs/operating/prometheus.md) */}}
        {{- if ne .Chart.Name "service-dns" }}
        - alert: FlotillaWorkqueueBacklog
          expr: max by (name) (min_over_time(workqueue_depth{ {{- $sel -}} }[15m])) > 0
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: the {{ $labels.name }} queue has not emptied in over 15 minutes; objects wait to be reconciled" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaWorkqueueBacklog") }}
        {{- end }}
        - alert: FlotillaAPIServerErrors
          expr: sum(rate(rest_client_requests_total{ {{- $sel -}} ,code=~"5..|<error>"}[5m])) / sum(rate(rest_client_requests_total{ {{- $sel -}} }[5m])) > 0.1
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: {{ printf "%s: more than 10%% of its requests to the API server fail (5xx or no answer)" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaAPIServerErrors") }}
        - alert: FlotillaEventsDropped
          expr: sum(increase(flotilla_events_dropped_total{ {{- $sel -}} }[15m])) > 0
          labels:
            severity: info
          annotations:
            summary: {{ printf "%s dropped Kubernetes Events (the API server refused or was unreachable)" $name | quote }}
            runbook_url: {{ include "flotilla.runbook" (dict "ctx" . "alert" "FlotillaEventsDropped") }}
    {{- with (include (printf "%s.alerts" .Chart.Name) (dict "ctx" . "sel" $sel "name" $name) | trim) }}
    - name: {{ $name }}.{{ $.Chart.Name }}
      rules:
        {{- . | nindent 8 }}
    {{- end }}
{{- end }}
{{- end -}}
