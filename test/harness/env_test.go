package harness

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestContainerEnvIsWhatTheKubeletGives(t *testing.T) {
	for name, tc := range map[string]struct {
		env     []corev1.EnvVar
		want    []string
		wantErr bool
	}{
		"literal values": {env: []corev1.EnvVar{{Name: "GOGC", Value: "400"}, {Name: "GOMEMLIMIT", Value: "128MiB"}}, want: []string{"GOGC=400", "GOMEMLIMIT=128MiB"}},
		"the pod's namespace": {env: []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
			want: []string{"POD_NAMESPACE=ns"}},
		"a field the host cannot give": {env: []corev1.EnvVar{{Name: "N", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}, wantErr: true},
		"a resource of the container":  {env: []corev1.EnvVar{{Name: "M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory"}}}}, wantErr: true},
		"a Secret":                     {env: []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ContainerEnv(corev1.Container{Name: "webhook", Env: tc.env}, "ns")
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
