package harness

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestContainerEnvIsWhatTheKubeletGives(t *testing.T) {
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("192Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	field := func(r, divisor string) *corev1.EnvVarSource {
		ref := &corev1.ResourceFieldSelector{Resource: r}
		if divisor != "" {
			ref.Divisor = resource.MustParse(divisor)
		}
		return &corev1.EnvVarSource{ResourceFieldRef: ref}
	}
	for name, tc := range map[string]struct {
		env     []corev1.EnvVar
		want    []string
		wantErr bool
	}{
		"a literal value": {env: []corev1.EnvVar{{Name: "GOGC", Value: "400"}}, want: []string{"GOGC=400"}},
		"the pod's namespace": {env: []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
			want: []string{"POD_NAMESPACE=ns"}},
		"the memory request in bytes":        {env: []corev1.EnvVar{{Name: "GOMEMLIMIT", ValueFrom: field("requests.memory", "")}}, want: []string{"GOMEMLIMIT=201326592"}},
		"the memory limit in MiB":            {env: []corev1.EnvVar{{Name: "M", ValueFrom: field("limits.memory", "1Mi")}}, want: []string{"M=512"}},
		"a CPU request rounded up to cores":  {env: []corev1.EnvVar{{Name: "C", ValueFrom: field("requests.cpu", "")}}, want: []string{"C=1"}},
		"a CPU request in millicores":        {env: []corev1.EnvVar{{Name: "C", ValueFrom: field("requests.cpu", "1m")}}, want: []string{"C=100"}},
		"a limit the container does not set": {env: []corev1.EnvVar{{Name: "C", ValueFrom: field("limits.cpu", "")}}, wantErr: true},
		"another container's resources": {env: []corev1.EnvVar{{Name: "M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "sidecar", Resource: "requests.memory"}}}},
			wantErr: true},
		"a field the host cannot give": {env: []corev1.EnvVar{{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}, wantErr: true},
		"a Secret":                     {env: []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ContainerEnv(corev1.Container{Name: "webhook", Env: tc.env, Resources: resources}, "ns")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error, env %v", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ContainerEnv = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
