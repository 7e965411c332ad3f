{{/*
Names and labels. Every template here runs in the context of the operator
chart that includes it (its .Chart, .Values, .Release).
*/}}
{{- define "flotilla.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flotilla.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "flotilla.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "flotilla.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
fullname-<suffix>, the fullname shortened so that the whole still fits 63
characters (a Service name is a DNS label). Call with (list . "metrics").
*/}}
{{- define "flotilla.suffixed" -}}
{{- $suffix := index . 1 -}}
{{- $room := sub 62 (len $suffix) | int -}}
{{- printf "%s-%s" (include "flotilla.fullname" (index . 0) | trunc $room | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "flotilla.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flotilla.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The helm.sh/chart label's value: <name>-<version>, at most 63 characters. */}}
{{- define "flotilla.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flotilla.labels" -}}
helm.sh/chart: {{ include "flotilla.chart" . }}
{{ include "flotilla.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/component: operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The namespace of every namespaced object of the release (namespaceOverride,
else the release's): the Deployment, its ServiceAccount, Service, Roles,
PodDisruptionBudget, NetworkPolicy, and the monitors' and rules' default.
*/}}
{{- define "flotilla.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* The replicas the Deployment runs: one without leader election (two
would both act). */}}
{{- define "flotilla.replicas" -}}
{{- if .Values.leaderElection.enabled }}{{ int .Values.replicaCount }}{{ else }}1{{ end -}}
{{- end -}}

{{/* "true" when the PodDisruptionBudget is rendered: as podDisruptionBudget.enabled
says, or, left unset (null), whenever more than one replica runs (a budget
over one pod would block every node drain). */}}
{{- define "flotilla.pdbEnabled" -}}
{{- $e := .Values.podDisruptionBudget.enabled -}}
{{- if kindIs "bool" $e }}{{ $e }}{{ else }}{{ gt (int (include "flotilla.replicas" .)) 1 }}{{ end -}}
{{- end -}}

{{- define "flotilla.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flotilla.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* global.* wins over the chart's own image settings when set; image.digest,
when set, pins the image (registry/repository@digest) whatever the tags say. */}}
{{- define "flotilla.image" -}}
{{- $global := default dict .Values.global -}}
{{- $g := default dict $global.image -}}
{{- $registry := default .Values.image.registry (default $global.imageRegistry $g.registry) -}}
{{- if .Values.image.digest -}}
{{- printf "%s/%s@%s" $registry .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $g.tag -}}
{{- printf "%s/%s:%s" $registry .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "flotilla.pullPolicy" -}}
{{- $g := default dict (default dict .Values.global).image -}}
{{- default .Values.image.pullPolicy $g.pullPolicy -}}
{{- end -}}

{{- define "flotilla.logFormat" -}}
{{- default .Values.logFormat (default dict .Values.global).logFormat -}}
{{- end -}}

{{- define "flotilla.logLevel" -}}
{{- default .Values.logLevel (default dict .Values.global).logLevel -}}
{{- end -}}

{{- define "flotilla.pullSecrets" -}}
{{- $secrets := concat (default list (default dict .Values.global).imagePullSecrets) (default list .Values.imagePullSecrets) -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets }}
  - name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A value as a flag's text. YAML numbers reach templates as float64, which
"%v" prints as 2e+06: a whole number prints as an integer instead.
*/}}
{{- define "flotilla.value" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end -}}

