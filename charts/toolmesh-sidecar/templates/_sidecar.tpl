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
  templates/NOTES.txt (optional):
    {{ include "toolmesh-sidecar.notes" . }}

See examples/charts/inventory-tool for a whole chart.
*/}}

{{/* Checks the sidecar's values; fails the render with what to write. */}}
{{- define "toolmesh-sidecar.check" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- if not $v }}
{{- fail "toolmesh-sidecar: no `toolmesh-sidecar:` values: depend on the toolmesh-sidecar chart under its own name (no alias) in Chart.yaml, and run `helm dependency update`" }}
{{- end }}
{{- if and $v.registrationToken.enabled (not $v.registrationToken.existingSecret) (not (include "toolmesh-sidecar.registrySecret" .)) }}
{{- fail (printf "toolmesh-sidecar: no registration token: toolmesh-sidecar.registry (%s) names no registry Service of this release's namespace (%s), so the chart cannot read the token from the registry chart's Secret of generated credentials (a pod mounts Secrets of its own namespace only). Copy the token into this namespace and set toolmesh-sidecar.registrationToken.existingSecret (docs/kubernetes.md, \"Add a sidecar to a tool\"), or name the registry chart's Secret with toolmesh-sidecar.registrationToken.registrySecret, or set toolmesh-sidecar.registrationToken.enabled=false for a sidecar that registers by its client certificate" $v.registry .Release.Namespace) }}
{{- end }}
{{- if and $v.registryIdentity (not (and $v.tls.existingSecret $v.tls.clientCaSecret)) }}
{{- fail "toolmesh-sidecar: toolmesh-sidecar.registryIdentity needs TLS with client certificates: set toolmesh-sidecar.tls.existingSecret and toolmesh-sidecar.tls.clientCaSecret" }}
{{- end }}
{{- if and $v.tls.clientCaSecret (not $v.tls.existingSecret) }}
{{- fail "toolmesh-sidecar: toolmesh-sidecar.tls.clientCaSecret needs toolmesh-sidecar.tls.existingSecret (the sidecar's certificate and key)" }}
{{- end }}
{{- if and $v.admin.enabled (eq (int $v.admin.port) (int $v.port)) }}
{{- fail (printf "toolmesh-sidecar: toolmesh-sidecar.admin.port and toolmesh-sidecar.port are both %d: the admin HTTP server (metrics, /livez, /readyz) needs a port of its own. Change toolmesh-sidecar.admin.port (9091 by default)" (int $v.port)) }}
{{- end }}
{{- if not $v.tools }}
{{- fail "toolmesh-sidecar: toolmesh-sidecar.tools is empty: list the tools this pod serves, e.g. [{name: lookup, description: ..., input_schema: {...}, backend: {http: {url: \"http://127.0.0.1:8080/lookup\"}}}] (README, \"The YAML file\")" }}
{{- end }}
{{- end }}

{{/*
The registry chart's Secret of generated credentials the registration token
is read from (key `registration-token`): registrationToken.registrySecret,
else `<service>-credentials` when `registry` names a Service of this
release's namespace (`<service>`, `<service>.<namespace>` or
`<service>.<namespace>.svc[...]`, then the port), as the registry chart
names it (`<fullname>-credentials`, its Service being `<fullname>`, both
truncated alike); else nothing.
*/}}
{{- define "toolmesh-sidecar.registrySecret" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- if $v.registrationToken.registrySecret }}
{{- $v.registrationToken.registrySecret }}
{{- else }}
{{- $host := regexReplaceAll ":[0-9]+/?$" ($v.registry | trimPrefix "https://" | trimPrefix "http://") "" }}
{{- $labels := splitList "." $host }}
{{- $service := first $labels }}
{{- $here := or (eq (len $labels) 1) (and (eq (len $labels) 2) (eq (index $labels 1) .Release.Namespace)) (and (ge (len $labels) 3) (eq (index $labels 1) .Release.Namespace) (eq (index $labels 2) "svc")) }}
{{- if and $here (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $service) }}
{{- printf "%s-credentials" ($service | trunc 51 | trimSuffix "-") }}
{{- end }}
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

{{/*
Lines for the including chart's NOTES.txt: where the sidecar registers and
with which token, the image to build when it is still the unpublished
default, and the deprecated values still set.
*/}}
{{- define "toolmesh-sidecar.notes" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- $files := include "toolmesh-sidecar.secretFiles" . | fromYamlArray }}
The toolmesh sidecar announces this chart's tools to {{ $v.registry }}.
{{- range $files }}{{ if eq .name "registration-token" }}
It registers with the token in the Secret {{ .secret }} (key {{ (first .items).key }}).
{{- end }}{{ end }}
{{- if eq $v.image.repository "toolmesh" }}

