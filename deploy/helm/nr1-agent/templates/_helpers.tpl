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

{{- /* What the release's objects are called: the release's name where it names the chart
(helm install nr1-agent …, the objects are nr1-agent), else <release>-nr1-agent;
nameOverride stands for the chart's name in it, fullnameOverride for the whole. At most 40
characters (the schema): the longest suffix (-namespace-exemption) still fits in 63. The
selector and the DeviceClass keep their names whatever the release. */}}
{{- define "nr1-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}
