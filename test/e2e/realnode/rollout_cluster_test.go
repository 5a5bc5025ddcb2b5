package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// agentName is the managed DaemonSet of the rollout test: a node agent for the control plane.
const agentName = "control-plane-agent"

// controlPlaneAgent runs the node agent on every control-plane node (it tolerates no taint:
// daemonguard injects the toleration), rolled out by daemonguard one node at a time: a canary,
// then a pause until resumed, then the rest. Among control-plane nodes the controller goes by
// name, so the canary is the real node, where a real kubelet runs the new version first.
func controlPlaneAgent(image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %[1]s
  labels: {app: %[1]s}
  annotations:
    daemonguard.io/rollout: managed
    daemonguard.io/max-unavailable: "1"
    daemonguard.io/steps: "1,pause,100%%"
    daemonguard.io/progress-deadline: "2m"
spec:
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {node-role.kubernetes.io/control-plane: ""}
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: IfNotPresent
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 1
`, agentName, image)
}

// controlPlaneNodes are the nodes the agent runs on, in the controller's order.
var controlPlaneNodes = []string{realNode, "control-plane-1", "control-plane-2"}

// testManagedRollout rolls the node agent v1 → v2 through the canary and the pause (killing the
// controller's pod while paused: the new leader resumes the rollout), then to the crash-looping
// version, which the real kubelet's CrashLoopBackOff halts on the canary within the budget, then
// `daemonguard rollout undo` brings v2 back.
func testManagedRollout(t *testing.T, a *artifacts) {
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, controlPlaneAgent(nodeimages.AgentV1), "apply", "-n", ns, "-f", "-")
	waitAgents(t, ns, map[string]string{realNode: nodeimages.AgentV1, "control-plane-1": nodeimages.AgentV1, "control-plane-2": nodeimages.AgentV1})
	waitRollout(t, ns, rolloutapi.PhaseComplete, time.Minute)
	checkAgentVersion(t, ns, "v1")
	s := clustertest.NewBudgetSampler(t, cluster, ns, clustertest.SamplerOptions{Selector: "app=" + agentName, Nodes: controlPlaneNodes})

	t.Run("v1 to v2 with the canary on the real node then a pause", func(t *testing.T) {
		start := time.Now()
		clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/"+agentName, "agent="+nodeimages.AgentV2)
		ds := waitRollout(t, ns, rolloutapi.PhasePaused, 2*time.Minute)
		t.Logf("canary updated and paused %s after kubectl set image", since(start))
		if got := ds.Annotations[rolloutapi.StatusStep]; !strings.HasPrefix(got, "2/3") {
			t.Errorf("paused at step %q, want 2/3", got)
		}
		if got := ds.Annotations[rolloutapi.StatusUpdated]; got != "1/3" {
			t.Errorf("paused with %s %q, want 1/3", rolloutapi.StatusUpdated, got)
		}
		waitAgents(t, ns, map[string]string{realNode: nodeimages.AgentV2, "control-plane-1": nodeimages.AgentV1, "control-plane-2": nodeimages.AgentV1})
		checkAgentVersion(t, ns, "v2")
	})

	t.Run("the controller pod is killed while paused and the new leader resumes the rollout", func(t *testing.T) {
		ctx := context.Background()
		old := leaseHolder(t)
		pods, err := listPods(ctx, releaseNamespace, component("controller"))
		if err != nil || len(pods) != 1 {
			t.Fatalf("controller pods: %v, %d", err, len(pods))
		}
		start := time.Now()
		if err := cluster.Client.CoreV1().Pods(releaseNamespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var holder string
		cluster.WaitFor(t, 2*time.Minute, "a new controller pod holds the leader lease", func(ctx context.Context) (bool, string) {
			holder = leaseHolderOf(ctx)
			ready, err := readyPods(ctx, component("controller"), pods[0].Spec.Containers[0].Image)
			if err != nil {
				return false, err.Error()
			}
			return len(ready) == 1 && ready[0].Name != pods[0].Name && strings.HasPrefix(holder, ready[0].Name+"_"), "lease held by " + holder
		})
		t.Logf("controller pod %s (leader %s) deleted; %s leads %s later", pods[0].Name, old, holder, since(start))
		daemonguardCLI(t, a.cli, "rollout", "resume", "ds/"+agentName, "-n", ns)
		waitRollout(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
		waitAgents(t, ns, map[string]string{realNode: nodeimages.AgentV2, "control-plane-1": nodeimages.AgentV2, "control-plane-2": nodeimages.AgentV2})
	})

	t.Run("the crash-looping version halts on the real node CrashLoopBackOff", func(t *testing.T) {
		start := time.Now()
		clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/"+agentName, "agent="+nodeimages.AgentCrash)
		ds := waitRollout(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
		t.Logf("rollout Failed %s after kubectl set image", since(start))
		failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
		if failed.Reason != "PodFailure" || !strings.Contains(failed.Message, realNode+": CrashLoopBackOff") {
			t.Errorf("Failed condition %s: %s, want PodFailure naming %s: CrashLoopBackOff", failed.Reason, failed.Message, realNode)
		}
		// Between two crashes the kubelet runs the container again for a moment, so its status
		// alternates between Running and Waiting: wait for the kubelet's CrashLoopBackOff.
		var cs corev1.ContainerStatus
		cluster.WaitFor(t, time.Minute, "the kubelet's CrashLoopBackOff after exit code 1 on "+realNode, func(context.Context) (bool, string) {
			pod := agentPods(t, ns)[realNode]
			if pod == nil || len(pod.Status.ContainerStatuses) == 0 {
				return false, "no container status yet"
			}
			cs = pod.Status.ContainerStatuses[0]
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" && cs.RestartCount >= 1 &&
				cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 1, fmt.Sprintf("%+v", cs)
		})
		// The rest keep v2: the failure on the canary stopped the rollout before them.
		waitAgents(t, ns, map[string]string{"control-plane-1": nodeimages.AgentV2, "control-plane-2": nodeimages.AgentV2})
		for _, node := range controlPlaneNodes[1:] {
			if images := s.ImagesSeenOn(node); strings.Contains(strings.Join(images, ","), nodeimages.AgentCrash) {
				t.Errorf("%s ran %v: the failed rollout went past the canary", node, images)
			}
		}
		t.Logf("the crash pod on %s: restarts %d, last exit code %d, %s", realNode, cs.RestartCount,
			cs.LastTerminationState.Terminated.ExitCode, failed.Message)
	})

	t.Run("daemonguard rollout undo brings v2 back", func(t *testing.T) {
		out := daemonguardCLI(t, a.cli, "rollout", "undo", "ds/"+agentName, "-n", ns)
		t.Logf("daemonguard rollout undo: %s", strings.TrimSpace(out))
		// The undo is a new rollout with the same steps: it may pause after its canary again.
		ds := waitRolloutAny(t, ns, 2*time.Minute, rolloutapi.PhasePaused, rolloutapi.PhaseComplete)
		if clustertest.RolloutCondition(ds, rolloutapi.PhasePaused) != nil {
			daemonguardCLI(t, a.cli, "rollout", "resume", "ds/"+agentName, "-n", ns)
		}
		waitRollout(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
		waitAgents(t, ns, map[string]string{realNode: nodeimages.AgentV2, "control-plane-1": nodeimages.AgentV2, "control-plane-2": nodeimages.AgentV2})
		checkAgentVersion(t, ns, "v2")
	})

	s.Stop()
	s.CheckBudget(t, 1)
}

// waitAgents waits until each named node runs exactly one agent pod, Ready, with its image.
func waitAgents(t *testing.T, ns string, want map[string]string) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, "agents "+fmt.Sprint(want), func(ctx context.Context) (bool, string) {
		pods, err := listPods(ctx, ns, "app="+agentName)
		if err != nil {
			return false, err.Error()
		}
		perNode := map[string][]corev1.Pod{}
		for _, p := range pods {
			perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], p)
		}
		for node, image := range want {
			ps := perNode[node]
			if len(ps) != 1 || ps[0].DeletionTimestamp != nil || ps[0].Spec.Containers[0].Image != image || !clustertest.PodReady(&ps[0]) {
				return false, fmt.Sprintf("%s: %d pods, not one Ready with %s", node, len(ps), image)
			}
		}
		return true, ""
	})
}

// agentPods returns the agent's live pods by node.
func agentPods(t *testing.T, ns string) map[string]*corev1.Pod {
	t.Helper()
	pods, err := listPods(context.Background(), ns, "app="+agentName)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]*corev1.Pod{}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			byNode[pods[i].Spec.NodeName] = &pods[i]
		}
	}
	return byNode
}

// checkAgentVersion asks the agent on the real node for its version, from the host to the pod's
// IP: the process answering is the version the rollout put there.
func checkAgentVersion(t *testing.T, ns, want string) {
	t.Helper()
	pod := agentPods(t, ns)[realNode]
	if pod == nil || pod.Status.PodIP == "" {
		t.Fatalf("no agent pod with an IP on %s", realNode)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/version")
	if err != nil {
		t.Fatalf("the agent on %s: %v", realNode, err)
	}
	defer resp.Body.Close()
	var v struct{ Version, Node string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("the agent on %s answered /version with %s: %v", realNode, resp.Status, err)
	}
	if v.Version != want || v.Node != realNode {
		t.Errorf("the agent at %s reports version %q on node %q, want %q on %s", pod.Status.PodIP, v.Version, v.Node, want, realNode)
	}
}

// waitRollout waits until the agent's rollout condition phase is True.
func waitRollout(t *testing.T, ns string, phase rolloutapi.Phase, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	return waitRolloutAny(t, ns, timeout, phase)
}

func waitRolloutAny(t *testing.T, ns string, timeout time.Duration, phases ...rolloutapi.Phase) *appsv1.DaemonSet {
	t.Helper()
	return clustertest.WaitDaemonSet(t, cluster, ns, agentName, timeout, agentName+" rollout "+fmt.Sprint(phases), func(ds *appsv1.DaemonSet) (bool, string) {
		for _, p := range phases {
			if clustertest.RolloutCondition(ds, p) != nil && ds.Status.ObservedGeneration == ds.Generation {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", ds.Status.Conditions)
	})
}

const controllerLease = "daemonguard-rollout-controller"

func leaseHolder(t *testing.T) string {
	t.Helper()
	holder := leaseHolderOf(context.Background())
	if holder == "" {
		t.Fatalf("nobody holds the lease %s/%s", releaseNamespace, controllerLease)
	}
	return holder
}

func leaseHolderOf(ctx context.Context) string {
	l, err := cluster.Client.CoordinationV1().Leases(releaseNamespace).Get(ctx, controllerLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
