{{/* The reference of one of thinlvm's images: (dict "root" $ "repository" r "digest" d "suffix" s). */}}
{{- define "thinlvm.image" -}}
{{- $r := .root.Values.image.registry -}}
{{- $name := ternary .repository (printf "%s/%s" $r .repository) (eq $r "") -}}
{{- if .digest -}}
{{ $name }}@{{ .digest }}
{{- else -}}
{{ $name }}:{{ default .root.Chart.AppVersion .root.Values.image.tag }}{{ .suffix | default "" }}
{{- end -}}
{{- end -}}

{{/* The minor the scheduler image is built for: the values', or the cluster's clamped to the supported ones. */}}
{{- define "thinlvm.schedulerMinor" -}}
{{- if .Values.scheduler.kubernetesMinor -}}
{{ .Values.scheduler.kubernetesMinor }}
{{- else -}}
{{- $m := .Capabilities.KubeVersion.Minor | trimSuffix "+" | atoi -}}
1.{{ max 34 (min 37 $m) }}
{{- end -}}
{{- end -}}

{{/* A pool's object name: thinlvm-node for the pool named default, thinlvm-node-<name> for the others. */}}
{{- define "thinlvm.poolName" -}}
{{- if eq . "default" -}}thinlvm-node{{- else -}}thinlvm-node-{{ . }}{{- end -}}
{{- end -}}

{{/* A pool's lvmd ConfigMap: thinlvm-lvmd, or thinlvm-lvmd-<name>. */}}
{{- define "thinlvm.lvmdConfig" -}}
{{- if eq . "default" -}}thinlvm-lvmd{{- else -}}thinlvm-lvmd-{{ . }}{{- end -}}
{{- end -}}

{{/* pullSecrets of a pod spec, or nothing. */}}
{{- define "thinlvm.pullSecrets" -}}
{{- with .Values.image.pullSecrets -}}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}
