{{/*
What pod-debugger needs of the API: its PodDebuggers (status by server-side
apply), pods (list and watch only, and the ephemeralcontainers subresource: patch is how
a debug container is added, the only write the operator makes to a pod) and
namespaces by name (get only: the Pod Security enforce label). Events are
added by flotilla.rbac. With watchNamespace set, all of it is a Role in
that namespace (whose namespaces: get then covers that namespace only).
No get on pods or PodDebuggers: the watches' caches answer. With
debugCopies.enabled, create and delete on pods: a debug copy is a new pod
(the source read with get, which the operator then needs: the copy is
built from the whole pod, which the cache does not hold), deleted at its
PodDebugger's expiry after a get shows it owned by that PodDebugger.
e2e/tests/rbac.rs proves each rule is needed.
*/}}
{{- define "pod-debugger.rules" -}}
- apiGroups: ["flotilla.dev"]
  resources: ["poddebuggers"]
  verbs: ["list", "watch"]
- apiGroups: ["flotilla.dev"]
  resources: ["poddebuggers/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods/ephemeralcontainers"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get"]
{{- if .Values.debugCopies.enabled }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "create", "delete"]
{{- end }}
{{- end -}}

{{- define "pod-debugger.args" -}}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%s" (include "flotilla.value" .Values.watchNamespace) | quote }}
{{- end }}
- {{ printf "--allowed-images=%s" (include "flotilla.value" (join "," .Values.allowedImages)) | quote }}
{{- with .Values.protectedNamespaces }}
- {{ printf "--protected-namespaces=%s" (include "flotilla.value" (join "," .)) | quote }}
{{- end }}
- {{ printf "--inject-concurrency=%s" (include "flotilla.value" .Values.injectConcurrency) | quote }}
{{- if .Values.debugCopies.enabled }}
- "--debug-copies"
{{- end }}
{{- include "flotilla.admissionGuardArgs" . }}
{{- end -}}

{{/* The PodDebugger policy (poddebugger-access.yaml) is <fullname>-poddebuggers. */}}
{{- define "pod-debugger.admissionPolicySuffix" -}}poddebuggers{{- end -}}

{{- define "pod-debugger.env" -}}
{{- end -}}

{{/* Nothing but the API server. */}}
{{- define "pod-debugger.egress" -}}
{{- end -}}

{{/* pod-debugger's alerts (see flotilla.prometheusRule). */}}
{{- define "pod-debugger.alerts" -}}
{{- $sel := .sel }}
- alert: FlotillaPodDebuggerInjectionErrors
  expr: sum(increase(flotilla_pod_debugger_injections_total{ {{- $sel -}} ,result="error"}[15m])) > 0
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: adding debug containers fails" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaPodDebuggerInjectionErrors") }}
{{- end -}}

{{/* pod-debugger's dashboard panels (see flotilla.dashboard). */}}
{{- define "pod-debugger.dashboardPanels" -}}
- title: "Debug containers added per second, by result"
  expr: {{ printf "sum by (result) (rate(flotilla_pod_debugger_injections_total{%s}[5m]))" .sel | quote }}
  unit: reqps
- title: "PodDebuggers refused (15 min), by reason"
  expr: {{ printf "sum by (reason) (increase(flotilla_pod_debugger_refusals_total{%s}[15m]))" .sel | quote }}
  unit: short
- title: "Pods cached"
  expr: {{ printf "max(flotilla_pod_debugger_pods_cached{%s})" .sel | quote }}
  unit: short
{{- end -}}
