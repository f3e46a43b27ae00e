{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name. Kept to 45 characters so the longest suffix
("-operator-webhook", 17) still fits in 63.
*/}}
{{- define "gw.fullname" -}}
{{- $full := "" }}
{{- if .Values.fullnameOverride }}
{{- $full = .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- $full = .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $full = printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- /* Services are named from it, and a Service's name must start with a letter (RFC 1035). */ -}}
{{- if not (regexMatch "^[a-z]" $full) }}
{{- fail (printf "the resource name prefix %q must start with a letter (Service names do): use a release name or fullnameOverride that does" $full) }}
{{- end }}
{{- $full }}
{{- end }}

{{- define "gw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object: Helm's recommended set, with commonLabels added (they may replace
part-of or version, never a selector label: the Deployments' selectors would stop matching).
*/}}
{{- define "gw.labels" -}}
{{- include "gw.refuseSelectorLabels" (dict "labels" .Values.commonLabels "value" "commonLabels") }}
{{- include "gw.refuseHelmLabels" (dict "labels" .Values.commonLabels "value" "commonLabels") }}
{{- $own := dict "helm.sh/chart" (include "gw.chart" .) "app.kubernetes.io/name" (include "gw.name" .) "app.kubernetes.io/instance" .Release.Name "app.kubernetes.io/version" .Chart.AppVersion "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/part-of" "gw" }}
{{- toYaml (merge (deepCopy (.Values.commonLabels | default dict)) $own) }}
{{- end }}

