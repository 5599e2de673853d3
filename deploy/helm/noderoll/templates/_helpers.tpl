{{/* Names, labels and the pieces both Deployments share. */}}

{{- define "noderoll.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Namespace of stage Jobs: the contract name api.keys.PACKAGE_POD_NAMESPACE, not configurable. */}}
{{- define "noderoll.packageNamespace" -}}noderoll-system{{- end -}}

{{- define "noderoll.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "worker"). */}}
{{- define "noderoll.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "noderoll.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The agent image the worker pins for stage pods (NODEROLL_AGENT_IMAGE). */}}
{{- define "noderoll.agentImage" -}}
{{- $a := .Values.stagePods.agentImage -}}
{{- $tag := default .Chart.AppVersion $a.tag -}}
{{- if $a.digest -}}
{{ $a.repository }}@{{ $a.digest }}
{{- else -}}
{{ $a.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* What the worker adds to every stage pod (activities/stage_pod.py; docs/operations.md). */}}
{{- define "noderoll.stagePodEnv" -}}
{{- $s := .Values.stagePods -}}
- name: NODEROLL_AGENT_IMAGE
  value: {{ include "noderoll.agentImage" . | quote }}
{{- with $s.imagePullSecrets }}
{{- $names := list }}
{{- range . }}{{ $names = append $names .name }}{{ end }}
- name: NODEROLL_IMAGE_PULL_SECRETS
  value: {{ join "," $names | quote }}
{{- end }}
- name: NODEROLL_STAGE_HOST_NETWORK
  value: {{ $s.hostNetwork | toString | quote }}
{{- with $s.priorityClassName }}
- name: NODEROLL_STAGE_PRIORITY_CLASS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.prometheus.address }}
- name: NODEROLL_PROMETHEUS_ADDRESS
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Environment shared by the worker and the bridge: Temporal connection, metrics port, log level. */}}
{{- define "noderoll.env" -}}
{{- $root := .root -}}
{{- $t := $root.Values.temporal -}}
- name: NODEROLL_TEMPORAL_ADDRESS
  value: {{ required "temporal.address is required" $t.address | quote }}
- name: NODEROLL_TEMPORAL_NAMESPACE
  value: {{ $t.namespace | quote }}
- name: NODEROLL_TASK_QUEUE
  value: {{ include "noderoll.taskQueue" $root | quote }}
{{- with $root.Values.cluster }}
- name: NODEROLL_CLUSTER
  value: {{ . | quote }}
{{- end }}
- name: NODEROLL_METRICS_PORT
  value: {{ .component.metricsPort | quote }}
{{- if $t.tls.enabled }}
- name: NODEROLL_TEMPORAL_TLS_CERT
  value: /etc/noderoll/temporal-tls/tls.crt
- name: NODEROLL_TEMPORAL_TLS_KEY
  value: /etc/noderoll/temporal-tls/tls.key
- name: NODEROLL_TEMPORAL_TLS_CA
  value: /etc/noderoll/temporal-tls/ca.crt
{{- if $t.tls.serverName }}
- name: NODEROLL_TEMPORAL_TLS_SERVER_NAME
  value: {{ $t.tls.serverName | quote }}
{{- end }}
{{- end }}
{{- if $t.apiKey.secretName }}
- name: NODEROLL_TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $t.apiKey.secretName | quote }}
      key: {{ $t.apiKey.key | quote }}
{{- end }}
{{- with .component.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* One Deployment: call with (dict "root" $ "name" "worker" "component" .Values.worker). */}}
{{- define "noderoll.deployment" -}}
{{- $root := .root -}}
{{- $c := .component -}}
{{- $full := include "noderoll.fullname" $root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $full }}-{{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "noderoll.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  replicas: {{ $c.replicas }}
  selector:
    matchLabels:
      {{- include "noderoll.selectorLabels" (dict "root" $root "component" .name) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "noderoll.selectorLabels" (dict "root" $root "component" .name) | nindent 8 }}
        {{- with $c.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- if $root.Values.metricsAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $c.metricsPort | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $c.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ $full }}-{{ .name }}
      {{- if $c.hostNetwork }}
      # The node's network namespace: where pods cannot reach Temporal or the apiserver otherwise.
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .name }}
          image: {{ include "noderoll.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ .name }}
            {{- if and (eq .name "bridge") (not $root.Values.leaderElection.enabled) }}
            - --no-leader-election
            {{- end }}
            {{- range $c.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            {{- include "noderoll.env" (dict "root" $root "component" $c) | nindent 12 }}
            {{- if eq .name "worker" }}
            {{- include "noderoll.stagePodEnv" $root | nindent 12 }}
            {{- end }}
            {{- if and (eq .name "bridge") $root.Values.leaderElection.enabled }}
            # The leader Lease lives in the release namespace (Role below), not in noderoll-system.
            - name: NODEROLL_LEASE_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $c.metricsPort }}
              protocol: TCP
          # The metrics endpoint answers as soon as the process is up; Temporal and API server
          # reconnects are handled inside the process (a restart would not help them).
          livenessProbe:
            tcpSocket: {port: metrics}
            initialDelaySeconds: 10
            periodSeconds: 20
          resources:
            {{- toYaml $c.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if $root.Values.temporal.tls.enabled }}
            - name: temporal-tls
              mountPath: /etc/noderoll/temporal-tls
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir: {}
        {{- if $root.Values.temporal.tls.enabled }}
        - name: temporal-tls
          secret:
            secretName: {{ required "temporal.tls.secretName is required when temporal.tls.enabled" $root.Values.temporal.tls.secretName | quote }}
            optional: false
        {{- end }}
      {{- with $c.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* The task queue: temporal.taskQueue, else noderoll-<cluster> with a cluster name, else noderoll. */}}
{{- define "noderoll.taskQueue" -}}
{{- if .Values.temporal.taskQueue -}}
{{ .Values.temporal.taskQueue }}
{{- else if .Values.cluster -}}
noderoll-{{ .Values.cluster }}
{{- else -}}
noderoll
{{- end -}}
{{- end -}}
