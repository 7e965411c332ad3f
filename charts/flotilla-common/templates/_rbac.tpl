{{/*
Least privilege: the operator's rules ("<chart>.rules") and events in a
ClusterRole, or in a Role of that namespace when the chart has a
watchNamespace value set; leader-election leases only in the release
namespace, and of those only the operator's own (by name) beyond `create`.
*/}}
{{- define "flotilla.rbac" -}}
{{- if .Values.rbac.create }}
{{- $scoped := .Values.watchNamespace | default "" }}
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ if $scoped }}Role{{ else }}ClusterRole{{ end }}
metadata:
  name: {{ include "flotilla.fullname" . }}
  {{- if $scoped }}
  namespace: {{ $scoped }}
  {{- end }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  {{- include (printf "%s.rules" .Chart.Name) . | trim | nindent 2 }}
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ if $scoped }}RoleBinding{{ else }}ClusterRoleBinding{{ end }}
metadata:
  name: {{ include "flotilla.fullname" . }}
  {{- if $scoped }}
  namespace: {{ $scoped }}
  {{- end }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ if $scoped }}Role{{ else }}ClusterRole{{ end }}
  name: {{ include "flotilla.fullname" . }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ include "flotilla.namespace" $ }}
{{- if .Values.leaderElection.enabled }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "flotilla.suffixed" (list . "leader-election") }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  {{- /* `create` cannot be limited by name (the object has none yet);
  reading and renewing can: only the operator's own Lease, never another
  controller's election in the same namespace. */}}
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "flotilla.fullname" . | quote }}]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "flotilla.suffixed" (list . "leader-election") }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "flotilla.suffixed" (list . "leader-election") }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ include "flotilla.namespace" $ }}
{{- end }}
{{- end }}
{{- end -}}
