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

{{- define "toolmesh.volumes" -}}
{{- $passwordSecret := include "toolmesh.redisPasswordSecret" . }}
{{- with .Values.executeToken.existingSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "execute-token" "secret" . "items" (list $.Values.executeToken.existingSecretKey "token")) }}
{{- end }}
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
{{- if include "toolmesh.registrantsOn" . }}
{{- if .Values.registrants.existingSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "registrants" "secret" .Values.registrants.existingSecret "items" (list .Values.registrants.existingSecretKey "registrants.yaml")) }}
{{- else }}
{{ include "toolmesh.secretVolume" (dict "name" "registrants" "secret" (include "toolmesh.fileObjectName" (dict "root" . "file" "registrants")) "items" (list "registrants.yaml" "registrants.yaml")) }}
{{- end }}
{{- end }}
{{- if include "toolmesh.apiKeysOn" . }}
{{- if .Values.auth.apiKeys.existingSecret }}
{{ include "toolmesh.secretVolume" (dict "name" "api-keys" "secret" .Values.auth.apiKeys.existingSecret "items" (list .Values.auth.apiKeys.existingSecretKey "api-keys.yaml")) }}
{{- else }}
{{ include "toolmesh.secretVolume" (dict "name" "api-keys" "secret" (include "toolmesh.fileObjectName" (dict "root" . "file" "api-keys")) "items" (list "api-keys.yaml" "api-keys.yaml")) }}
{{- end }}
{{- end }}
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
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "toolmesh.volumeMounts" -}}
{{- $mounts := dict "execute-token" .Values.executeToken.existingSecret "redis" (include "toolmesh.redisPasswordSecret" .) "redis-ca" .Values.redis.caSecret "tls" .Values.tls.existingSecret "tls-client-ca" .Values.tls.clientCaSecret "sidecar-ca" .Values.sidecarTls.caSecret "sidecar-client" .Values.sidecarTls.clientCertSecret "registrants" (include "toolmesh.registrantsOn" .) "api-keys" (include "toolmesh.apiKeysOn" .) "jwt" (include "toolmesh.jwtOn" .) }}
{{- range $dir := list "execute-token" "redis" "redis-ca" "tls" "tls-client-ca" "sidecar-ca" "sidecar-client" "registrants" "api-keys" "jwt" }}
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
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
