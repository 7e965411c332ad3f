{{/*
What pod-alert needs of the API: its PodAlerts (status by server-side
apply), pods (watch, and their logs: the failing container's tail), core
Events (list, by field selector: the incident pod's last Warning Events,
shown beside the tail; spec.logs.events) and Secrets by name (get only, never list or watch: a sink's webhook URL in the
PodAlert's namespace). Events are added by flotilla.rbac. Namespaces (list,
watch; metadata only): their flotilla.dev/silence-until annotation, a
maintenance window an admin sets. Deployments, StatefulSets, DaemonSets,
Jobs and CronJobs (list, watch; metadata only): the same annotation on a
workload, its team's maintenance window. With watchNamespace set, all of it is a
Role in that namespace only, and Namespaces are not read (a Role cannot
grant them; the operator then does not watch them).
e2e/tests/rbac.rs proves each rule is needed.
*/}}
{{- define "pod-alert.rules" -}}
- apiGroups: ["flotilla.dev"]
  resources: ["podalerts"]
  verbs: ["list", "watch"]
- apiGroups: ["flotilla.dev"]
  resources: ["podalerts/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets"]
  verbs: ["list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs", "cronjobs"]
  verbs: ["list", "watch"]
{{- if not .Values.watchNamespace }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end -}}

{{- define "pod-alert.args" -}}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%s" (include "flotilla.value" .Values.watchNamespace) | quote }}
{{- end }}
- {{ printf "--cluster-scope-namespaces=%s" (include "flotilla.value" (join "," (.Values.clusterScopeNamespaces | default (list (include "flotilla.namespace" $))))) | quote }}
- {{ printf "--sink-timeout=%s" (include "flotilla.value" .Values.sinkTimeout) | quote }}
{{- with .Values.sinks.allowedCIDRs }}
- {{ printf "--allowed-sink-cidrs=%s" (include "flotilla.value" (join "," .)) | quote }}
{{- end }}
- {{ printf "--slack-hosts=%s" (include "flotilla.value" (join "," .Values.sinks.slackHosts)) | quote }}
- {{ printf "--teams-hosts=%s" (include "flotilla.value" (join "," .Values.sinks.teamsHosts)) | quote }}
- {{ printf "--pagerduty-url=%s" (include "flotilla.value" .Values.sinks.pagerdutyURL) | quote }}
- {{ printf "--slack-api-url=%s" (include "flotilla.value" .Values.sinks.slackApiURL) | quote }}
- {{ printf "--max-notifications-per-minute-per-namespace=%d" (int .Values.sinks.maxNotificationsPerMinutePerNamespace) | quote }}
- {{ printf "--max-log-bytes=%s" (include "flotilla.value" .Values.maxLogBytes) | quote }}
- {{ printf "--max-podalerts-per-namespace=%d" (int .Values.maxPodAlertsPerNamespace) | quote }}
{{- if .Values.debugHint }}
- "--debug-hint"
{{- end }}
{{- include "flotilla.admissionGuardArgs" . }}
{{- end -}}

{{/* The PodAlert policy (podalert-access.yaml) is <fullname>-podalerts. */}}
{{- define "pod-alert.admissionPolicySuffix" -}}podalerts{{- end -}}

{{- define "pod-alert.env" -}}
{{- end -}}

{{/* The alert sinks: Slack and webhooks over HTTPS or HTTP, Alertmanager
on 9093. A sink on another port needs networkPolicy.extraEgress. */}}
{{- define "pod-alert.egress" -}}
- ports:
    - port: 443
      protocol: TCP
    - port: 80
      protocol: TCP
    - port: 9093
      protocol: TCP
{{- end -}}

{{/* pod-alert's alerts (see flotilla.prometheusRule). */}}
{{- define "pod-alert.alerts" -}}
{{- $sel := .sel }}
- alert: FlotillaPodAlertSinkFailing
  expr: sum by (sink) (increase(flotilla_pod_alert_notifications_total{ {{- $sel -}} ,result=~"error|dropped"}[15m])) > 0
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: notifications to {{ $labels.sink }} fail or are dropped: incidents may go unseen" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaPodAlertSinkFailing") }}
{{- end -}}

{{/* pod-alert's dashboard panels (see flotilla.dashboard). */}}
{{- define "pod-alert.dashboardPanels" -}}
- title: "Incidents firing"
  expr: {{ printf "sum(flotilla_pod_alert_incidents_firing{%s})" .sel | quote }}
  unit: short
- title: "Notifications per second, by sink and result"
  expr: {{ printf "sum by (sink, result) (rate(flotilla_pod_alert_notifications_total{%s}[5m]))" .sel | quote }}
  unit: reqps
- title: "Pods cached"
  expr: {{ printf "max(flotilla_pod_alert_pods_cached{%s})" .sel | quote }}
  unit: short
{{- end -}}
