{{/*
The chart's name, and the full name every object's name starts with: the
release name, followed by the chart name unless the release name contains it.
*/}}
{{- define "storybus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "storybus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The operator's name: its Deployment, ServiceAccount, ClusterRole and Lease.
*/}}
{{- define "storybus.operatorName" -}}
{{- printf "%s-operator" (include "storybus.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{- define "storybus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "storybus.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels. The selector includes component=operator: the bus pods of a Tenant
named like the release also carry name=storybus and instance=<tenant>.
*/}}
{{- define "storybus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "storybus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "storybus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "storybus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: storybus
{{- end }}

{{/*
The operator's image: repository@digest, or repository:tag (the chart's
appVersion unless image.tag is set).
*/}}
{{- define "storybus.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The bus pods' image (--bus-image): busImage, or the operator's own image.
*/}}
{{- define "storybus.busImage" -}}
{{- default (include "storybus.image" .) .Values.busImage }}
{{- end }}

{{/*
The leader election Lease: one per release, so two releases in a namespace
never share a leader.
*/}}
{{- define "storybus.leaderElectionID" -}}
{{- printf "%s.bus.storybus.io" (include "storybus.operatorName" .) }}
{{- end }}

{{/*
The namespaces the operator watches, comma-separated: watchNamespaces and
watchNamespace together, without duplicates. Empty means every namespace.
*/}}
{{- define "storybus.watchNamespaces" -}}
{{- $l := concat (.Values.watchNamespaces | default list) (compact (list .Values.watchNamespace)) | uniq }}
{{- join "," $l }}
{{- end }}

{{/*
A map as key=value pairs, comma-separated and sorted: the form of the
operator's map flags (--pod-monitor-labels).
*/}}
{{- define "storybus.keyValues" -}}
{{- $l := list }}
{{- range $k, $v := . }}
{{- $l = append $l (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $l }}
{{- end }}

{{/*
An image's repository: the reference without its tag or digest
("ghcr.io/storybus/storybus:1.2" and "…@sha256:…" are
"ghcr.io/storybus/storybus"; a registry's port is kept).
*/}}
{{- define "storybus.imageRepository" -}}
{{- regexReplaceAll "(@sha256:[0-9a-f]+|:[^:/@]+)$" . "" }}
{{- end }}
