package charts

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// reportGCEnv, set in a child of this test binary, makes it print the Go runtime's GOGC and
// memory limit and exit.
const reportGCEnv = "DAEMONGUARD_TEST_REPORT_GC"

func init() {
	if os.Getenv(reportGCEnv) != "" {
		fmt.Printf("%d %d\n", debug.SetGCPercent(-1), debug.SetMemoryLimit(-1))
		os.Exit(0)
	}
}

// TestWebhookGCSettings: the webhook container gets GOGC and GOMEMLIMIT from webhook.gcPercent
// and webhook.gcMemoryLimit, both or neither: a high GOGC without the limit could let garbage
// grow toward the heap bounds past which the webhook refuses reviews. The Go runtime reads the
// defaults as meant (a child process started with the rendered env), the controller keeps Go's
// defaults, and the benchmarks' daemonguard process runs with the chart's (loadgen.ChartGC).
func TestWebhookGCSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		set  []string
		want []string // the webhook's GOGC and GOMEMLIMIT; nil: neither
		// runtime is what the Go runtime makes of want: GC percent and memory limit in bytes.
		runtime string
	}{
		"the defaults":                     {want: []string{"GOGC=400", "GOMEMLIMIT=128MiB"}, runtime: fmt.Sprintf("400 %d", 128<<20)},
		"other values":                     {set: []string{"webhook.gcPercent=200", "webhook.gcMemoryLimit=1GiB"}, want: []string{"GOGC=200", "GOMEMLIMIT=1GiB"}, runtime: fmt.Sprintf("200 %d", 1<<30)},
		"gcPercent 0 leaves Go's defaults": {set: []string{"webhook.gcPercent=0"}},
		"no limit leaves Go's defaults":    {set: []string{"webhook.gcMemoryLimit="}},
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
				var got []string
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					if e.Name == "GOGC" || e.Name == "GOMEMLIMIT" {
						got = append(got, e.Name+"="+e.Value)
					}
				}
				want := tc.want
				if component != "webhook" {
					want = nil
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s container: %v, want %v", component, got, want)
				}
				if component == "webhook" && want != nil {
					if runtime := goRuntimeGC(t, got); runtime != tc.runtime {
						t.Errorf("the Go runtime reads %v as %q (GC percent, memory limit), want %q", got, runtime, tc.runtime)
					}
				}
			}
			if name == "the defaults" && !slices.Equal(tc.want, loadgen.ChartGC) {
				t.Errorf("loadgen.ChartGC = %v, want the chart's %v", loadgen.ChartGC, tc.want)
			}
		})
	}
}

// goRuntimeGC starts this test binary with env and returns what its Go runtime took for GOGC and
// GOMEMLIMIT.
func goRuntimeGC(t *testing.T, env []string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), reportGCEnv+"=1"), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
	return strings.TrimSpace(string(out))
}
