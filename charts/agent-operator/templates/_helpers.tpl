{{- define "agent-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "agent-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{- define "agent-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "agent-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "agent-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agent-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The sessions this install serves, as admission match constraints: its class label and, when
set, its namespaces (watchNamespaces, else rbac.sessionNamespaces).
*/}}
{{- define "agent-operator.sessionSelectors" -}}
{{- $namespaces := .Values.watchNamespaces | default .Values.rbac.sessionNamespaces -}}
objectSelector:
  {{- if .Values.sessionClass }}
  matchLabels:
    agent-operator.dev/class: {{ .Values.sessionClass | quote }}
  {{- else }}
  matchExpressions:
  - key: agent-operator.dev/class
    operator: DoesNotExist
  {{- end }}
{{- with $namespaces }}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values:
    {{- range . }}
    - {{ . | quote }}
    {{- end }}
{{- end }}
{{- end }}
