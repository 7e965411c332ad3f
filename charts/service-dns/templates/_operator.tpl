{{/* What service-dns needs of the API: read Services, and with publishHeadless the EndpointSlices of headless ones (their addresses). */}}
{{- define "service-dns.rules" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch"]
{{- if .Values.route53.publishHeadless }}
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
{{- end }}
{{- end -}}

{{- define "service-dns.args" -}}
{{- /* --hosted-zone-id adds a zone each time it is given (several zones),
  so extraArgs cannot override it the way they override other flags. */}}
{{- $zoneInExtraArgs := false }}
{{- if kindIs "map" .Values.extraArgs }}
{{- $zoneInExtraArgs = hasKey .Values.extraArgs "hosted-zone-id" }}
{{- else }}
{{- range .Values.extraArgs }}
{{- if hasPrefix "--hosted-zone-id" (toString .) }}
{{- $zoneInExtraArgs = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if $zoneInExtraArgs }}
{{- fail "extraArgs sets --hosted-zone-id, which adds a zone to route53.hostedZoneId/hostedZoneIds rather than replacing it: set route53.hostedZoneId (and route53.hostedZoneIds for more zones) instead" }}
{{- end }}
{{- with .Values.route53 }}
{{- if not (or .hostedZoneId .hostedZoneIds .domainName) }}
{{- fail "service-dns needs a hosted zone: set route53.hostedZoneId (e.g. Z0123456789ABC), route53.hostedZoneIds or route53.domainName (e.g. example.com)" }}
{{- end }}
{{- if .hostedZoneId }}
- {{ printf "--hosted-zone-id=%s" (include "flotilla.value" .hostedZoneId) | quote }}
{{- end }}
{{- range .hostedZoneIds }}
- {{ printf "--hosted-zone-id=%s" (include "flotilla.value" .) | quote }}
{{- end }}
{{- if .domainName }}
- {{ printf "--domain-name=%s" (include "flotilla.value" .domainName) | quote }}
{{- end }}
- {{ printf "--domain-prefix=%s" (include "flotilla.value" .domainPrefix) | quote }}
- {{ printf "--hostname-template=%s" (include "flotilla.value" .hostnameTemplate) | quote }}
- {{ printf "--ttl=%s" (include "flotilla.value" .ttl) | quote }}
- {{ printf "--max-ttl=%s" (include "flotilla.value" .maxTtl) | quote }}
- {{ printf "--hostname-annotations=%s" (include "flotilla.value" .hostnameAnnotations) | quote }}
- {{ printf "--max-hostnames-per-service=%s" (include "flotilla.value" .maxHostnamesPerService) | quote }}
{{- if .publishHeadless }}
- --publish-headless
{{- end }}
{{- if eq (toString .aliasLoadBalancers) "false" }}
- --alias-load-balancers=false
{{- end }}
- {{ printf "--pod-hostname-template=%s" (include "flotilla.value" .podHostnameTemplate) | quote }}
- {{ printf "--max-endpoints-per-service=%s" (include "flotilla.value" .maxEndpointsPerService) | quote }}
- {{ printf "--handover-grace=%s" (include "flotilla.value" .handoverGrace) | quote }}
{{- if .ownerId }}
- {{ printf "--owner-id=%s" (include "flotilla.value" .ownerId) | quote }}
{{- end }}
{{- if .adoptExternalDnsOwner }}
- {{ printf "--adopt-external-dns-owner=%s" (include "flotilla.value" .adoptExternalDnsOwner) | quote }}
{{- if .adoptExternalDnsTxtPrefix }}
- {{ printf "--adopt-external-dns-txt-prefix=%s" (include "flotilla.value" .adoptExternalDnsTxtPrefix) | quote }}
{{- end }}
{{- if .adoptExternalDnsTxtSuffix }}
- {{ printf "--adopt-external-dns-txt-suffix=%s" (include "flotilla.value" .adoptExternalDnsTxtSuffix) | quote }}
{{- end }}
{{- end }}
- {{ printf "--policy=%s" (include "flotilla.value" .policy) | quote }}
- {{ printf "--interval=%s" (include "flotilla.value" .interval) | quote }}
- {{ printf "--route53-rps=%s" (include "flotilla.value" .rps) | quote }}
{{- if .dryRun }}
- --dry-run
{{- end }}
{{- if .serviceSelector }}
- {{ printf "--service-selector=%s" (include "flotilla.value" .serviceSelector) | quote }}
{{- end }}
{{- end }}
{{- if .Values.watchNamespace }}
- {{ printf "--watch-namespace=%s" (include "flotilla.value" .Values.watchNamespace) | quote }}
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
  name: {{ include "flotilla.suffixed" (list . "cluster-id") }}
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
  name: {{ include "flotilla.suffixed" (list . "cluster-id") }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "flotilla.suffixed" (list . "cluster-id") }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ include "flotilla.namespace" $ }}
{{- end }}
{{- end -}}

