{{/*
Names, labels and the checks every template shares.
*/}}

{{/* The chart's name, or nameOverride. */}}
{{- define "toolmesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the objects: fullnameOverride, else the release name,
followed by the chart's name unless the release name already contains it.
Truncated to 63 characters (DNS label); suffixed objects truncate further.
*/}}
{{- define "toolmesh.fullname" -}}
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

{{/* `<fullname>-<suffix>`, still a DNS label. */}}
{{- define "toolmesh.suffixed" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "toolmesh.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{- define "toolmesh.redisName" -}}
{{- include "toolmesh.suffixed" (list . "redis") }}
{{- end }}

{{- define "toolmesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "toolmesh.labels" -}}
helm.sh/chart: {{ include "toolmesh.chart" . }}
{{ include "toolmesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolmesh
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the release's pods (never change them on upgrade). */}}
{{- define "toolmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolmesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector of the registry's pods. */}}
{{- define "toolmesh.registrySelectorLabels" -}}
{{ include "toolmesh.selectorLabels" . }}
app.kubernetes.io/component: registry
{{- end }}

{{/* Labels of the admin Service (metrics), which the ServiceMonitor selects. */}}
{{- define "toolmesh.adminServiceLabels" -}}
{{ include "toolmesh.registrySelectorLabels" . }}
toolmesh.io/port: admin
{{- end }}

{{/* Selector of the internal Redis pod. */}}
{{- define "toolmesh.redisSelectorLabels" -}}
{{ include "toolmesh.selectorLabels" . }}
app.kubernetes.io/component: redis
{{- end }}

{{/* Selector of the helm test pod. */}}
{{- define "toolmesh.testSelectorLabels" -}}
{{ include "toolmesh.selectorLabels" . }}
app.kubernetes.io/component: test
{{- end }}

{{- define "toolmesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolmesh.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The toolmesh image: repository, then the digest or the tag. */}}
{{- define "toolmesh.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* "external", "internal" or "" (embedded). */}}
{{- define "toolmesh.redisMode" -}}
{{- if .Values.redis.internal.enabled }}internal{{- else if .Values.redis.url }}external{{- end }}
{{- end }}

{{/* The Redis URL the registry is given. */}}
{{- define "toolmesh.redisUrl" -}}
{{- if .Values.redis.internal.enabled }}
{{- printf "redis://%s:6379/0" (include "toolmesh.redisName" .) }}
{{- else }}
{{- .Values.redis.url }}
{{- end }}
{{- end }}

{{/* The Secret holding the Redis password, if any, and its key. */}}
{{- define "toolmesh.redisPasswordSecret" -}}
{{- if .Values.redis.internal.enabled }}
{{- include "toolmesh.redisName" . }}
{{- else if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if .Values.redis.password }}
{{- include "toolmesh.redisName" . }}
{{- end }}
{{- end }}

{{- define "toolmesh.redisPasswordKey" -}}
{{- if and (not .Values.redis.internal.enabled) .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretPasswordKey }}
{{- else }}redis-password{{- end }}
{{- end }}

{{/*
The internal Redis's password: the value, else the one already in the
cluster's Secret (kept across upgrades), else a new random one.
*/}}
{{- define "toolmesh.internalRedisPassword" -}}
{{- if .Values.redis.internal.password }}
{{- .Values.redis.internal.password }}
{{- else }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "toolmesh.redisName" .) }}
{{- if and $existing (index ($existing.data | default dict) "redis-password") }}
{{- index $existing.data "redis-password" | b64dec }}
{{- else }}
{{- randAlphaNum 32 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"true" when the chart creates a PodDisruptionBudget: as
podDisruptionBudget.enabled says, or when it is empty, whenever there can
be more than one replica (a budget over a single pod blocks node drains,
or protects nothing).
*/}}
{{- define "toolmesh.pdbOn" -}}
{{- $enabled := .Values.podDisruptionBudget.enabled }}
{{- if kindIs "invalid" $enabled }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicas) 1) }}true{{- end }}
{{- else if $enabled }}true{{- end }}
{{- end }}

{{/* Seconds Kubernetes waits after SIGTERM. */}}
{{- define "toolmesh.terminationGracePeriodSeconds" -}}
{{- $needed := add .Values.config.shutdownDelaySeconds .Values.config.shutdownGraceSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed 5 }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
Every combination of values the chart refuses, each with what to write
instead. Included by the Deployment, so a failed check fails the render.
*/}}
{{- define "toolmesh.validate" -}}
{{- $mode := include "toolmesh.redisMode" . }}
{{- if and .Values.redis.internal.enabled .Values.redis.url }}
{{- fail "toolmesh: redis.url and redis.internal.enabled are both set: use an external Redis (redis.url) or the in-chart one (redis.internal.enabled=true), not both" }}
{{- end }}
{{- if and (not $mode) (gt (int .Values.replicas) 1) (not .Values.autoscaling.enabled) }}
{{- fail (printf "toolmesh: replicas: %d needs Redis: without it each replica keeps a catalog of its own, and a tool announced to one replica is unknown to the others. Set redis.url (an external Redis, see docs/kubernetes.md) or redis.internal.enabled=true (one Redis in the release, for trying it out), or keep replicas: 1" (int .Values.replicas)) }}
{{- end }}
{{- if and (not $mode) .Values.autoscaling.enabled }}
{{- fail "toolmesh: autoscaling.enabled needs Redis: without it each replica keeps a catalog of its own. Set redis.url or redis.internal.enabled=true, or leave autoscaling off" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail (printf "toolmesh: autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- end }}
{{- if and .Values.autoscaling.enabled (kindIs "invalid" .Values.autoscaling.targetCPUUtilizationPercentage) (kindIs "invalid" .Values.autoscaling.targetMemoryUtilizationPercentage) }}
{{- fail "toolmesh: autoscaling.enabled needs a target: set autoscaling.targetCPUUtilizationPercentage or autoscaling.targetMemoryUtilizationPercentage" }}
{{- end }}
{{- if .Values.redis.url }}
{{- $url := urlParse .Values.redis.url }}
{{- if not (has $url.scheme (list "redis" "rediss")) }}
{{- fail (printf "toolmesh: redis.url %q is not a Redis URL: write redis://host:port/db, or rediss://host:port/db for TLS" .Values.redis.url) }}
{{- end }}
{{- if contains ":" ($url.userinfo | default "") }}
{{- fail "toolmesh: redis.url carries a password, which the registry refuses (it would show in the pod spec): put the password in a Secret named by redis.existingSecret, or in redis.password, and remove it from the URL" }}
{{- end }}
{{- end }}
{{- if and .Values.redis.caSecret (not .Values.redis.url) }}
{{- fail "toolmesh: redis.caSecret is for an external rediss:// Redis: set redis.url too" }}
{{- end }}
{{- $agents := or (include "toolmesh.apiKeysOn" .) (include "toolmesh.jwtOn" .) }}
{{- $registrants := include "toolmesh.registrantsOn" . }}
{{- if and (not .Values.insecure) (not (include "toolmesh.loopback" .)) (not (and $agents $registrants)) }}
{{- $open := list }}
{{- if not $agents }}{{- $open = append $open "agents (set auth.apiKeys or auth.jwt)" }}{{- end }}
{{- if not $registrants }}{{- $open = append $open "registration (set registrants)" }}{{- end }}
{{- fail (printf "toolmesh: the registry refuses to listen beyond loopback (config.listenHost %s) with %s unauthenticated, and credentials.generate is off. Configure them (docs/kubernetes.md, \"Authentication\"), or leave credentials.generate on (the default) for the chart to generate them, or set insecure=true to run it open on a network you trust" .Values.config.listenHost (join " and " $open)) }}
{{- end }}
{{- if and (include "toolmesh.policyOn" .) (not $agents) }}
{{- fail "toolmesh: auth.policy needs authenticated agents: set auth.apiKeys or auth.jwt too (a policy names callers, and without authentication every call is anonymous)" }}
{{- end }}
{{- if and .Values.tls.requireClientCert (not .Values.tls.clientCaSecret) }}
{{- fail "toolmesh: tls.requireClientCert needs tls.clientCaSecret, the CA client certificates are verified with" }}
{{- end }}
{{- if and (or .Values.tls.clientCaSecret .Values.tls.requireClientCert) (not .Values.tls.existingSecret) }}
{{- fail "toolmesh: tls.clientCaSecret and tls.requireClientCert need TLS: set tls.existingSecret (the registry's certificate and key)" }}
{{- end }}
{{- if and .Values.admin.enabled (eq (int .Values.admin.port) (int .Values.config.port)) }}
{{- fail (printf "toolmesh: admin.port and config.port are both %d: the admin HTTP server (metrics, /livez, /readyz) needs a port of its own. Change admin.port (9090 by default)" (int .Values.admin.port)) }}
{{- end }}
{{- if and .Values.mcp.enabled (eq (int .Values.mcp.port) (int .Values.config.port)) }}
{{- fail (printf "toolmesh: mcp.port and config.port are both %d: the MCP endpoint needs a port of its own. Change mcp.port (8080 by default)" (int .Values.mcp.port)) }}
{{- end }}
{{- if and .Values.mcp.enabled .Values.admin.enabled (eq (int .Values.mcp.port) (int .Values.admin.port)) }}
{{- fail (printf "toolmesh: mcp.port and admin.port are both %d: the MCP endpoint needs a port of its own. Change mcp.port (8080 by default)" (int .Values.mcp.port)) }}
{{- end }}
{{- $adminHost := default .Values.config.listenHost .Values.admin.listenHost }}
{{- if and .Values.admin.enabled (include "toolmesh.isLoopback" $adminHost) (not .Values.hostNetwork) }}
{{- fail (printf "toolmesh: the admin port binds %s, a loopback address of the pod, which the kubelet's probes cannot reach (they can with hostNetwork=true, where the pod's loopback is the node's). Set admin.listenHost=0.0.0.0 (it serves no secret), or hostNetwork=true" $adminHost) }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.admin.enabled) }}
{{- fail "toolmesh: serviceMonitor.enabled needs admin.enabled: the metrics are served on the admin port" }}
{{- end }}
{{- $needed := add .Values.config.shutdownDelaySeconds .Values.config.shutdownGraceSeconds }}
{{- if and (not (kindIs "invalid" .Values.terminationGracePeriodSeconds)) (lt (int .Values.terminationGracePeriodSeconds) (int $needed)) }}
{{- fail (printf "toolmesh: terminationGracePeriodSeconds (%d) is shorter than config.shutdownDelaySeconds + config.shutdownGraceSeconds (%d): Kubernetes would kill the registry while it drains. Raise it, or leave it empty to have it computed" (int .Values.terminationGracePeriodSeconds) (int $needed)) }}
{{- end }}
{{- end }}

{{/* "true" when config.listenHost is a loopback address (the registry then needs no authentication to start). */}}
{{- define "toolmesh.loopback" -}}
{{- include "toolmesh.isLoopback" .Values.config.listenHost }}
{{- end }}

{{/* "true" when the host given (an address to bind, `[...]` allowed) is a loopback address. */}}
{{- define "toolmesh.isLoopback" -}}
{{- $host := . | trimPrefix "[" | trimSuffix "]" }}
{{- if or (eq $host "localhost") (eq $host "::1") (hasPrefix "127." $host) }}true{{- end }}
{{- end }}

{{/* The address the MCP endpoint binds (`--mcp-listen`): mcp.listenHost, else config.listenHost, and mcp.port. */}}
{{- define "toolmesh.mcpListen" -}}
{{- printf "%s:%d" (default .Values.config.listenHost .Values.mcp.listenHost) (int .Values.mcp.port) }}
{{- end }}

{{/* The address the admin server binds (`--admin-listen`): admin.listenHost, else config.listenHost, and admin.port. */}}
{{- define "toolmesh.adminListen" -}}
{{- printf "%s:%d" (default .Values.config.listenHost .Values.admin.listenHost) (int .Values.admin.port) }}
{{- end }}

{{/*
Whether each file is given to the registry: "true" or "". The API keys and
the registrants are either configured (an existing Secret, or inline) or
generated (`credentials`).
*/}}
{{- define "toolmesh.apiKeysOn" -}}
{{- if or (include "toolmesh.apiKeysConfigured" .) (include "toolmesh.generatesApiKey" .) }}true{{- end }}
{{- end }}
{{- define "toolmesh.apiKeysConfigured" -}}
{{- if or .Values.auth.apiKeys.existingSecret .Values.auth.apiKeys.inline }}true{{- end }}
{{- end }}
{{- define "toolmesh.jwtOn" -}}
{{- if or .Values.auth.jwt.existingSecret .Values.auth.jwt.keys }}true{{- end }}
{{- end }}
{{- define "toolmesh.policyOn" -}}
{{- if or .Values.auth.policy.existingConfigMap .Values.auth.policy.rules .Values.auth.policy.approvals }}true{{- end }}
{{- end }}
{{- define "toolmesh.versionsOn" -}}
{{- if or .Values.versions.existingConfigMap .Values.versions.tools }}true{{- end }}
{{- end }}
{{- define "toolmesh.pinsOn" -}}
{{- if or .Values.pins.existingConfigMap .Values.pins.rules .Values.pins.approved }}true{{- end }}
{{- end }}
{{- define "toolmesh.registrantsOn" -}}
{{- if or (include "toolmesh.registrantsConfigured" .) (include "toolmesh.generatesRegistrationToken" .) }}true{{- end }}
{{- end }}
{{- define "toolmesh.registrantsConfigured" -}}
{{- if or .Values.registrants.existingSecret .Values.registrants.inline }}true{{- end }}
{{- end }}

{{/* Whether the chart generates each credential (`credentials`): "true" or "". Never with `insecure`, which asks for what is not configured to be open. */}}
{{- define "toolmesh.generatesApiKey" -}}
{{- if and .Values.credentials.generate (not .Values.insecure) (not (include "toolmesh.apiKeysConfigured" .)) (not (include "toolmesh.jwtOn" .)) }}true{{- end }}
{{- end }}
{{- define "toolmesh.generatesRegistrationToken" -}}
{{- if and .Values.credentials.generate (not .Values.insecure) (not (include "toolmesh.registrantsConfigured" .)) }}true{{- end }}
{{- end }}

{{/* The Secret of the generated credentials: `<fullname>-credentials`. */}}
{{- define "toolmesh.credentialsName" -}}
{{- include "toolmesh.suffixed" (list . "credentials") }}
{{- end }}

{{/*
The generated credentials, as YAML (`agent-api-key`, `registration-token`:
those the chart generates): each the value already in the cluster's Secret
(kept across upgrades), else a new random one (always under `helm template`
and `--dry-run`, where `lookup` finds nothing). Included once per render,
by the Secret.
*/}}
{{- define "toolmesh.generatedCredentials" -}}
{{- $existing := (lookup "v1" "Secret" .Release.Namespace (include "toolmesh.credentialsName" .)).data | default dict }}
{{- $out := dict }}
{{- $wanted := list }}
{{- if include "toolmesh.generatesApiKey" . }}{{- $wanted = append $wanted "agent-api-key" }}{{- end }}
{{- if include "toolmesh.generatesRegistrationToken" . }}{{- $wanted = append $wanted "registration-token" }}{{- end }}
{{- range $key := $wanted }}
{{- $value := index $existing $key | default "" | b64dec }}
{{- $_ := set $out $key ($value | default (randAlphaNum 48)) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* The object the chart writes for a file written in values: `<fullname>-<file>` (registrants, api-keys: Secrets; policy, jwt-keys: ConfigMaps). */}}
{{- define "toolmesh.fileObjectName" -}}
{{- include "toolmesh.suffixed" (list .root .file) }}
{{- end }}

{{/* The host the TLS probes dial: tls.probeHost, else the Service's name. */}}
{{- define "toolmesh.probeHost" -}}
{{- default (printf "%s.%s.svc" (include "toolmesh.fullname" .) .Release.Namespace) .Values.tls.probeHost }}
{{- end }}

{{/* hostAliases mapping the probe host to 127.0.0.1 (TLS on, a name): for the exec probes (admin port off) and a `helm test` pod on the node's loopback. */}}
{{- define "toolmesh.hostAliases" -}}
{{- $host := include "toolmesh.probeHost" . }}
{{- if and .Values.tls.existingSecret (not (regexMatch "^[0-9.]+$|:" $host)) }}
hostAliases:
  - ip: 127.0.0.1
    hostnames:
      - {{ $host | quote }}
{{- end }}
{{- end }}

{{/*
`toolmesh-registry health` TLS arguments (after --address): the CA, and the
registry's own certificate when client certificates are required.
*/}}
{{- define "toolmesh.healthTlsArgs" -}}
{{- if .Values.tls.caKey }}
- --ca-file
- /var/run/secrets/toolmesh/tls/ca.crt
{{- end }}
{{- if .Values.tls.requireClientCert }}
- --cert-file
- /var/run/secrets/toolmesh/tls/tls.crt
- --key-file
- /var/run/secrets/toolmesh/tls/tls.key
{{- end }}
{{- end }}

{{/*
The registry's probe; `probe` (the timing values), `path` (`/livez` or
`/readyz`) and `root` given. With the admin port: an HTTP GET of `path`
on it (plain HTTP, whatever `tls` says; on the pod's loopback when the
admin server binds a loopback address, which the kubelet reaches with
`hostNetwork` only). Without: native gRPC health, or with TLS an exec of
`toolmesh-registry health`.
*/}}
{{- define "toolmesh.probe" -}}
{{- $root := .root }}
{{- if $root.Values.admin.enabled }}
{{- $host := default $root.Values.config.listenHost $root.Values.admin.listenHost }}
httpGet:
  path: {{ .path }}
  port: admin
  scheme: HTTP
  {{- if include "toolmesh.isLoopback" $host }}
  host: {{ $host | trimPrefix "[" | trimSuffix "]" | quote }}
  {{- end }}
{{- else if $root.Values.tls.existingSecret }}
exec:
  command:
    - /usr/local/bin/toolmesh-registry
    - health
    - --address
    - {{ printf "https://%s:%d" (include "toolmesh.probeHost" $root) (int $root.Values.config.port) | quote }}
    {{- include "toolmesh.healthTlsArgs" $root | nindent 4 }}
    - --timeout
    - {{ printf "%ds" (int (.probe.timeoutSeconds | default 1)) | quote }}
{{- else }}
grpc:
  port: {{ $root.Values.config.port }}
{{- end }}
{{ toYaml .probe }}
{{- end }}

{{/* The port of an external Redis URL (6379 when it has none). */}}
{{- define "toolmesh.redisPort" -}}
{{- $host := (urlParse (include "toolmesh.redisUrl" .)).host }}
{{- if regexMatch ":[0-9]+$" $host }}
{{- regexFind "[0-9]+$" $host }}
{{- else }}6379{{- end }}
{{- end }}

{{/* redis.conf of the internal Redis; `password` and `root` are given. */}}
{{- define "toolmesh.redisConf" -}}
# toolmesh's internal Redis: one instance, data in memory only.
port 6379
bind * -::*
requirepass {{ .password | quote }}
save ""
appendonly no
dir /data
maxmemory {{ .root.Values.redis.internal.maxmemory }}
# Evicting a lease or a rate-limit key would silently lose state: refuse
# writes instead, which the registry reports.
maxmemory-policy noeviction
{{- end }}

{{/*
The OpenTelemetry variables (a list of env entries), when
tracing.otlpEndpoint is set; nothing otherwise (tracing off).
*/}}
{{- define "toolmesh.tracingEnv" -}}
{{- $t := .Values.tracing }}
{{- if $t.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $t.protocol | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ default (include "toolmesh.fullname" .) $t.serviceName | quote }}
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
