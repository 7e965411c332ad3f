{{/*
What config-copier needs of the API: its CopyRules (with status and the
finalizer that prunes copies when a rule is deleted), the ConfigMaps and
Secrets it copies from and to, and namespaces (metadata) to copy into.
*/}}
{{- define "config-copier.rules" -}}
- apiGroups: ["flotilla.dev"]
  resources: ["copyrules"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["flotilla.dev"]
  resources: ["copyrules/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["flotilla.dev"]
  resources: ["copyrules/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["configmaps", "secrets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{- define "config-copier.args" -}}
{{- end -}}

{{- define "config-copier.env" -}}
{{- end -}}
