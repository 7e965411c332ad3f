{{/*
What config-copier needs of the API: its CopyRules and CopyRequests (patch
adds the finalizer that prunes copies when one is deleted; status), the ConfigMaps and
Secrets it copies from and to, and namespaces (metadata) to copy into;
with rollouts.enabled, list and patch on the apps workloads it rolls for
rolloutOnChange (listed in a namespace only when a copy there changed).
e2e/tests/rbac.rs proves each default rule is needed.
*/}}
{{- define "config-copier.rules" -}}
- apiGroups: ["flotilla.dev"]
  resources: ["copyrules"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["flotilla.dev"]
  resources: ["copyrules/status"]
  verbs: ["patch"]
- apiGroups: ["flotilla.dev"]
  resources: ["copyrequests"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["flotilla.dev"]
  resources: ["copyrequests/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["configmaps", "secrets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- if .Values.rollouts.enabled }}
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets"]
  verbs: ["list", "patch"]
{{- end }}
{{- end -}}

{{- define "config-copier.args" -}}
{{- if .Values.ruleNamespace }}
- {{ printf "--watch-namespace=%s" (include "flotilla.value" .Values.ruleNamespace) | quote }}
{{- end }}
- {{ printf "--copy-concurrency=%s" (include "flotilla.value" .Values.copyConcurrency) | quote }}
- {{ printf "--max-bytes-in-flight=%s" (include "flotilla.value" .Values.maxBytesInFlight) | quote }}
- {{ printf "--max-rule-source-bytes=%s" (include "flotilla.value" .Values.maxRuleSourceBytes) | quote }}
- {{ printf "--max-requests-per-namespace=%s" (include "flotilla.value" .Values.maxRequestsPerNamespace) | quote }}
- {{ printf "--target-consent=%s" (include "flotilla.value" .Values.targetConsent) | quote }}
- {{ printf "--secret-types=%s" (include "flotilla.value" (join "," .Values.secretTypes)) | quote }}
{{- with .Values.protectedNamespaces }}
- {{ printf "--protected-namespaces=%s" (include "flotilla.value" (join "," .)) | quote }}
{{- end }}
{{- with .Values.stripLabels }}
- {{ printf "--strip-labels=%s" (include "flotilla.value" (join "," .)) | quote }}
{{- end }}
{{- if .Values.rollouts.enabled }}
- "--enable-rollouts"
{{- end }}
{{- include "flotilla.admissionGuardArgs" . }}
{{- end -}}

{{/* The CopyRule policy (copyrule-access.yaml) is <fullname>-copyrules. */}}
{{- define "config-copier.admissionPolicySuffix" -}}copyrules{{- end -}}

{{- define "config-copier.env" -}}
{{- end -}}

{{/* Nothing but the API server. */}}
{{- define "config-copier.egress" -}}
{{- end -}}

{{/* config-copier's alerts (see flotilla.prometheusRule). */}}
{{- define "config-copier.alerts" -}}
{{- $sel := .sel }}
- alert: FlotillaCopyRuleNotInSync
  expr: max by (exported_namespace, rule) (flotilla_config_copier_copies_desired{ {{- $sel -}} }) - max by (exported_namespace, rule) (flotilla_config_copier_copies_in_sync{ {{- $sel -}} }) > 0
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: CopyRule {{ $labels.exported_namespace }}/{{ $labels.rule }} has had {{ $value }} copies out of sync for 15 minutes" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaCopyRuleNotInSync") }}
- alert: FlotillaCopyRuleConflicts
  expr: max by (exported_namespace, rule) (flotilla_config_copier_conflicts{ {{- $sel -}} }) > 0
  for: 30m
  labels:
    severity: info
  annotations:
    summary: {{ printf "%s: CopyRule {{ $labels.exported_namespace }}/{{ $labels.rule }} has {{ $value }} targets held by objects it does not own" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaCopyRuleConflicts") }}
{{- end -}}

{{/* config-copier's dashboard panels (see flotilla.dashboard). */}}
{{- define "config-copier.dashboardPanels" -}}
- title: "Copies out of sync"
  expr: {{ printf "sum(flotilla_config_copier_copies_desired{%s}) - sum(flotilla_config_copier_copies_in_sync{%s})" .sel .sel | quote }}
  unit: short
- title: "Copy writes per second, by action and result"
  expr: {{ printf "sum by (action, result) (rate(flotilla_config_copier_copy_operations_total{%s}[5m]))" .sel | quote }}
  unit: reqps
- title: "Conflicts"
  expr: {{ printf "sum(flotilla_config_copier_conflicts{%s})" .sel | quote }}
  unit: short
- title: "API requests per second, by verb"
  expr: {{ printf "sum by (verb) (rate(flotilla_config_copier_api_requests_total{%s}[5m]))" .sel | quote }}
  unit: reqps
{{- end -}}
