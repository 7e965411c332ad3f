{{/* What service-dns needs of the API: read Services. */}}
{{- define "service-dns.rules" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{- define "service-dns.args" -}}
{{- with .Values.route53 }}
{{- if .hostedZoneId }}
- {{ printf "--hosted-zone-id=%v" .hostedZoneId | quote }}
{{- end }}
{{- if .domainName }}
- {{ printf "--domain-name=%v" .domainName | quote }}
{{- end }}
- {{ printf "--domain-prefix=%v" .domainPrefix | quote }}
- {{ printf "--hostname-template=%v" .hostnameTemplate | quote }}
- {{ printf "--ttl=%v" .ttl | quote }}
{{- if .ownerId }}
- {{ printf "--owner-id=%v" .ownerId | quote }}
{{- end }}
{{- if .adoptExternalDnsOwner }}
- {{ printf "--adopt-external-dns-owner=%v" .adoptExternalDnsOwner | quote }}
{{- if .adoptExternalDnsTxtPrefix }}
- {{ printf "--adopt-external-dns-txt-prefix=%v" .adoptExternalDnsTxtPrefix | quote }}
{{- end }}
{{- if .adoptExternalDnsTxtSuffix }}
- {{ printf "--adopt-external-dns-txt-suffix=%v" .adoptExternalDnsTxtSuffix | quote }}
{{- end }}
{{- end }}
- {{ printf "--policy=%v" .policy | quote }}
- {{ printf "--interval=%v" .interval | quote }}
- {{ printf "--route53-rps=%v" .rps | quote }}
{{- if .dryRun }}
- --dry-run
{{- end }}
{{- if .serviceSelector }}
- {{ printf "--service-selector=%v" .serviceSelector | quote }}
{{- end }}
{{- end }}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%v" .Values.watchNamespace | quote }}
{{- end }}
{{- end -}}

{{/* AWS: region, optional static credentials from a Secret, optional endpoint. IRSA needs only serviceAccount.annotations. */}}
{{- define "service-dns.env" -}}
{{- with .Values.aws }}
{{- if .region }}
- name: AWS_REGION
  value: {{ .region | quote }}
{{- end }}
{{- if .credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- if .endpointUrl }}
- name: AWS_ENDPOINT_URL_ROUTE_53
  value: {{ .endpointUrl | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Without an ownerId the operator derives one from the kube-system
Namespace's UID: get on that one Namespace (cluster-scoped, so a
ClusterRole even when watchNamespace makes the rest a Role).
*/}}
{{- define "service-dns.clusterIdRbac" -}}
{{- if and .Values.rbac.create (not .Values.route53.ownerId) }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "flotilla.fullname" . }}-cluster-id
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: ["namespaces"]
    resourceNames: ["kube-system"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "flotilla.fullname" . }}-cluster-id
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "flotilla.fullname" . }}-cluster-id
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
{{- end -}}