The sidecar's image toolmesh:{{ $v.image.tag }} (toolmesh-sidecar.image.repository's default) is
published nowhere: build and push it (scripts/image.sh, podman push; see
docs/kubernetes.md, "Before you start: the image"), and set
toolmesh-sidecar.image.repository to where your cluster pulls it from.
{{- end }}
{{- if $v.executeToken.existingSecret }}

toolmesh-sidecar.executeToken is deprecated and ignored: the registry's calls
are authenticated by per-call grants, nothing to configure. Remove it from
your values (the Secret {{ $v.executeToken.existingSecret }} is no longer read).
{{- end }}
{{- if $v.insecure }}

toolmesh-sidecar.insecure is deprecated and ignored: every Execute is
authenticated by the registry's per-call grants. Remove it from your values.
{{- end }}
{{- end }}

{{/* Pod annotations: a changed tools YAML rolls the pods. */}}
{{- define "toolmesh-sidecar.podAnnotations" -}}
checksum/toolmesh-sidecar: {{ include "toolmesh-sidecar.config" . | sha256sum | trunc 16 | quote }}
{{- end }}

{{/* The volumes of the sidecar (list items): its YAML, and each Secret it
reads a file of (tokens, certificates). */}}
{{- define "toolmesh-sidecar.volume" -}}
{{- $v := index .Values "toolmesh-sidecar" -}}
- name: toolmesh-sidecar
  configMap:
    name: {{ include "toolmesh-sidecar.configMapName" . }}
{{- range $volume := include "toolmesh-sidecar.secretFiles" . | fromYamlArray }}
- name: toolmesh-sidecar-{{ $volume.name }}
  secret:
    secretName: {{ $volume.secret }}
    defaultMode: 0444
    items:
      {{- range $volume.items }}
      - key: {{ .key }}
        path: {{ .path }}
      {{- end }}
{{- end }}
{{- end }}

{{/*
The sidecar's files from Secrets, as a YAML list of {name, secret, items,
env}: each is mounted at /var/run/secrets/toolmesh-sidecar/<name>, and each
env names a variable and the file it points at.
*/}}
{{- define "toolmesh-sidecar.secretFiles" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- $files := list }}
{{- if $v.registrationToken.enabled }}
{{- $secret := $v.registrationToken.existingSecret | default (include "toolmesh-sidecar.registrySecret" .) }}
{{- $key := ternary $v.registrationToken.existingSecretKey "registration-token" (not (empty $v.registrationToken.existingSecret)) }}
{{- $files = append $files (dict "name" "registration-token" "secret" $secret "items" (list (dict "key" $key "path" "token")) "env" (dict "TOOLMESH_REGISTRATION_TOKEN_FILE" "token")) }}
{{- end }}
{{- with $v.tls.existingSecret }}
{{- $files = append $files (dict "name" "tls" "secret" . "items" (list (dict "key" $v.tls.certKey "path" "tls.crt") (dict "key" $v.tls.keyKey "path" "tls.key")) "env" (dict "TOOLMESH_SIDECAR_TLS_CERT_FILE" "tls.crt" "TOOLMESH_SIDECAR_TLS_KEY_FILE" "tls.key")) }}
{{- end }}
{{- with $v.tls.clientCaSecret }}
{{- $files = append $files (dict "name" "tls-client-ca" "secret" . "items" (list (dict "key" $v.tls.clientCaSecretKey "path" "ca.crt")) "env" (dict "TOOLMESH_SIDECAR_TLS_CLIENT_CA_FILE" "ca.crt")) }}
{{- end }}
{{- with $v.registryTls.caSecret }}
{{- $files = append $files (dict "name" "registry-ca" "secret" . "items" (list (dict "key" $v.registryTls.caSecretKey "path" "ca.crt")) "env" (dict "TOOLMESH_REGISTRY_CA_FILE" "ca.crt")) }}
{{- end }}
{{- with $v.registryTls.clientCertSecret }}
{{- $files = append $files (dict "name" "registry-client" "secret" . "items" (list (dict "key" "tls.crt" "path" "tls.crt") (dict "key" "tls.key" "path" "tls.key")) "env" (dict "TOOLMESH_REGISTRY_CERT_FILE" "tls.crt" "TOOLMESH_REGISTRY_KEY_FILE" "tls.key")) }}
{{- end }}
{{- toYaml $files }}
{{- end }}

