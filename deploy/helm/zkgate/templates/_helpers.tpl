{{- define "zkgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "zkgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "zkgate.labels" -}}
{{ include "zkgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "zkgate.digestSecret" -}}
{{- if .Values.zookeeper.digestExistingSecret -}}
{{- .Values.zookeeper.digestExistingSecret -}}
{{- else -}}
{{- printf "%s-zk-digest" (include "zkgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "zkgate.saslSecret" -}}
{{- if .Values.zookeeper.sasl.existingSecret -}}
{{- .Values.zookeeper.sasl.existingSecret -}}
{{- else -}}
{{- printf "%s-zk-sasl" (include "zkgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "zkgate.tlsSecret" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "zkgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The one TOML file the gateway reads: every serve setting, no environment overrides. */}}
{{- define "zkgate.config" -}}
zk = {{ .Values.zookeeper.connect | quote }}
root = {{ .Values.zookeeper.root | quote }}
listen = {{ printf "0.0.0.0:%d" (int .Values.service.grpcPort) | quote }}
http = {{ printf "0.0.0.0:%d" (int .Values.service.httpPort) | quote }}
session_timeout = {{ .Values.zookeeper.sessionTimeout | quote }}
zk_sessions = {{ int .Values.zookeeper.sessions }}
{{- if .Values.zookeeper.sasl.user }}
zk_sasl_user = {{ .Values.zookeeper.sasl.user | quote }}
zk_sasl_password_file = "/etc/zkgate-zk/password"
{{- end }}
{{- if .Values.zookeeper.tls.enabled }}
zk_tls_ca = "/etc/zkgate-zk-tls/ca.crt"
{{- if .Values.zookeeper.tls.clientCertificate }}
zk_tls_cert = "/etc/zkgate-zk-tls/tls.crt"
zk_tls_key = "/etc/zkgate-zk-tls/tls.key"
{{- end }}
{{- end }}
{{- if .Values.tls.enabled }}
tls_cert = "/etc/zkgate-tls/tls.crt"
tls_key = "/etc/zkgate-tls/tls.key"
{{- if .Values.tls.clientCA }}
tls_client_ca = "/etc/zkgate-tls/ca.crt"
{{- end }}
{{- end }}
{{- range $k, $v := .Values.extraConfig }}
{{ $k }} = {{ if kindIs "string" $v }}{{ $v | quote }}{{ else }}{{ $v }}{{ end }}
{{- end }}
{{- end -}}
