{{/*
An opt-in Grafana dashboard (a ConfigMap with the grafana_dashboard label,
which Grafana's dashboard sidecar loads): the panels every operator shares,
then the operator's own ("<chart>.dashboardPanels": a YAML list of
{title, expr, unit}). Series are selected as the alerts select them.
*/}}
{{- define "flotilla.dashboard" -}}
{{- if .Values.grafanaDashboard.enabled }}
{{- $sel := include "flotilla.alertSelector" . }}
{{- $name := include "flotilla.fullname" . }}
{{- $panels := list
  (dict "title" "Reconciles per second, by result" "expr" (printf "sum by (controller, result) (rate(controller_runtime_reconcile_total{%s}[5m]))" $sel) "unit" "reqps")
  (dict "title" "Reconcile errors per second" "expr" (printf "sum by (controller) (rate(controller_runtime_reconcile_errors_total{%s}[5m]))" $sel) "unit" "reqps")
  (dict "title" "Reconcile time, p99" "expr" (printf "histogram_quantile(0.99, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket{%s}[5m])))" $sel) "unit" "s")
  (dict "title" "Reconciles in flight" "expr" (printf "sum by (controller) (controller_runtime_active_workers{%s})" $sel) "unit" "short")
  (dict "title" "Panics caught (15 min)" "expr" (printf "sum by (controller) (increase(controller_runtime_reconcile_panics_total{%s}[15m]))" $sel) "unit" "short")
  (dict "title" "API server requests per second, by code" "expr" (printf "sum by (code, method) (rate(rest_client_requests_total{%s}[5m]))" $sel) "unit" "reqps")
  (dict "title" "Leader (1: this pod holds the lease)" "expr" (printf "max by (pod) (leader_election_master_status{%s})" $sel) "unit" "short")
  (dict "title" "Resident memory" "expr" (printf "max by (pod) (process_resident_memory_bytes{%s})" $sel) "unit" "bytes")
  (dict "title" "Events dropped (15 min)" "expr" (printf "sum(increase(flotilla_events_dropped_total{%s}[15m]))" $sel) "unit" "short")
}}
{{- /* service-dns's sync loop has no work queue (docs/operating/prometheus.md) */}}
{{- if ne .Chart.Name "service-dns" }}
{{- $panels = concat $panels (list
  (dict "title" "Queue depth (due, not started)" "expr" (printf "sum by (name) (workqueue_depth{%s})" $sel) "unit" "short")
  (dict "title" "Time in queue, p99" "expr" (printf "histogram_quantile(0.99, sum by (le, name) (rate(workqueue_queue_duration_seconds_bucket{%s}[5m])))" $sel) "unit" "s")
  (dict "title" "Workers busy (share of max concurrent reconciles)" "expr" (printf "max by (controller) (controller_runtime_active_workers{%s}) / max by (controller) (controller_runtime_max_concurrent_reconciles{%s} > 0)" $sel $sel) "unit" "percentunit")
  (dict "title" "Terminal reconcile errors (15 min)" "expr" (printf "sum by (controller) (increase(controller_runtime_terminal_reconcile_errors_total{%s}[15m]))" $sel) "unit" "short")
) }}
{{- end }}
{{- $own := include (printf "%s.dashboardPanels" .Chart.Name) (dict "sel" $sel) | fromYamlArray }}
{{- $all := concat $panels $own }}
{{- $grafana := list }}
{{- range $i, $p := $all }}
{{- $grafana = append $grafana (dict
  "id" (add1 $i)
  "type" "timeseries"
  "title" $p.title
  "datasource" (dict "type" "prometheus" "uid" "${datasource}")
  "gridPos" (dict "h" 8 "w" 12 "x" (mul (mod $i 2) 12) "y" (mul (div $i 2) 8))
  "fieldConfig" (dict "defaults" (dict "unit" $p.unit) "overrides" list)
  "targets" (list (dict "refId" "A" "expr" $p.expr "legendFormat" "__auto"))) }}
{{- end }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "flotilla.suffixed" (list . "dashboard") }}
  namespace: {{ default (include "flotilla.namespace" $) .Values.grafanaDashboard.namespace }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    grafana_dashboard: "1"
    {{- with .Values.grafanaDashboard.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
data:
  {{ $name }}.json: |-
    {{- dict
      "title" (printf "Flotilla %s (%s/%s)" .Chart.Name (include "flotilla.namespace" $) .Release.Name)
      "uid" (printf "flotilla-%s" (sha256sum (printf "%s/%s" (include "flotilla.namespace" $) $name) | trunc 12))
      "tags" (list "flotilla" .Chart.Name)
      "schemaVersion" 39
      "time" (dict "from" "now-6h" "to" "now")
      "refresh" "30s"
      "templating" (dict "list" (list (dict "name" "datasource" "type" "datasource" "query" "prometheus" "label" "Prometheus")))
      "panels" $grafana
      | toPrettyJson | nindent 4 }}
{{- end }}
{{- end -}}
