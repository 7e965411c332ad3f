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
