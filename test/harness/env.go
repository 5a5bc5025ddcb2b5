package harness

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ContainerEnv is the environment the kubelet gives ctr in namespace, as NAME=value: literal
// values and the pod's namespace (fieldRef metadata.namespace). Any other source is an error: a
// component on the host must not run without a variable its pod would have.
func ContainerEnv(ctr corev1.Container, namespace string) ([]string, error) {
	var env []string
	for _, e := range ctr.Env {
		switch from := e.ValueFrom; {
		case from == nil:
			env = append(env, e.Name+"="+e.Value)
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+namespace)
		default:
			return nil, fmt.Errorf("container %s env %s: valueFrom %v is not played on the host", ctr.Name, e.Name, from)
		}
	}
	return env, nil
}
