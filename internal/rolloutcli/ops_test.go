package rolloutcli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

func TestDetectGitOps(t *testing.T) {
	tests := map[string]struct {
		labels, annotations map[string]string
		tool                string // "" means not detected
		evidence            string
	}{
		"Argo CD annotation tracking": {
			annotations: map[string]string{"argocd.argoproj.io/tracking-id": "agents:apps/DaemonSet:mon/agent"},
			tool:        "Argo CD", evidence: "annotation argocd.argoproj.io/tracking-id",
		},
		"an Argo CD label": {
			labels: map[string]string{"argocd.argoproj.io/instance": "agents"}, tool: "Argo CD", evidence: "label argocd.argoproj.io/instance",
		},
		"Argo CD's default tracking label app.kubernetes.io/instance": {
			labels: map[string]string{"app.kubernetes.io/instance": "agents"}, tool: "Argo CD", evidence: "app.kubernetes.io/instance=agents",
		},
		"app.kubernetes.io/instance set by a Helm install is not GitOps": {
			labels:      map[string]string{"app.kubernetes.io/instance": "agents", "app.kubernetes.io/managed-by": "Helm"},
			annotations: map[string]string{"meta.helm.sh/release-name": "agents"},
		},
		"a Flux kustomization": {
			labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "infra"}, tool: "Flux", evidence: "label kustomize.toolkit.fluxcd.io/name",
		},
		"a Flux HelmRelease (Helm annotations too)": {
			labels:      map[string]string{"helm.toolkit.fluxcd.io/name": "agents", "app.kubernetes.io/instance": "agents"},
			annotations: map[string]string{"meta.helm.sh/release-name": "agents"},
			tool:        "Flux", evidence: "label helm.toolkit.fluxcd.io/name",
		},
		"plain kubectl apply": {
			labels: map[string]string{"app": "agent"}, annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, ok := DetectGitOps(&metav1.ObjectMeta{Labels: tc.labels, Annotations: tc.annotations})
			if ok != (tc.tool != "") || g.Tool != tc.tool || !strings.Contains(g.Evidence, tc.evidence) {
				t.Errorf("DetectGitOps = %+v, %v; want tool %q with evidence %q", g, ok, tc.tool, tc.evidence)
			}
		})
	}
}

func TestResumeToken(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.FixedZone("CEST", 7200))
	token := ResumeToken(now, "")
	if token != "2026-05-01T08:00:00.123456789Z" {
		t.Errorf("ResumeToken = %q, want RFC 3339 UTC with nanoseconds", token)
	}
	if again := ResumeToken(now, token); again == token || again != "2026-05-01T08:00:00.12345679Z" {
		t.Errorf("ResumeToken at the same instant as the previous token = %q, want a different one", again)
	}
	if len(token) > 63 {
		t.Errorf("token %q is longer than the 63 characters the policy allows", token)
	}
}

func TestPatches(t *testing.T) {
	restart, err := RestartPatch(time.Date(2026, 5, 1, 10, 0, 0, 5, time.UTC))
	if err != nil || string(restart) != `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-05-01T10:00:00Z"}}}}}` {
		t.Errorf("RestartPatch = %s, %v", restart, err)
	}
	pause, err := AnnotationsPatch(map[string]string{rolloutapi.AnnotationPaused: "true"})
	if err != nil || string(pause) != `{"metadata":{"annotations":{"daemonguard.io/paused":"true"}}}` {
		t.Errorf("AnnotationsPatch = %s, %v", pause, err)
	}
}

func TestNotManagedError(t *testing.T) {
	rolling := dsWithImage("a:1")
	err := checkManaged(rolling, "pause")
	for _, want := range []string{`cannot pause daemon set "agent"`, "built-in DaemonSet controller cannot pause", `daemonguard.io/rollout: "managed"`, "OnDelete"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	annotated := dsWithImage("a:1")
	annotated.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged}
	if err := checkManaged(annotated, "resume"); err == nil || !strings.Contains(err.Error(), "its updateStrategy is RollingUpdate") {
		t.Errorf("managed annotation on RollingUpdate: %v", err)
	}
	annotated.Spec.UpdateStrategy.Type = "OnDelete"
	if err := checkManaged(annotated, "pause"); err != nil {
		t.Errorf("managed OnDelete DaemonSet refused: %v", err)
	}
}
