-- daemonguard health check for apps/DaemonSet (argocd-cm key
-- resource.customizations.health.apps_DaemonSet).
--
-- DaemonSets managed by daemonguard (annotation daemonguard.io/rollout: managed on an OnDelete
-- DaemonSet, rolloutapi.IsManaged in Go) report the rollout condition daemonguard's controller sets in status.conditions: Failed -> Degraded,
-- Paused -> Suspended, Progressing -> Progressing, Complete -> Healthy once every pod is updated
-- and available. Every other DaemonSet gets Argo CD's built-in DaemonSet health logic.
--
-- Argo CD runs custom health scripts without the string, math and os libraries, so this script
-- only uses base functions (type, tostring, tonumber, ipairs, pcall) and never raises an error,
-- whatever shape the object has.

-- The rollout vocabulary, spelled as internal/rolloutapi spells it (a Go test compares them).
local MANAGED_ANNOTATION = "daemonguard.io/rollout"
local MANAGED_VALUE = "managed"
local MANAGED_STRATEGY = "OnDelete"
local STEP_ANNOTATION = "status.daemonguard.io/step"
local UPDATED_ANNOTATION = "status.daemonguard.io/updated"
local CONDITION_PROGRESSING = "Progressing"
local CONDITION_PAUSED = "Paused"
local CONDITION_FAILED = "Failed"
local CONDITION_COMPLETE = "Complete"

-- field returns t[key] when t is a table, nil otherwise.
local function field(t, key)
  if type(t) == "table" then
    return t[key]
  end
  return nil
end

-- str renders scalars as text; anything else (nil, tables) is "".
local function str(v)
  local tv = type(v)
  if tv == "string" then
    return v
  end
  if tv == "number" or tv == "boolean" then
    return tostring(v)
  end
  return ""
end

-- num reads a count or generation; absent or malformed values are 0.
local function num(v)
  if type(v) == "string" then
    v = tonumber(v)
  end
  if type(v) ~= "number" or v ~= v then
    return 0
  end
  return v
end

-- Argo CD's built-in DaemonSet health (gitops-engine pkg/health/health_daemonset.go).
local function builtin(metadata, spec, status)
  if num(field(metadata, "generation")) > num(field(status, "observedGeneration")) then
    return "Progressing", "Waiting for rollout to finish: observed daemon set generation less than desired generation"
  end
  local updated = num(field(status, "updatedNumberScheduled"))
  local desired = num(field(status, "desiredNumberScheduled"))
  local available = num(field(status, "numberAvailable"))
  if str(field(field(spec, "updateStrategy"), "type")) == "OnDelete" then
    return "Healthy", "daemon set " .. tostring(updated) .. " out of " .. tostring(desired) .. " new pods have been updated"
  end
  local name = '"' .. str(field(metadata, "name")) .. '"'
  if updated < desired then
    return "Progressing", "Waiting for daemon set " .. name .. " rollout to finish: " .. tostring(updated) .. " out of " .. tostring(desired) .. " new pods have been updated..."
  end
  if available < desired then
    return "Progressing", "Waiting for daemon set " .. name .. " rollout to finish: " .. tostring(available) .. " of " .. tostring(desired) .. " updated pods are available..."
  end
  return "Healthy", ""
end

local function isTrue(v)
  return v == "True" or v == true
end

-- rolloutConditions returns the first True condition of each daemonguard type. Entries that are
-- not tables or lack a type or a True status are skipped.
local function rolloutConditions(status)
  local found = {}
  local any = false
  local conditions = field(status, "conditions")
  if type(conditions) ~= "table" then
    return found, any
  end
  for _, c in ipairs(conditions) do
    if type(c) == "table" and isTrue(c.status) then
      local ctype = str(c.type)
      if (ctype == CONDITION_FAILED or ctype == CONDITION_PAUSED or ctype == CONDITION_PROGRESSING or ctype == CONDITION_COMPLETE) and found[ctype] == nil then
        found[ctype] = c
        any = true
      end
    end
  end
  return found, any
