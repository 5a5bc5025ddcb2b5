{{/*
The chart name, or nameOverride.
*/}}
{{- define "daemonguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name, and the name of both webhook configurations (the binary patches
that name in self-managed TLS mode). Truncated to 44 characters so that the longest suffixed DNS
label, the Service <fullname>-controller-metrics, stays within 63 characters.
*/}}
{{- define "daemonguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart label value: name-version.
*/}}
{{- define "daemonguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of a component. Call with (dict "context" $ "component" "webhook").
*/}}
{{- define "daemonguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "daemonguard.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Labels of every object of a component. Call with (dict "context" $ "component" "webhook").
*/}}
{{- define "daemonguard.labels" -}}
helm.sh/chart: {{ include "daemonguard.chart" .context }}
{{ include "daemonguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .context.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .context.Release.Service }}
app.kubernetes.io/part-of: {{ include "daemonguard.name" .context }}
{{- end }}

{{/*
The image reference: repository@digest when a digest is set, else repository:tag (default tag: the
chart's appVersion).
*/}}
{{- define "daemonguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
ServiceAccount names.
*/}}
{{- define "daemonguard.webhook.serviceAccountName" -}}
{{- default (printf "%s-webhook" (include "daemonguard.fullname" .)) .Values.webhook.serviceAccount.name }}
{{- end }}

{{- define "daemonguard.controller.serviceAccountName" -}}
{{- default (printf "%s-controller" (include "daemonguard.fullname" .)) .Values.controller.serviceAccount.name }}
{{- end }}

{{/*
The webhook Service, its TLS Secret (and cert-manager Certificate) names.
*/}}
{{- define "daemonguard.webhook.serviceName" -}}
{{- printf "%s-webhook" (include "daemonguard.fullname" .) }}
{{- end }}

{{- define "daemonguard.webhook.tlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "daemonguard.fullname" .) }}
{{- end }}

{{/*
The ConfigMap that holds the self-managed CA bundle alone (ca.crt), for the ServiceMonitor: the
TLS Secret also holds the CA's private key.
*/}}
{{- define "daemonguard.webhook.caConfigMapName" -}}
{{- printf "%s-webhook-ca" (include "daemonguard.fullname" .) }}
{{- end }}

{{/*
The DNS names of the webhook's serving certificate, as a JSON list (use with fromJsonArray).
*/}}
{{- define "daemonguard.webhook.dnsNames" -}}
{{- $svc := include "daemonguard.webhook.serviceName" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- concat $names .Values.tls.extraDNSNames | toJson }}
{{- end }}

{{/*
The pod securityContext, scheduling and service account fields shared by both Deployments. Call with
(dict "context" $ "component" "webhook" "values" .Values.webhook "affinity" $affinity).
*/}}
{{- define "daemonguard.podSpec" -}}
serviceAccountName: {{ include (printf "daemonguard.%s.serviceAccountName" .component) .context }}
automountServiceAccountToken: true
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .context.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .values.podSecurityContext | nindent 2 }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "daemonguard.selectorLabels" (dict "context" $.context "component" $.component) | fromYaml)) }}
{{- end }}
{{- $constraints = append $constraints $c }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The container fields shared by both Deployments: image, environment, ports, probes, resources and
securityContext. Call with (dict "context" $ "values" .Values.webhook "webhookPort" true).
*/}}
{{- define "daemonguard.container" -}}
image: {{ include "daemonguard.image" .context }}
imagePullPolicy: {{ .context.Values.image.pullPolicy }}
env:
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  {{- if and .values.gcPercent .values.gcMemoryLimit }}
  {{- /* The GC lets garbage grow to gcPercent of the live heap (GOGC), but holds the memory it
  manages within gcMemoryLimit (GOMEMLIMIT): fewer collections where the limit leaves room. */}}
  - name: GOGC
    value: {{ .values.gcPercent | quote }}
  - name: GOMEMLIMIT
    value: {{ .values.gcMemoryLimit | quote }}
  {{- end }}
ports:
  {{- if .webhookPort }}
  - name: webhook
    containerPort: 9443
    protocol: TCP
  {{- end }}
  - name: https-metrics
    containerPort: 8080
    protocol: TCP
  - name: healthz
    containerPort: 8081
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: healthz
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: healthz
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 3
resources:
  {{- toYaml .values.resources | nindent 2 }}