{{/*
The operator's command line: the common flags of CONVENTIONS.md, then the
operator's own ("<chart>.args"), then extraArgs. Every operator takes the
last of a repeated flag (as Go's flag package does), so extraArgs override
what the chart sets. extraArgs is a list of flags (["--ttl=60"]) or a map
({ttl: 60} renders --ttl=60).
*/}}
{{- define "flotilla.args" -}}
{{- if eq (int .Values.metrics.port) (int .Values.healthProbePort) }}
{{- fail (printf "metrics.port and healthProbePort are both %v: the operator needs two ports" .Values.metrics.port) }}
{{- end }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
- --health-probe-bind-address=:{{ .Values.healthProbePort }}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-election-namespace={{ include "flotilla.namespace" $ }}
- --leader-election-id={{ include "flotilla.fullname" . }}
{{- with .Values.leaderElection }}
{{- if .enabled }}
- --leader-elect-lease-duration={{ .leaseDuration }}
- --leader-elect-renew-deadline={{ .renewDeadline }}
- --leader-elect-retry-period={{ .retryPeriod }}
{{- end }}
{{- end }}
- --log-format={{ include "flotilla.logFormat" . }}
- --log-level={{ include "flotilla.logLevel" . }}
{{- /* In-flight work gets the pod's grace period less 5 s to finish, so
the process exits (non-zero if cut off) before the kubelet kills it. */}}
- --graceful-shutdown-timeout={{ min 3600 (max 1 (sub (int .Values.terminationGracePeriodSeconds) 5)) }}s
{{- $own := include (printf "%s.args" .Chart.Name) . | trim }}
{{- if $own }}
{{ $own }}
{{- end }}
{{- if kindIs "map" .Values.extraArgs }}
{{- range $flag, $value := .Values.extraArgs }}
- {{ printf "--%s=%s" $flag (include "flotilla.value" $value) | quote }}
{{- end }}
{{- else }}
{{- range .Values.extraArgs }}
- {{ include "flotilla.value" . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Fail closed on the admission policy: with admissionPolicy.enabled (the
default) the chart renders only where the API serves
ValidatingAdmissionPolicy, instead of leaving the policy out and the
powers it guards open to anyone who may write the resource. `helm template`
answers for a client-only Kubernetes unless told otherwise: pass
--kube-version and --api-versions as your cluster would answer.
*/}}
{{- define "flotilla.requireAdmissionPolicyApi" -}}
{{- if not (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") }}
{{- fail (printf "%s: admissionPolicy.enabled=true needs the ValidatingAdmissionPolicy API (admissionregistration.k8s.io/v1, Kubernetes 1.30 or newer), which the target does not serve. Upgrade the cluster; with helm template, pass --kube-version and --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy as your cluster would answer; or set admissionPolicy.enabled=false, knowing that anyone who may write the resource then gets the powers it guards (see the chart's README)" .Chart.Name) }}
{{- end }}
{{- end -}}

{{/*
The admission policy that guards an operator's wider powers (a chart with
one defines "<chart>.admissionPolicySuffix"): its name, the flag that makes
the operator refuse those powers while the policy or its binding is
missing, and the RBAC to read the two, by name only (a ClusterRole: both
are cluster-scoped, so even where watchNamespace makes the rest a Role).
*/}}
{{- define "flotilla.admissionPolicyName" -}}
{{- include "flotilla.suffixed" (list . (include (printf "%s.admissionPolicySuffix" .Chart.Name) .)) -}}
{{- end -}}

{{- define "flotilla.admissionGuardArgs" -}}
{{- if .Values.admissionPolicy.enabled }}
- {{ printf "--require-admission-policy=%s" (include "flotilla.admissionPolicyName" .) | quote }}
{{- end }}
{{- end -}}

{{- define "flotilla.admissionGuardRbac" -}}
{{- if and .Values.rbac.create .Values.admissionPolicy.enabled }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "flotilla.suffixed" (list . "admission-policy") }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
rules:
  - apiGroups: ["admissionregistration.k8s.io"]
    resources: ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
    resourceNames: [{{ include "flotilla.admissionPolicyName" . | quote }}]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "flotilla.suffixed" (list . "admission-policy") }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "flotilla.suffixed" (list . "admission-policy") }}
subjects:
  - kind: ServiceAccount
    name: {{ include "flotilla.serviceAccountName" . }}
    namespace: {{ include "flotilla.namespace" $ }}
{{- end }}
{{- end -}}
