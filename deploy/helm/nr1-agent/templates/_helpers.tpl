{{- define "nr1-agent.labels" -}}
app.kubernetes.io/name: nr1-agent
{{- end -}}
