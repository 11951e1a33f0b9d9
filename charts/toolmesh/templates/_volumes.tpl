{{/*
The registry's files: each a volume of one Secret or ConfigMap (whole, not
subPath, so that the kubelet's updates reach the pod: the registry reloads
certificates, registrants, API keys, JWT keys and the policy when they
change), mounted read-only under /var/run/secrets/toolmesh/<name>.
*/}}

{{/* A Secret volume with items (`name`, `secret`, `items` as [key path ...]). */}}
{{- define "toolmesh.secretVolume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0444
    items:
      {{- range $i, $key := .items }}
      {{- if eq (mod $i 2) 0 }}
      - key: {{ $key }}
      {{- else }}
        path: {{ $key }}
      {{- end }}
      {{- end }}
{{- end }}

{{/*
The volume of the registrants or the API keys (`file`), from `from`'s
`existingSecret`, else its `inline` entries (the chart's own Secret), else
the generated credentials (`generated`): only the digests' file of that
Secret, the plain-text credential stays out of the pod. Nothing when none.
*/}}
{{- define "toolmesh.credentialVolume" -}}
{{- $path := printf "%s.yaml" .file }}
{{- if .from.existingSecret }}
{{ include "toolmesh.secretVolume" (dict "name" .file "secret" .from.existingSecret "items" (list .from.existingSecretKey $path)) }}
{{- else if .from.inline }}
{{ include "toolmesh.secretVolume" (dict "name" .file "secret" (include "toolmesh.fileObjectName" (dict "root" .root "file" .file)) "items" (list $path $path)) }}
{{- else if .generated }}
{{ include "toolmesh.secretVolume" (dict "name" .file "secret" (include "toolmesh.credentialsName" .root) "items" (list $path $path)) }}
{{- end }}
{{- end }}

{{- define "toolmesh.volumes" -}}
{{- $passwordSecret := include "toolmesh.redisPasswordSecret" . }}
{{- if $passwordSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "redis-password" "secret" $passwordSecret "items" (list (include "toolmesh.redisPasswordKey" .) "password")) }}
{{- end }}
{{- if .Values.redis.caSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "redis-ca" "secret" .Values.redis.caSecret "items" (list .Values.redis.caSecretKey "ca.crt")) }}
{{- end }}
{{- with .Values.tls.existingSecret }}
{{- $items := list $.Values.tls.certKey "tls.crt" $.Values.tls.keyKey "tls.key" }}
{{- if $.Values.tls.caKey }}{{- $items = concat $items (list $.Values.tls.caKey "ca.crt") }}{{- end }}
{{ include "toolmesh.secretVolume" (dict "name" "tls" "secret" . "items" $items) }}
{{- end }}
{{- with .Values.tls.clientCaSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "tls-client-ca" "secret" . "items" (list $.Values.tls.clientCaSecretKey "ca.crt")) }}
{{- end }}
{{- with .Values.sidecarTls.caSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "sidecar-ca" "secret" . "items" (list $.Values.sidecarTls.caSecretKey "ca.crt")) }}
{{- end }}
{{- with .Values.sidecarTls.clientCertSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "sidecar-client" "secret" . "items" (list "tls.crt" "tls.crt" "tls.key" "tls.key")) }}
{{- end }}
{{- include "toolmesh.credentialVolume" (dict "root" . "file" "registrants" "from" .Values.registrants "generated" (include "toolmesh.generatesRegistrationToken" .)) }}
{{- include "toolmesh.credentialVolume" (dict "root" . "file" "api-keys" "from" .Values.auth.apiKeys "generated" (include "toolmesh.generatesApiKey" .)) }}
{{- if include "toolmesh.jwtOn" . }}
{{- if .Values.auth.jwt.existingSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "jwt" "secret" .Values.auth.jwt.existingSecret "items" (list .Values.auth.jwt.existingSecretKey "keys")) }}
{{- else }}
- name: jwt
  configMap:
    name: {{ include "toolmesh.fileObjectName" (dict "root" . "file" "jwt-keys") }}
    defaultMode: 0444
    items:
      - key: jwt-keys
        path: keys
{{- end }}
{{- end }}
{{- if include "toolmesh.policyOn" . }}
- name: policy
  configMap:
    name: {{ .Values.auth.policy.existingConfigMap | default (include "toolmesh.fileObjectName" (dict "root" . "file" "policy")) }}
    defaultMode: 0444
    items:
      - key: {{ ternary .Values.auth.policy.existingConfigMapKey "policy.yaml" (not (empty .Values.auth.policy.existingConfigMap)) }}
        path: policy.yaml
{{- end }}
{{- range $file := list "versions" "pins" }}
{{- if include (printf "toolmesh.%sOn" $file) $ }}
{{- $values := index $.Values $file }}
- name: {{ $file }}
  configMap:
    name: {{ $values.existingConfigMap | default (include "toolmesh.fileObjectName" (dict "root" $ "file" $file)) }}
    defaultMode: 0444
    items:
      - key: {{ ternary $values.existingConfigMapKey (printf "%s.yaml" $file) (not (empty $values.existingConfigMap)) }}
        path: {{ $file }}.yaml
{{- end }}
{{- end }}
{{- with .Values.search.model.volume }}
- name: search-model
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "toolmesh.volumeMounts" -}}
{{- $mounts := dict "redis" (include "toolmesh.redisPasswordSecret" .) "redis-ca" .Values.redis.caSecret "tls" .Values.tls.existingSecret "tls-client-ca" .Values.tls.clientCaSecret "sidecar-ca" .Values.sidecarTls.caSecret "sidecar-client" .Values.sidecarTls.clientCertSecret "registrants" (include "toolmesh.registrantsOn" .) "api-keys" (include "toolmesh.apiKeysOn" .) "jwt" (include "toolmesh.jwtOn" .) }}
{{- range $dir := list "redis" "redis-ca" "tls" "tls-client-ca" "sidecar-ca" "sidecar-client" "registrants" "api-keys" "jwt" }}
{{- if index $mounts $dir }}
- name: {{ ternary "redis-password" $dir (eq $dir "redis") }}
  mountPath: /var/run/secrets/toolmesh/{{ $dir }}
  readOnly: true
{{- end }}
{{- end }}
{{- if include "toolmesh.policyOn" . }}
- name: policy
  mountPath: /etc/toolmesh/policy
  readOnly: true
{{- end }}
{{- range $file := list "versions" "pins" }}
{{- if include (printf "toolmesh.%sOn" $file) $ }}
- name: {{ $file }}
  mountPath: /etc/toolmesh/{{ $file }}
  readOnly: true
{{- end }}
{{- end }}
{{- if .Values.search.model.volume }}
- name: search-model
  mountPath: {{ include "toolmesh.searchModelMount" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Where the search model's volume is mounted, and the model directory in it (`--search-model`). */}}
{{- define "toolmesh.searchModelMount" -}}
/var/lib/toolmesh/search-model
{{- end }}

{{- define "toolmesh.searchModelDir" -}}
{{- $mount := include "toolmesh.searchModelMount" . }}
{{- with trimAll "/" .Values.search.model.path }}{{ printf "%s/%s" $mount . }}{{ else }}{{ $mount }}{{ end }}
{{- end }}
