{{- /* The selector of the DaemonSet, the Service and the NetworkPolicy, and what kubectl nr1
looks for: a DaemonSet's selector cannot change, so it stays this one label whatever
the release is called. */}}
{{- define "nr1-agent.selectorLabels" -}}
app.kubernetes.io/name: nr1-agent
{{- end -}}

{{- /* Kubernetes' recommended labels and Helm's, on every object and the agents' pods. */}}
{{- define "nr1-agent.labels" -}}
{{ include "nr1-agent.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nr1-agent
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}