{{/* The sidecar's probe handler on the admin port; `root`, `path` given. */}}
{{- define "toolmesh-sidecar.adminProbe" -}}
{{- $v := index .root.Values "toolmesh-sidecar" }}
{{- $host := default $v.listenHost $v.admin.listenHost | trimPrefix "[" | trimSuffix "]" }}
httpGet:
  path: {{ .path }}
  port: toolmesh-admin
  scheme: HTTP
  {{- if or (eq $host "localhost") (eq $host "::1") (hasPrefix "127." $host) }}
  # Bound to loopback: the pod's (with hostNetwork, the node's).
  host: {{ $host | quote }}
  {{- end }}
{{- end }}

{{/*
The OpenTelemetry variables (env entries), when tracing.otlpEndpoint is
set; nothing otherwise (tracing off).
*/}}
{{- define "toolmesh-sidecar.tracingEnv" -}}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- $t := $v.tracing }}
{{- if $t.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $t.protocol | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ default (printf "%s-toolmesh-sidecar" (include "toolmesh-sidecar.parentFullname" . | trunc 46 | trimSuffix "-")) $t.serviceName | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ $t.sampler | quote }}
{{- if not (eq (toString $t.samplerArg) "") }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ toString $t.samplerArg | quote }}
{{- end }}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- $attributes := list (printf "k8s.namespace.name=%s" .Release.Namespace) "k8s.pod.name=$(K8S_POD_NAME)" }}
{{- range $key, $value := $t.resourceAttributes }}
{{- $attributes = append $attributes (printf "%s=%s" $key (toString $value)) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attributes | quote }}
{{- end }}
{{- end }}

{{/* The sidecar container (one list item). */}}
{{- define "toolmesh-sidecar.container" -}}
{{- include "toolmesh-sidecar.check" . }}
{{- $v := index .Values "toolmesh-sidecar" }}
{{- $port := int $v.port }}
{{- $files := include "toolmesh-sidecar.secretFiles" . | fromYamlArray -}}
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
      value: {{ printf "%s://$(POD_IP):%d" (ternary "https" "http" (not (empty $v.tls.existingSecret))) $port | quote }}
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
    {{- if $v.admin.enabled }}
    # Metrics, /livez and /readyz: plain HTTP, on a port of their own.
    - name: TOOLMESH_ADMIN_LISTEN
      value: {{ printf "%s:%d" (default $v.listenHost $v.admin.listenHost) (int $v.admin.port) | quote }}
    {{- end }}
    {{- with include "toolmesh-sidecar.tracingEnv" . }}
    # Traces over OTLP (the OpenTelemetry SDK's own variables).
    {{- . | nindent 4 }}
    {{- end }}
    {{- range $volume := $files }}
    {{- range $name, $file := $volume.env }}
    - name: {{ $name }}
      value: {{ printf "/var/run/secrets/toolmesh-sidecar/%s/%s" $volume.name $file }}
    {{- end }}
    {{- end }}
    {{- with $v.registryIdentity }}
    - name: TOOLMESH_REGISTRY_IDENTITY
      value: {{ . | quote }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: toolmesh
      containerPort: {{ $port }}
      protocol: TCP
    {{- if $v.admin.enabled }}
    - name: toolmesh-admin
      containerPort: {{ $v.admin.port }}
      protocol: TCP
    {{- end }}
  {{- if $v.admin.enabled }}
  # The admin port (plain HTTP, also with TLS on `port`): ready while
  # registered (/readyz), alive while it answers (/livez).
  readinessProbe:
    {{- include "toolmesh-sidecar.adminProbe" (dict "root" . "path" "/readyz") | nindent 4 }}
    {{- toYaml $v.readinessProbe | nindent 4 }}
  livenessProbe:
    {{- include "toolmesh-sidecar.adminProbe" (dict "root" . "path" "/livez") | nindent 4 }}
    {{- toYaml $v.livenessProbe | nindent 4 }}
  {{- else }}
  readinessProbe:
    {{- if $v.tls.existingSecret }}
    # Kubernetes' gRPC probes cannot speak TLS: whether the port accepts.
    tcpSocket:
      port: {{ $port }}
    {{- else }}
    grpc:
      port: {{ $port }}
    {{- end }}
    {{- toYaml $v.readinessProbe | nindent 4 }}
  livenessProbe:
    tcpSocket:
      port: {{ $port }}
    {{- toYaml $v.livenessProbe | nindent 4 }}
  {{- end }}
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
    {{- range $files }}
    - name: toolmesh-sidecar-{{ .name }}
      mountPath: /var/run/secrets/toolmesh-sidecar/{{ .name }}
      readOnly: true
    {{- end }}
    {{- with $v.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