{{/*
Fails when the labels of a value set a label Helm checks on an upgrade to tell its own objects:
a release whose objects said otherwise could not be upgraded. Call with (dict "labels" MAP "value" NAME).
*/}}
{{- define "gw.refuseHelmLabels" -}}
{{- range $key := list "app.kubernetes.io/managed-by" "helm.sh/chart" }}
{{- if hasKey ($.labels | default dict) $key }}
{{- fail (printf "%s must not set %s: Helm sets it, and an object that says otherwise is not the release's to upgrade" $.value $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
An object's labels with a value's own labels added, each key once, the value's winning over the
chart's and commonLabels. Call with (dict "labels" YAML "extra" MAP "value" NAME).
*/}}
{{- define "gw.labelsWith" -}}
{{- include "gw.refuseHelmLabels" (dict "labels" .extra "value" .value) }}
{{- toYaml (merge (deepCopy (.extra | default dict)) (.labels | fromYaml)) }}
{{- end }}

{{/* Fails when the labels of a value set a selector label; call with (dict "labels" MAP "value" NAME). */}}
{{- define "gw.refuseSelectorLabels" -}}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" }}
{{- if hasKey ($.labels | default dict) $key }}
{{- fail (printf "%s must not set %s: the chart's selectors use it (use nameOverride for the name)" $.value $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "gw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gw.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Full labels of one component's objects; same arguments as gw.selectorLabels. */}}
{{- define "gw.componentLabels" -}}
{{ include "gw.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Labels of one component's pods: its labels with the pods' own added, each key once.
Call with (dict "ctx" $ "component" "operator" "podLabels" MAP "value" "operator.podLabels").
*/}}
{{- define "gw.podLabels" -}}
{{- include "gw.refuseSelectorLabels" (dict "labels" .podLabels "value" .value) }}
{{- $labels := include "gw.componentLabels" (dict "ctx" .ctx "component" .component) | fromYaml }}
{{- toYaml (merge (deepCopy (.podLabels | default dict)) $labels) }}
{{- end }}

{{/*
The credentials a user gives in values (never generated ones, which would differ between
two renders of one install): a pod annotation, so setting a new password or admin key on
upgrade rolls the chart's pods that read it (not injected sidecars: README, "Install with Helm").
A Secret named by existingSecret is the user's to roll.
Whoever may read pods may read the annotation, so it is derived through scrypt (sprig's
derivePassword, salted by the release) rather than hashed once: a plain SHA-256 of a weak
password is guessed offline at billions of tries a second.
*/}}
{{- define "gw.credentialsChecksum" -}}
{{- $credentials := list .Values.auth .Values.redis.auth .Values.redis.external | toJson }}
{{- derivePassword 1 "maximum" $credentials "gw-credentials" (printf "%s/%s" .Release.Namespace .Release.Name) | sha256sum }}
{{- end }}

{{- define "gw.operator.fullname" -}}
{{ include "gw.fullname" . }}-operator
{{- end }}

{{- define "gw.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "gw.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gw.admin.fullname" -}}
{{ include "gw.fullname" . }}-admin
{{- end }}

{{- define "gw.admin.serviceAccountName" -}}
{{- if .Values.admin.serviceAccount.create }}
{{- default (include "gw.admin.fullname" .) .Values.admin.serviceAccount.name }}
{{- else }}
{{- required "admin.serviceAccount.name is required when admin.serviceAccount.create is false" .Values.admin.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gw.admin.targetNamespace" -}}
{{- default .Release.Namespace .Values.admin.targetNamespace }}
{{- end }}

{{- define "gw.sidecar.roleName" -}}
{{ include "gw.fullname" . }}-sidecar
{{- end }}

{{- define "gw.webhook.serviceName" -}}
{{ include "gw.fullname" . }}-webhook
{{- end }}

{{- define "gw.settings.configMapName" -}}
{{ include "gw.fullname" . }}-settings
{{- end }}

{{- define "gw.auth.secretName" -}}
{{- default (printf "%s-auth" (include "gw.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "gw.redis.fullname" -}}
{{ include "gw.fullname" . }}-redis
{{- end }}

{{- define "gw.redis.secretName" -}}
{{- if .Values.redis.enabled }}
{{- default (include "gw.redis.fullname" .) .Values.redis.auth.existingSecret }}
{{- else }}
{{- default (include "gw.redis.fullname" .) .Values.redis.external.existingSecret }}
{{- end }}
{{- end }}

{{/*
An image reference: repository@digest when a digest is given, else repository:tag (the
chart's appVersion when the tag is empty). Call with (dict "ctx" $ "image" IMAGE "tag" TAG).
*/}}
{{- define "gw.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .tag) }}
{{- end }}
{{- end }}

{{- define "gw.operator.image" -}}
{{ include "gw.image" (dict "ctx" . "image" .Values.operator.image "tag" .Values.image.tag) }}
{{- end }}

{{- define "gw.sidecar.image" -}}
{{ include "gw.image" (dict "ctx" . "image" .Values.sidecar.image "tag" .Values.image.tag) }}
{{- end }}

{{- define "gw.redis.image" -}}
{{ include "gw.image" (dict "ctx" . "image" .Values.redis.image "tag" .Values.redis.image.tag) }}
{{- end }}

{{/*
A secret value that survives upgrades: the given value, else the one already stored in
the release's Secret (lookup), else a new random one. Without a cluster (helm template)
lookup returns nothing and a fresh value is rendered.
Call with (dict "ctx" $ "secret" NAME "key" KEY "given" VALUE).
*/}}
{{- define "gw.persistentSecretValue" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .secret }}
{{- if .given }}
{{- .given }}
{{- else if and $existing $existing.data (hasKey $existing.data .key) }}
{{- index $existing.data .key | b64dec }}
{{- else }}
{{- randAlphaNum 40 }}
{{- end }}
{{- end }}

{{/*
GW_REDIS_URL for the chart's own Redis: the password is expanded by the kubelet from the
REDIS_PASSWORD variable declared just before it, so it never appears in a pod spec.
*/}}
{{- define "gw.redis.internalUrl" -}}
{{- printf "redis://:$(REDIS_PASSWORD)@%s.%s.svc:6379/0" (include "gw.redis.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
GW_REDIS_URL of an external Redis built from the values. Sentinel and cluster
topologies use the URL schemes the gateway's Redis client understands:
redis+sentinel://[:password@]host:port,host:port/<master> and
redis+cluster://[:password@]host:port,host:port.
*/}}
{{- define "gw.redis.externalUrl" -}}
{{- $ext := .Values.redis.external }}
{{- $auth := "" }}
{{- if $ext.password }}{{ $auth = printf ":%s@" $ext.password }}{{ end }}
{{- if eq $ext.mode "standalone" }}
{{- required "redis.external.url is required when redis.enabled is false and redis.external.mode is standalone" $ext.url }}
{{- else if eq $ext.mode "sentinel" }}
{{- if not $ext.nodes }}{{ fail "redis.external.nodes (the sentinels, host:port) is required in sentinel mode" }}{{ end }}
{{- printf "redis+sentinel://%s%s/%s" $auth (join "," $ext.nodes) $ext.sentinelMasterName }}
{{- else }}
{{- if not $ext.nodes }}{{ fail "redis.external.nodes (seed nodes, host:port) is required in cluster mode" }}{{ end }}
{{- printf "redis+cluster://%s%s" $auth (join "," $ext.nodes) }}
{{- end }}
{{- end }}

{{/* Environment of every process that talks to Redis (operator, admin gateway). */}}
{{- define "gw.redis.env" -}}
{{- if .Values.redis.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "gw.redis.secretName" . }}
      key: {{ ternary .Values.redis.auth.existingSecretPasswordKey "password" (ne .Values.redis.auth.existingSecret "") }}
- name: GW_REDIS_URL
  value: {{ include "gw.redis.internalUrl" . | quote }}
{{- else }}
- name: GW_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "gw.redis.secretName" . }}
      key: {{ ternary .Values.redis.external.existingSecretKey "url" (ne .Values.redis.external.existingSecret "") }}
{{- end }}
{{- end }}

{{/* Volumes every gw container mounts: the settings file and a writable /tmp. */}}
{{- define "gw.volumes" -}}
- name: settings
  configMap:
    name: {{ include "gw.settings.configMapName" . }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}

{{- define "gw.volumeMounts" -}}
- name: settings
  mountPath: /etc/gw
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end }}

{{/*
The value of a Kubernetes quantity in base units (cores, bytes), as a float: the plain forms
values.schema.json allows (a number, or digits with one of the suffixes).
*/}}
{{- define "gw.quantityValue" -}}
{{- if kindIs "string" . }}
{{- $units := dict "" 1 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 }}
{{- mulf (regexReplaceAll "[a-zA-Z]+$" . "" | float64) (index $units (regexReplaceAll "^[0-9.]+" . "")) }}
{{- else }}
{{- float64 . }}
{{- end }}
{{- end }}

{{/*
Refuses sidecar.resources no injected sidecar could run with, with the reasons the operator
gives (operator/webhook/sidecar-resources.ts): under 64Mi of memory its Node process, idle at
about 55 MiB, would be killed as it starts, in every injected pod; a request above its limit
is refused by the API server in every injected pod; above 1000 CPUs or 1Ti is a slip of the
suffix (MAX_SIDECAR_RESOURCES); an old space in sidecar.nodeOptions over 5/8 of the memory limit
(the chart's own 160 MiB of 256Mi) gets every sidecar killed as its garbage grows.
*/}}
{{- define "gw.sidecar.checkResources" -}}
{{- $requests := .Values.sidecar.resources.requests | default dict }}
{{- $limits := .Values.sidecar.resources.limits | default dict }}
{{- if hasKey $limits "memory" }}
{{- if lt (include "gw.quantityValue" $limits.memory | float64) (include "gw.quantityValue" "64Mi" | float64) }}
{{- fail (printf "sidecar.resources.limits.memory: the gw-sidecar memory limit %v is under 64Mi, less than its Node process holds idle (about 55 MiB): it would be killed as it starts" (toJson $limits.memory | trimAll "\"")) }}
{{- end }}
{{- end }}
{{- range $kind, $list := dict "request" $requests "limit" $limits }}
{{- range $resource, $most := dict "cpu" "1000" "memory" "1Ti" }}
{{- if and (hasKey $list $resource) (gt (include "gw.quantityValue" (index $list $resource) | float64) (include "gw.quantityValue" $most | float64)) }}
{{- fail (printf "sidecar.resources: the gw-sidecar %s %s %s is above %s, more than a gateway sidecar can use: check the suffix" $resource $kind (toJson (index $list $resource) | trimAll "\"") $most) }}
{{- end }}
{{- end }}
{{- end }}
{{- $oldSpace := regexFind "--max[-_]old[-_]space[-_]size=[0-9]+" (.Values.sidecar.nodeOptions | default "") }}
{{- if and $oldSpace (hasKey $limits "memory") }}
{{- $oldSpaceMiB := regexFind "[0-9]+$" $oldSpace | float64 }}
{{- $limitMiB := divf (include "gw.quantityValue" $limits.memory | float64) 1048576 }}
{{- if gt (mulf $oldSpaceMiB 8) (mulf $limitMiB 5) }}
{{- fail (printf "sidecar.nodeOptions: %s is more than 5/8 of sidecar.resources.limits.memory %s, as the chart sizes it (160 of 256Mi): V8 would let garbage grow past the limit and the kernel would kill every injected sidecar; give sidecar.nodeOptions --max-old-space-size=%d or less with this limit" $oldSpace (toJson $limits.memory | trimAll "\"") (int (floor (divf (mulf $limitMiB 5) 8)))) }}
{{- end }}
{{- end }}
{{- range $resource := list "cpu" "memory" }}
{{- if and (hasKey $requests $resource) (hasKey $limits $resource) }}
{{- if gt (include "gw.quantityValue" (index $requests $resource) | float64) (include "gw.quantityValue" (index $limits $resource) | float64) }}
{{- fail (printf "sidecar.resources: the gw-sidecar %s request %s is above its limit %s" $resource (toJson (index $requests $resource) | trimAll "\"") (toJson (index $limits $resource) | trimAll "\"")) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart's Redis's --maxmemory: three quarters of its memory limit when that is given in Mi or Gi
(the rest for the copy an AOF rewrite forks, and fragmentation); empty otherwise.
*/}}
{{- define "gw.redis.maxMemory" -}}
{{- $limit := toString (dig "limits" "memory" "" .Values.redis.resources) }}
{{- if regexMatch "^[0-9]+(Mi|Gi)$" $limit }}
{{- $mib := regexFind "^[0-9]+" $limit | int64 }}
{{- if hasSuffix "Gi" $limit }}{{ $mib = mul $mib 1024 }}{{ end }}
{{- printf "%dmb" (div (mul $mib 3) 4) }}
{{- end }}
{{- end }}

{{/*
A component's pod affinity: the given one, else replicas spread over nodes where the scheduler
can (preferred, so one node still runs them all), so that one node's loss does not take every
replica. Call with (dict "ctx" $ "component" NAME "affinity" MAP).
*/}}
{{- define "gw.affinity" -}}
{{- if .affinity }}
{{- toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gw.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- end }}
{{- end }}

{{/*
Refuses an upgrade that changes redis.persistence of an installed Redis: Kubernetes refuses any
change of a StatefulSet's volume claims, and Helm would report only the API server's "spec:
Forbidden", leaving the release failed. Without a cluster (helm template) lookup finds nothing
and nothing is checked.
*/}}
{{- define "gw.redis.checkPersistence" -}}
{{- $name := include "gw.redis.fullname" . }}
{{- with lookup "apps/v1" "StatefulSet" .Release.Namespace $name }}
{{- $claims := dig "spec" "volumeClaimTemplates" list . }}
{{- $persistence := $.Values.redis.persistence }}
{{- $change := "" }}
{{- if ne (gt (len $claims) 0) $persistence.enabled }}
{{- $change = printf "enabled from %t to %t" (gt (len $claims) 0) $persistence.enabled }}
{{- else if $persistence.enabled }}
{{- $claim := dig "spec" dict (index $claims 0) }}
{{- $size := dig "resources" "requests" "storage" "0" $claim }}
{{- if ne (include "gw.quantityValue" (toString $size)) (include "gw.quantityValue" (toString $persistence.size)) }}
{{- $change = printf "size from %v to %v" $size $persistence.size }}
{{- else if ne (toJson (dig "accessModes" list $claim)) (toJson $persistence.accessModes) }}
{{- $change = printf "accessModes from %s to %s" (toJson (dig "accessModes" list $claim)) (toJson $persistence.accessModes) }}
{{- else if and $persistence.storageClass (ne (dig "storageClassName" "" $claim) (eq $persistence.storageClass "-" | ternary "" $persistence.storageClass)) }}
{{- $change = printf "storageClass from %q to %q" (dig "storageClassName" "" $claim) $persistence.storageClass }}
{{- end }}
{{- end }}
{{- if $change }}
{{- fail (printf "redis.persistence: this upgrade changes %s, and Kubernetes refuses any change of a StatefulSet's volume claims; to change it, first run kubectl delete statefulset %s -n %s --cascade=orphan (the Redis pod keeps running until the upgrade replaces it)" $change $name $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}