{{/*
With hostnameAnnotations=namespace-allowed the operator reads each
Namespace's flotilla.dev/allowed-hostnames (metadata only): list and watch
on namespaces, cluster-scoped, so a ClusterRole even when watchNamespace
makes the rest a Role — then narrowed to that one Namespace (the operator
watches it by a metadata.name field selector, which RBAC's resourceNames
matches).
*/}}
{{- define "service-dns.namespacesRbac" -}}
{{- if and .Values.rbac.create (eq (.Values.route53.hostnameAnnotations | toString) "namespace-allowed") }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "flotilla.suffixed" (list . "namespaces") }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: ["namespaces"]
    {{- with .Values.watchNamespace }}
    resourceNames: [{{ . | quote }}]
    {{- end }}
    verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "flotilla.suffixed" (list . "namespaces") }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "flotilla.suffixed" (list . "namespaces") }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ include "flotilla.namespace" $ }}
{{- end }}
{{- end -}}

{{/* Route53 (HTTPS, anywhere: AWS publishes no fixed addresses). */}}
{{- define "service-dns.egress" -}}
- ports:
    - port: 443
      protocol: TCP
{{- end -}}

{{/* service-dns's alerts (see flotilla.prometheusRule). */}}
{{- define "service-dns.alerts" -}}
{{- $sel := .sel }}
- alert: FlotillaServiceDnsSyncStale
  expr: time() - max(flotilla_service_dns_last_successful_sync_timestamp_seconds{ {{- $sel -}} }) > {{ include "flotilla.value" .ctx.Values.prometheusRule.syncStaleSeconds }}
  for: 5m
  labels:
    severity: critical
  annotations:
    summary: {{ printf "%s has not finished a sync without error for %v s: Service changes are not reaching Route53" .name .ctx.Values.prometheusRule.syncStaleSeconds | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaServiceDnsSyncStale") }}
- alert: FlotillaServiceDnsRoute53Errors
  expr: sum(rate(flotilla_service_dns_route53_requests_total{ {{- $sel -}} ,result=~"error|throttled"}[10m])) / sum(rate(flotilla_service_dns_route53_requests_total{ {{- $sel -}} }[10m])) > 0.2
  for: 15m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: over 20%% of Route53 requests fail or are throttled" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaServiceDnsRoute53Errors") }}
- alert: FlotillaServiceDnsConflicts
  expr: max(flotilla_service_dns_conflicts{ {{- $sel -}} }) > 0
  for: 30m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: {{ $value }} names are wanted by two Services or held by records it does not own" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaServiceDnsConflicts") }}
- alert: FlotillaServiceDnsQuarantined
  expr: max(flotilla_service_dns_quarantined_names{ {{- $sel -}} }) > 0
  for: 30m
  labels:
    severity: warning
  annotations:
    summary: {{ printf "%s: Route53 keeps refusing {{ $value }} names" .name | quote }}
    runbook_url: {{ include "flotilla.runbook" (dict "ctx" .ctx "alert" "FlotillaServiceDnsQuarantined") }}
{{- end -}}

{{/* service-dns's dashboard panels (see flotilla.dashboard). */}}
{{- define "service-dns.dashboardPanels" -}}
- title: "Records managed"
  expr: {{ printf "max(flotilla_service_dns_managed_records{%s})" .sel | quote }}
  unit: short
- title: "Route53 requests per second, by result"
  expr: {{ printf "sum by (operation, result) (rate(flotilla_service_dns_route53_requests_total{%s}[5m]))" .sel | quote }}
  unit: reqps
- title: "Route53 answer time, p99"
  expr: {{ printf "histogram_quantile(0.99, sum by (le, operation) (rate(flotilla_service_dns_route53_request_duration_seconds_bucket{%s}[5m])))" .sel | quote }}
  unit: s
- title: "Seconds since the last good sync"
  expr: {{ printf "time() - max(flotilla_service_dns_last_successful_sync_timestamp_seconds{%s})" .sel | quote }}
  unit: s
- title: "Conflicts and quarantined names"
  expr: {{ printf "max(flotilla_service_dns_conflicts{%s}) + max(flotilla_service_dns_quarantined_names{%s})" .sel .sel | quote }}
  unit: short
{{- end -}}
