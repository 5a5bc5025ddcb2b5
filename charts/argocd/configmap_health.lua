-- daemonguard health check for ConfigMaps (argocd-cm key
-- resource.customizations.health.ConfigMap).
--
-- daemonguard's policy ConfigMaps (label daemonguard.io/policy: "true") are Degraded while their
-- Rego or parameters are rejected: daemonguard's webhook then keeps the last good policy set
-- serving and writes the error, with its file and line, into the annotation
-- status.daemonguard.io/policy-error; it removes the annotation once the set loads again. The
-- message is that annotation. Policy ConfigMaps without it are Healthy, and so is every other
-- ConfigMap: Argo CD has no ConfigMap health of its own, and a script cannot leave some objects of
-- its kind unassessed (an empty result shows as an unknown status).
--
-- Like the DaemonSet check, this script only uses base functions and never raises an error,
-- whatever shape the object has.

local POLICY_LABEL = "daemonguard.io/policy"
local ERROR_ANNOTATION = "status.daemonguard.io/policy-error"

local hs = {status = "Healthy", message = ""}
local labels, annotations
if type(obj) == "table" and type(obj.metadata) == "table" then
  labels = obj.metadata.labels
  annotations = obj.metadata.annotations
end
if type(labels) == "table" and labels[POLICY_LABEL] == "true" and type(annotations) == "table" then
  local rejected = annotations[ERROR_ANNOTATION]
  if type(rejected) == "string" and rejected ~= "" then
    hs.status = "Degraded"
    hs.message = rejected
  end
end
return hs
