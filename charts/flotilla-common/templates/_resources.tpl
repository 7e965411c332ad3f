{{- define "flotilla.serviceAccount" -}}
{{- if .Values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "flotilla.serviceAccountName" . }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
  {{- with .Values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
{{- end }}
{{- end -}}

{{- define "flotilla.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "flotilla.suffixed" (list . "metrics") }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
  {{- with .Values.metrics.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: ClusterIP
  selector:
    {{- include "flotilla.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .Values.metrics.port }}
      targetPort: metrics
      protocol: TCP
{{- end -}}

{{- define "flotilla.serviceMonitor" -}}
{{- if .Values.metrics.serviceMonitor.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "flotilla.fullname" . }}
  namespace: {{ default (include "flotilla.namespace" $) .Values.metrics.serviceMonitor.namespace }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    {{- with .Values.metrics.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.metrics.serviceMonitor.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  namespaceSelector:
    matchNames: [{{ include "flotilla.namespace" $ | quote }}]
  selector:
    matchLabels:
      {{- include "flotilla.selectorLabels" . | nindent 6 }}
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ .Values.metrics.serviceMonitor.interval }}
      scrapeTimeout: {{ .Values.metrics.serviceMonitor.scrapeTimeout }}
      {{- with .Values.metrics.serviceMonitor }}
      {{- if .honorLabels }}
      honorLabels: true
      {{- end }}
      {{- with .relabelings }}
      relabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .metricRelabelings }}
      metricRelabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* A PodMonitor: for a Prometheus Operator that selects PodMonitors, or
scraping every replica without the metrics Service. */}}
{{- define "flotilla.podMonitor" -}}
{{- if .Values.metrics.podMonitor.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: {{ include "flotilla.fullname" . }}
  namespace: {{ default (include "flotilla.namespace" $) .Values.metrics.podMonitor.namespace }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    {{- with .Values.metrics.podMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.metrics.podMonitor.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  namespaceSelector:
    matchNames: [{{ include "flotilla.namespace" $ | quote }}]
  selector:
    matchLabels:
      {{- include "flotilla.selectorLabels" . | nindent 6 }}
  podMetricsEndpoints:
    - port: metrics
      path: /metrics
      interval: {{ .Values.metrics.podMonitor.interval }}
      scrapeTimeout: {{ .Values.metrics.podMonitor.scrapeTimeout }}
      {{- with .Values.metrics.podMonitor }}
      {{- if .honorLabels }}
      honorLabels: true
      {{- end }}
      {{- with .relabelings }}
      relabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .metricRelabelings }}
      metricRelabelings:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
{{- end }}
{{- end -}}

{{/*
An opt-in NetworkPolicy for the operator's pods: scrapes and probes in;
DNS, the API server and the operator's own egress ("<chart>.egress", e.g.
Route53 for service-dns) out, plus networkPolicy.extraEgress.
*/}}
{{- define "flotilla.networkPolicy" -}}
{{- if .Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "flotilla.fullname" . }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "flotilla.selectorLabels" . | nindent 6 }}
  policyTypes: ["Ingress", "Egress"]
  ingress:
    - ports:
        - port: metrics
          protocol: TCP
      {{- with .Values.networkPolicy.metricsFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    - ports:
        - port: health
          protocol: TCP
  egress:
    - ports:
        - port: 53
          protocol: UDP
        - port: 53
          protocol: TCP
    - to:
        {{- range .Values.networkPolicy.apiServer.cidrs }}
        - ipBlock:
            cidr: {{ . | quote }}
        {{- end }}
      ports:
        {{- range .Values.networkPolicy.apiServer.ports }}
        - port: {{ include "flotilla.value" . }}
          protocol: TCP
        {{- end }}
    {{- with (include (printf "%s.egress" .Chart.Name) . | trim) }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with .Values.networkPolicy.extraEgress }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end -}}

{{- define "flotilla.pdb" -}}
{{- if eq (include "flotilla.pdbEnabled" .) "true" }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "flotilla.fullname" . }}
  namespace: {{ include "flotilla.namespace" $ }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
spec:
  {{- if .Values.podDisruptionBudget.maxUnavailable }}
  maxUnavailable: {{ .Values.podDisruptionBudget.maxUnavailable }}
  {{- else }}
  minAvailable: {{ .Values.podDisruptionBudget.minAvailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "flotilla.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}
