package charts

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// TestWebhookGCHeldWithinItsMemoryRequest: the webhook container gets GOGC from
// webhook.gcPercent and, from the downward API, its memory request as GOMEMLIMIT, both or
// neither: a high GOGC without the limit could let garbage grow toward the heap limits the
// webhook refuses reviews past. The controller keeps Go's defaults. The benchmarks' daemonguard
// process runs with the defaults' settings (loadgen.ChartGC).
func TestWebhookGCHeldWithinItsMemoryRequest(t *testing.T) {
	memoryRequest := &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory"}}
	for name, tc := range map[string]struct {
		set      []string
		wantGOGC string // "": neither variable
	}{
		"the defaults: GOGC 400 within the memory request": {wantGOGC: "400"},
		"another gcPercent":                      {set: []string{"webhook.gcPercent=200"}, wantGOGC: "200"},
		"gcPercent 0 leaves Go's defaults":       {set: []string{"webhook.gcPercent=0"}},
		"no memory request leaves Go's defaults": {set: []string{"webhook.resources.requests.memory=null"}},
	} {
		t.Run(name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := template(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range typedObjects[*appsv1.Deployment](objects(t, out)) {
				component := d.Labels["app.kubernetes.io/component"]
				env := d.Spec.Template.Spec.Containers[0].Env
				gogc := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "GOGC" })
				limit := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
				if component != "webhook" || tc.wantGOGC == "" {
					if gogc >= 0 || limit >= 0 {
						t.Errorf("%s container sets GOGC or GOMEMLIMIT: %v", component, env)
					}
					continue
				}
				if gogc < 0 || env[gogc].Value != tc.wantGOGC {
					t.Errorf("webhook container env %v, want GOGC=%s", env, tc.wantGOGC)
				}
				if limit < 0 || !equality.Semantic.DeepEqual(env[limit].ValueFrom, memoryRequest) {
					t.Errorf("webhook container env %v, want GOMEMLIMIT from requests.memory", env)
				}
			}
		})
	}

	t.Run("the benchmarks run daemonguard with the defaults", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var values struct {
			Webhook struct {
				GCPercent int                         `json:"gcPercent"`
				Resources corev1.ResourceRequirements `json:"resources"`
			} `json:"webhook"`
		}
		if err := yaml.Unmarshal(raw, &values); err != nil {
			t.Fatal(err)
		}
		request := values.Webhook.Resources.Requests[corev1.ResourceMemory]
		want := []string{"GOGC=" + strconv.Itoa(values.Webhook.GCPercent), "GOMEMLIMIT=" + strconv.FormatInt(request.Value(), 10)}
		if request.IsZero() || !slices.Equal(loadgen.ChartGC, want) {
			t.Errorf("loadgen.ChartGC = %v, want %v (values.yaml)", loadgen.ChartGC, want)
		}
	})
}
