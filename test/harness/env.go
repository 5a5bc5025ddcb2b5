package harness

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ContainerEnv is the environment the kubelet gives ctr in namespace, as NAME=value: literal
// values, the pod's namespace (fieldRef metadata.namespace) and the container's own requests and
// limits (resourceFieldRef, divided by its divisor, rounded up as the kubelet does). Any other
// source is an error: a component on the host must not run without a variable its pod would have.
func ContainerEnv(ctr corev1.Container, namespace string) ([]string, error) {
	var env []string
	for _, e := range ctr.Env {
		value, err := envValue(ctr, e, namespace)
		if err != nil {
			return nil, fmt.Errorf("container %s env %s: %w", ctr.Name, e.Name, err)
		}
		env = append(env, e.Name+"="+value)
	}
	return env, nil
}

func envValue(ctr corev1.Container, e corev1.EnvVar, namespace string) (string, error) {
	switch from := e.ValueFrom; {
	case from == nil:
		return e.Value, nil
	case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
		return namespace, nil
	case from.ResourceFieldRef != nil && (from.ResourceFieldRef.ContainerName == "" || from.ResourceFieldRef.ContainerName == ctr.Name):
		ref := from.ResourceFieldRef
		var q resource.Quantity
		var ok bool
		switch ref.Resource {
		case "requests.memory":
			q, ok = ctr.Resources.Requests[corev1.ResourceMemory]
		case "limits.memory":
			q, ok = ctr.Resources.Limits[corev1.ResourceMemory]
		case "requests.cpu":
			q, ok = ctr.Resources.Requests[corev1.ResourceCPU]
		case "limits.cpu":
			q, ok = ctr.Resources.Limits[corev1.ResourceCPU]
		default:
			return "", fmt.Errorf("resourceFieldRef %s is not played on the host", ref.Resource)
		}
		if !ok {
			// The kubelet would give the node's allocatable, which a host process has no
			// counterpart of.
			return "", fmt.Errorf("resourceFieldRef %s: the container sets none", ref.Resource)
		}
		divisor := ref.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		// As the kubelet's ExtractContainerResourceValue: ceil(value / divisor), in milli-units
		// for CPU so that a divisor of 1m works.
		n := (q.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()
		return fmt.Sprint(n), nil
	}
	return "", fmt.Errorf("valueFrom %v is not played on the host", e.ValueFrom)
}