end

-- first returns the first non-empty string.
local function first(a, b, c)
  if a ~= "" then
    return a
  end
  if b ~= "" then
    return b
  end
  return c
end

local function daemonguard(metadata, status, annotations)
  local generation = num(field(metadata, "generation"))
  if type(status) ~= "table" or generation > num(status.observedGeneration) then
    if generation > 0 then
      return "Progressing", "Waiting for the DaemonSet controller to observe generation " .. tostring(generation)
    end
    return "Progressing", "Waiting for the DaemonSet controller to observe the DaemonSet"
  end

  local found, any = rolloutConditions(status)
  if not any then
    return "Progressing", "Waiting for daemonguard's rollout controller"
  end

  -- Exactly one of these is True at a time; should several be, the most severe wins.
  local c = found[CONDITION_FAILED]
  if c ~= nil then
    local reason, message = str(c.reason), str(c.message)
    if reason ~= "" and message ~= "" then
      return "Degraded", reason .. ": " .. message
    end
    return "Degraded", first(reason, message, "Rollout failed")
  end

  c = found[CONDITION_PAUSED]
  if c ~= nil then
    return "Suspended", first(str(c.message), str(c.reason), "Rollout paused")
  end

  -- The controller writes its status annotations and its conditions in two writes, so they can
  -- disagree for a moment: a message is taken from one source. The condition's message names the
  -- step and the counts; the annotations are the fallback when it has none.
  c = found[CONDITION_PROGRESSING]
  if c ~= nil then
    local message = str(c.message)
    if message ~= "" then
      return "Progressing", message
    end
    local step = str(field(annotations, STEP_ANNOTATION))
    local updated = str(field(annotations, UPDATED_ANNOTATION))
    if step ~= "" and updated ~= "" then
      return "Progressing", "step " .. step .. ", updated " .. updated
    end
    return "Progressing", first(str(c.reason), "Rollout in progress", "")
  end

  c = found[CONDITION_COMPLETE]
  local desired = num(status.desiredNumberScheduled)
  local updated = num(status.updatedNumberScheduled)
  local available = num(status.numberAvailable)
  if updated < desired or available < desired then
    -- daemonguard is done deleting old pods but the DaemonSet is not there yet: new pods are
    -- still starting, a node joined, or a node daemonguard left out still runs an old pod.
    -- The DaemonSet controller's counts alone.
    return "Progressing", "Rollout complete, waiting for pods: " .. tostring(updated) .. " of " .. tostring(desired) .. " updated, " .. tostring(available) .. " of " .. tostring(desired) .. " available"
  end
  return "Healthy", first(str(c.message), str(c.reason), "Rollout complete")
end

local function health(o)
  local metadata = field(o, "metadata")
  local spec = field(o, "spec")
  local status = field(o, "status")
  local annotations = field(metadata, "annotations")
  -- Managed means opted in on an OnDelete DaemonSet. With any other strategy (admission denies
  -- it, but an exempt namespace may hold one) the built-in controller rolls the pods, daemonguard
  -- does not, and any condition it wrote before is stale: the built-in assessment tells the truth.
  local strategy = str(field(field(spec, "updateStrategy"), "type"))
  if str(field(annotations, MANAGED_ANNOTATION)) == MANAGED_VALUE and strategy == MANAGED_STRATEGY then
    return daemonguard(metadata, status, annotations)
  end
  return builtin(metadata, spec, status)
end

local hs = {}
local ok, healthStatus, message = pcall(health, obj)
if ok and type(healthStatus) == "string" and type(message) == "string" then
  hs.status = healthStatus
  hs.message = message
else
  -- Not reachable with the checks above; kept so that a bug shows as Unknown, never as an error.
  hs.status = "Unknown"
  hs.message = "daemonguard health check failed: " .. str(healthStatus)
end
return hs