securityContext:
  {{- toYaml .values.containerSecurityContext | nindent 2 }}
{{- end }}

{{/*
The metrics Service of a component. Call with (dict "context" $ "component" "webhook").
*/}}
{{- define "daemonguard.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "daemonguard.fullname" .context }}-{{ .component }}-metrics
  namespace: {{ .context.Release.Namespace }}
  labels:
    {{- include "daemonguard.labels" . | nindent 4 }}
    daemonguard.io/metrics: "true"
spec:
  type: ClusterIP
  selector:
    {{- include "daemonguard.selectorLabels" . | nindent 4 }}
  ports:
    - name: https-metrics
      port: 8080
      targetPort: https-metrics
      protocol: TCP
{{- end }}

{{/*
The ServiceMonitor of a component's metrics Service: HTTPS, with the Prometheus ServiceAccount's
token, which the metrics server reviews with the API server (its identity needs get on /metrics:
the ClusterRole <fullname>-metrics-reader). The webhook serves metrics with its serving certificate,
verified under the name the certificate covers against its CA: self-managed, the ConfigMap
holding the CA bundle alone (the TLS Secret also holds the CA's private key); with cert-manager,
ca.crt of the serving certificate's Secret (the issuer's certificate: cert-manager keeps the CA's
key in the CA's own Secret, which nothing here reads). The controller
has no certificate from a CA (it makes a self-signed one at start), so its scrape is encrypted but
not verified. Call with (dict "context" $ "component" "webhook").
*/}}
{{- define "daemonguard.serviceMonitor" -}}
{{- $sm := .context.Values.metrics.serviceMonitor }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "daemonguard.fullname" .context }}-{{ .component }}
  namespace: {{ .context.Release.Namespace }}
  labels:
    {{- include "daemonguard.labels" . | nindent 4 }}
    {{- with $sm.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  jobLabel: app.kubernetes.io/component
  namespaceSelector:
    matchNames:
      - {{ .context.Release.Namespace }}
  selector:
    matchLabels:
      {{- include "daemonguard.selectorLabels" . | nindent 6 }}
      daemonguard.io/metrics: "true"
  endpoints:
    - port: https-metrics
      path: /metrics
      scheme: https
      interval: {{ $sm.interval }}
      scrapeTimeout: {{ $sm.scrapeTimeout }}
      bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
      {{- if eq .component "controller" }}
      # The rollout metrics' namespace label is the DaemonSet's; without this Prometheus would
      # rename it exported_namespace and put the controller's namespace in its place.
      honorLabels: true
      {{- end }}
      tlsConfig:
        {{- if eq .component "webhook" }}
        serverName: {{ include "daemonguard.webhook.serviceName" .context }}.{{ .context.Release.Namespace }}.svc
        ca:
          {{- if .context.Values.certManager.enabled }}
          secret:
            name: {{ include "daemonguard.webhook.tlsSecretName" .context }}
            key: ca.crt
          {{- else }}
          configMap:
            name: {{ include "daemonguard.webhook.caConfigMapName" .context }}
            key: ca.crt
          {{- end }}
        {{- else }}
        insecureSkipVerify: true
        {{- end }}
{{- end }}

{{/*
The rules that let a component's metrics server authenticate and authorize a scraper: it reviews
the bearer token (TokenReview) and asks whether its identity may get the path
(SubjectAccessReview). Neither reads or changes anything stored.
*/}}
{{- define "daemonguard.metricsAuthRules" -}}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}

{{/*
The NetworkPolicy of a component (networkPolicy.enabled): ingress to its metrics port only from
networkPolicy.metricsFrom, to the webhook port (webhook only) from anywhere, nothing else. The
kubelet's probes come from the pod's node, which a NetworkPolicy always lets through. Egress is
not restricted. Call with (dict "context" $ "component" "webhook" "webhookPort" true).
*/}}
{{- define "daemonguard.networkPolicy" -}}
{{- $from := .context.Values.networkPolicy.metricsFrom }}
{{- $webhookFrom := .context.Values.networkPolicy.webhookFrom }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "daemonguard.fullname" .context }}-{{ .component }}
  namespace: {{ .context.Release.Namespace }}
  labels:
    {{- include "daemonguard.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "daemonguard.selectorLabels" . | nindent 6 }}
  policyTypes: [Ingress]
  {{- if or .webhookPort $from }}
  ingress:
    {{- if .webhookPort }}
    {{- with $webhookFrom }}
    # The API server's addresses, as networkPolicy.webhookFrom names them.
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
    {{- else }}
    # The API server calls the webhook from addresses no selector can name in general (its
    # host's, a load balancer's, a konnectivity agent's): without networkPolicy.webhookFrom the
    # webhook port is open to all, as the API server needs, and serves nothing but admission
    # reviews over TLS 1.3, each bounded in size, time, concurrency and memory.
    - ports:
    {{- end }}
        - port: webhook
          protocol: TCP
    {{- end }}
    {{- with $from }}
    - from:
        {{- toYaml . | nindent 8 }}
      ports:
        - port: https-metrics
          protocol: TCP
    {{- end }}
  {{- else }}
  ingress: []
  {{- end }}
{{- end }}

{{/*
The clientConfig of a webhook: the webhook Service, or webhook.url in URL mode. No caBundle: the
binary (self-managed TLS) or cert-manager's cainjector writes it. Call with
(dict "context" $ "path" "/mutate-v1-pod").
*/}}
{{- define "daemonguard.webhook.clientConfig" -}}
{{- with .context.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" .) $.path | quote }}
{{- else -}}
service:
  name: {{ include "daemonguard.webhook.serviceName" .context }}
  namespace: {{ .context.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- end }}

{{/*
The rules of the two DaemonSet webhooks.
*/}}
{{- define "daemonguard.webhook.daemonSetRules" -}}
- apiGroups: [apps]
  apiVersions: [v1]
  resources: [daemonsets]
  operations: [CREATE, UPDATE]
  scope: Namespaced
{{- end }}

{{/*
The fields all three webhooks share.
*/}}
{{- define "daemonguard.webhook.common" -}}
sideEffects: None
admissionReviewVersions: [v1]
{{- end }}

{{/*
The namespaceSelector of the validating and the Pod webhook. The release namespace and kube-system
are always exempt, so that a broken daemonguard can never block its own recovery or the cluster's
system pods.
*/}}
{{- define "daemonguard.webhook.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    {{- include "daemonguard.webhook.exemptRequirement" . | nindent 4 }}
    {{- with .Values.webhook.namespaceSelector.matchExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
The namespaceSelector of the DaemonSet mutating webhook and of the in-process injection policy's
binding: the namespaceSelector above, narrowed to the namespaces an administrator marked for node
agents (daemonguard.io/node-agents: "true"; admission.InjectionScope).
*/}}
{{- define "daemonguard.webhook.injectNamespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    {{- include "daemonguard.webhook.exemptRequirement" . | nindent 4 }}
    - key: daemonguard.io/node-agents
      operator: In
      values: ["true"]
    {{- with .Values.webhook.namespaceSelector.matchExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{- define "daemonguard.webhook.exemptRequirement" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
    {{- concat (list .Release.Namespace "kube-system") .Values.webhook.exemptNamespaces | toYaml | nindent 4 }}
{{- end }}

{{/*
"true" when the API server injects with the MutatingAdmissionPolicy <fullname>-inject instead of
the DaemonSet mutating webhook (webhook.inProcessInjection), else "". The cluster serves the
policy's API when helm's capabilities (the API server's discovery, or --api-versions) list it:
Kubernetes 1.36 and later. true on a cluster without it fails the install before anything is
applied, with internal/kubesupport's Server.InProcessInjection message word for word (a test
holds them together), instead of a half-applied release whose DaemonSets get no injection.
*/}}
{{- define "daemonguard.webhook.inProcessInjection" -}}
{{- $mode := toString .Values.webhook.inProcessInjection -}}
{{- $touched := include "daemonguard.policies.changeInjection" . -}}
{{- $served := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- if eq $mode "true" -}}
{{- if not $served -}}
{{- $beta := "" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
{{- $beta = " (it serves v1beta1, which daemonguard does not generate)" -}}
{{- end -}}
{{- fail (printf "webhook.inProcessInjection is true, but in-process injection needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, which Kubernetes 1.36 and later serve; this server (%s) does not%s: let the DaemonSet mutating webhook inject (the chart's webhook.inProcessInjection: auto or false)" .Capabilities.KubeVersion.Version $beta) -}}
{{- end -}}
{{- if $touched -}}
{{- fail (printf "webhook.inProcessInjection is true, but policies.configMaps %s changes injection: the generated MutatingAdmissionPolicy cannot follow it; set webhook.inProcessInjection to false (or auto)" $touched) -}}
{{- end -}}
true
{{- else if and (eq $mode "auto") $served (not $touched) -}}
true
{{- end -}}
{{- end }}

{{/*
The first policies.configMaps entry/key that changes what is injected ("" when none does): Rego in
the packages the inject decision reads, or inject/namespaceClasses in a parameters.yaml.
*/}}
{{- define "daemonguard.policies.changeInjection" -}}
{{- $found := "" -}}
{{- range $name, $cm := .Values.policies.configMaps -}}
{{- range $key, $content := $cm.files -}}
{{- if and (not $found) (hasSuffix ".rego" $key) (not (hasSuffix "_test.rego" $key)) (regexMatch "(?m)^\\s*package\\s+daemonguard(\\.(inject|lib|parameters)([.\\[\\s]|$)|\\s|$)" $content) -}}
{{- $found = printf "%s/%s" $name $key -}}
{{- else if and (not $found) (eq $key "parameters.yaml") (regexMatch "(?m)^(inject|namespaceClasses)\\s*:" $content) -}}
{{- $found = printf "%s/%s" $name $key -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $found -}}
{{- end }}

{{/*
The objectSelector of the DaemonSet mutating webhook and of the in-process injection policy's
binding: DaemonSets labelled daemonguard.io/ignore=true opt out of injection. The validating webhook
has none: a label on the object never exempts it from validation.
*/}}
{{- define "daemonguard.webhook.objectSelector" -}}
objectSelector:
  matchExpressions:
    - key: daemonguard.io/ignore
      operator: NotIn
      values: ["true"]
    {{- with .Values.webhook.objectSelector.matchExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
The rules of the rollout controller in the namespaces it rolls out (all, or controller.namespaces).
*/}}
{{- define "daemonguard.controller.rolloutRules" -}}
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [get, list, watch, update, patch]
- apiGroups: [apps]
  resources: [daemonsets/status]
  verbs: [get, update, patch]
- apiGroups: [apps]
  resources: [controllerrevisions]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/*
The subjects of the controller's role bindings.
*/}}
{{- define "daemonguard.controller.subjects" -}}
- kind: ServiceAccount
  name: {{ include "daemonguard.controller.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
The matchCondition of the two DaemonSet webhooks that lets the rollout controller's progress reports
(updates that change only status.daemonguard.io/ annotations) skip them, so a rollout in flight
keeps reporting while the webhook is down: !(admission.StatusOnlyUpdateCEL), held to it by
TestWebhookConfigurationsMatchCode.
*/}}
{{- define "daemonguard.webhook.rolloutStatusOnly" -}}
- name: not-rollout-status-only
  expression: |-
    !(request.operation == 'UPDATE' && object.spec == oldObject.spec && (has(object.metadata.labels) ? object.metadata.labels : {}) == (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) && (has(object.metadata.annotations) ? object.metadata.annotations : {}).all(k, k.startsWith('status.daemonguard.io/') || (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k])) && (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).all(k, k.startsWith('status.daemonguard.io/') || (has(object.metadata.annotations) && k in object.metadata.annotations)) && ((has(object.metadata.annotations) ? object.metadata.annotations : {}).exists(k, k.startsWith('status.daemonguard.io/') && !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k])) || (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).exists(k, k.startsWith('status.daemonguard.io/') && !(has(object.metadata.annotations) && k in object.metadata.annotations))))
{{- end }}

{{/*
RBAC subjects from values (preflight.subjects, metrics.reader.subjects): a ServiceAccount without a
namespace is in the release namespace; users and groups get the RBAC API group. Call with
(dict "context" $ "subjects" .Values.preflight.subjects).
*/}}
{{- define "daemonguard.subjects" -}}
{{- range .subjects }}
- kind: {{ .kind }}
  name: {{ .name }}
  {{- if eq .kind "ServiceAccount" }}
  namespace: {{ .namespace | default $.context.Release.Namespace }}
  {{- else }}
  apiGroup: {{ .apiGroup | default "rbac.authorization.k8s.io" }}
  {{- end }}
{{- end }}
{{- end }}
