{{/* The namespace of every namespaced object. */}}
{{- define "koordinator.namespace" -}}
{{ .Values.installation.namespace }}
{{- end }}

{{/* The image of a component: imageRepositoryHost/repository:tag (tag: the appVersion). */}}
{{- define "koordinator.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{ $root.Values.imageRepositoryHost }}/{{ $image.repository }}:{{ $image.tag | default $root.Chart.AppVersion }}
{{- end }}

{{/* The labels every object of the chart carries. */}}
{{- define "koordinator.labels" -}}
app.kubernetes.io/name: koordinator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The --feature-gates argument of a list of gate strings (empty ones left out). */}}
{{- define "koordinator.featureGates" -}}
{{- $gates := list -}}
{{- range . -}}{{- if . -}}{{- $gates = append $gates . -}}{{- end -}}{{- end -}}
{{- if $gates }}- --feature-gates={{ join "," $gates }}{{ end -}}
{{- end }}

{{/* A pod spec's image pull secrets and placement (node affinity, node selector,
tolerations) for a component: (component values, root); empty when none is set. */}}
{{- define "koordinator.podExtras" -}}
{{- $values := index . 0 -}}
{{- $root := index . 1 -}}
{{- $extras := dict -}}
{{- with $root.Values.imagePullSecrets }}{{ $_ := set $extras "imagePullSecrets" . }}{{ end -}}
{{- with $values.nodeAffinity }}{{ $_ := set $extras "affinity" (dict "nodeAffinity" .) }}{{ end -}}
{{- with $values.nodeSelector }}{{ $_ := set $extras "nodeSelector" . }}{{ end -}}
{{- with $values.tolerations }}{{ $_ := set $extras "tolerations" . }}{{ end -}}
{{- if $extras }}{{ toYaml $extras }}{{ end -}}
{{- end }}

{{/* The ServiceAccount of a component: (name, root). */}}
{{- define "koordinator.serviceAccount" -}}
{{- $name := index . 0 -}}
{{- $root := index . 1 -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ include "koordinator.namespace" $root }}
  labels:
{{ include "koordinator.labels" $root | indent 4 }}
{{- with $root.Values.serviceAccount.annotations }}
  annotations:
{{ toYaml . | indent 4 }}
{{- end }}
{{- end }}
