{{/*
toolmesh-sidecar: named templates that add toolmesh's sidecar to a tool's
own workload. Each takes the including chart's root context (`.`) and reads
its values under `toolmesh-sidecar:` (this library's defaults, merged with
the chart's own). In the chart that depends on this library:

  templates/deployment.yaml, in the pod template:
    metadata.annotations:  {{- include "toolmesh-sidecar.podAnnotations" . | nindent 8 }}
    spec.containers:       {{- include "toolmesh-sidecar.container" . | nindent 8 }}
    spec.volumes:          {{- include "toolmesh-sidecar.volume" . | nindent 8 }}
  templates/toolmesh-sidecar.yaml:
    {{ include "toolmesh-sidecar.configmap" . }}

See examples/charts/inventory-tool for a whole chart.
*/}}

{{/* Checks the sidecar's values; fails the render with what to write. */}}
{{- define "toolmesh-sidecar.check" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- if not $v }}
{{- fail "toolmesh-sidecar: no `toolmesh-sidecar:` values: depend on the toolmesh-sidecar chart under its own name (no alias) in Chart.yaml, and run `helm dependency update`" }}
{{- end }}
{{- if not $v.tools }}
{{- fail "toolmesh-sidecar: toolmesh-sidecar.tools is empty: list the tools this pod serves, e.g. [{name: lookup, description: ..., input_schema: {...}, backend: {http: {url: \"http://127.0.0.1:8080/lookup\"}}}] (README, \"The YAML file\")" }}
{{- end }}
{{- end }}

{{/* The including chart's full name (the usual rule). */}}
{{- define "toolmesh-sidecar.parentFullname" -}}
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

{{/* Name of the ConfigMap holding the sidecar's YAML. */}}
{{- define "toolmesh-sidecar.configMapName" -}}
{{- printf "%s-toolmesh-sidecar" (include "toolmesh-sidecar.parentFullname" . | trunc 46 | trimSuffix "-") }}
{{- end }}

{{/* The sidecar's YAML file: the tools, rendered with `tpl`. */}}
{{- define "toolmesh-sidecar.config" -}}
{{- include "toolmesh-sidecar.check" . }}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- tpl (toYaml (dict "tools" $v.tools)) . }}
{{- end }}

{{/* The ConfigMap object (a whole document). */}}
{{- define "toolmesh-sidecar.configmap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "toolmesh-sidecar.configMapName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
    app.kubernetes.io/instance: {{ .Release.Name }}
    app.kubernetes.io/managed-by: {{ .Release.Service }}
    app.kubernetes.io/component: toolmesh-sidecar
    app.kubernetes.io/part-of: toolmesh
data:
  tools.yaml: |
    {{- include "toolmesh-sidecar.config" . | nindent 4 }}
{{- end }}

{{/* Pod annotations: a changed tools YAML rolls the pods. */}}
{{- define "toolmesh-sidecar.podAnnotations" -}}
checksum/toolmesh-sidecar: {{ include "toolmesh-sidecar.config" . | sha256sum | trunc 16 | quote }}
{{- end }}

{{/* The volumes of the sidecar (list items): its YAML, and the registry's
token when `executeToken.existingSecret` is set. */}}
{{- define "toolmesh-sidecar.volume" -}}
{{- $v := index .Values "toolmesh-sidecar" -}}
- name: toolmesh-sidecar
  configMap:
    name: {{ include "toolmesh-sidecar.configMapName" . }}
{{- with $v.executeToken.existingSecret }}
- name: toolmesh-sidecar-execute-token
  secret:
    secretName: {{ . }}
    defaultMode: 0444
    items:
      - key: {{ $v.executeToken.existingSecretKey }}
        path: token
{{- end }}
{{- end }}

{{/* The sidecar container (one list item). */}}
{{- define "toolmesh-sidecar.container" -}}
{{- include "toolmesh-sidecar.check" . }}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- $port := int $v.port -}}
- name: toolmesh-sidecar
  {{- if $v.image.digest }}
  image: {{ printf "%s@%s" $v.image.repository $v.image.digest | quote }}
  {{- else }}
  image: {{ printf "%s:%s" $v.image.repository (toString $v.image.tag) | quote }}
  {{- end }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  # The image's entrypoint is the registry; the sidecar is beside it.
  command: ["/usr/local/bin/toolmesh-sidecar"]
  env:
    - name: TOOLMESH_SIDECAR_CONFIG
      value: /etc/toolmesh-sidecar/tools.yaml
    - name: TOOLMESH_REGISTRY
      value: {{ $v.registry | quote }}
    - name: TOOLMESH_SIDECAR_LISTEN
      value: {{ printf "%s:%d" $v.listenHost $port | quote }}
    {{- if $v.advertise }}
    - name: TOOLMESH_ADVERTISE
      value: {{ $v.advertise | quote }}
    {{- else }}
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: TOOLMESH_ADVERTISE
      value: {{ printf "http://$(POD_IP):%d" $port | quote }}
    {{- end }}
    - name: TOOLMESH_INSTANCE_ID
    {{- if $v.instanceId }}
      value: {{ $v.instanceId | quote }}
    {{- else }}
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- end }}
    - name: RUST_LOG
      value: {{ $v.log | quote }}
    - name: TOOLMESH_LOG_FORMAT
      value: {{ $v.logFormat | quote }}
    {{- if $v.executeToken.existingSecret }}
    - name: TOOLMESH_EXECUTE_TOKEN_FILE
      value: /var/run/secrets/toolmesh-sidecar/execute-token/token
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: toolmesh
      containerPort: {{ $port }}
      protocol: TCP
  readinessProbe:
    grpc:
      port: {{ $port }}
    {{- toYaml $v.readinessProbe | nindent 4 }}
  livenessProbe:
    tcpSocket:
      port: {{ $port }}
    {{- toYaml $v.livenessProbe | nindent 4 }}
  {{- if $v.preStop.enabled }}
  lifecycle:
    preStop:
      # Withdraw from the registry (and wait for it) before SIGTERM; the
      # image has no shell, so the hook runs the sidecar binary.
      exec:
        command: ["/usr/local/bin/toolmesh-sidecar", "withdraw", "--timeout", {{ $v.preStop.timeout | quote }}]
  {{- end }}
  {{- with $v.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: toolmesh-sidecar
      mountPath: /etc/toolmesh-sidecar
      readOnly: true
    {{- if $v.executeToken.existingSecret }}
    - name: toolmesh-sidecar-execute-token
      mountPath: /var/run/secrets/toolmesh-sidecar/execute-token
      readOnly: true
    {{- end }}
    {{- with $v.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
