package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// With a real node (Options.RealNode) the control-plane node runs real containers, and nothing can
// be pulled there: the seed DaemonSet runs the node-agent image built in this checkout instead of
// nginx, so its pod on the control-plane node — the one daemonguard's toleration puts there — is a
// real container. The rollout and policy DaemonSets roll nginx tags through kwok's fake kubelets;
// they are kept on the kwok nodes (label type=kwok).

// seedManifest returns the manifest to apply for the seed DaemonSet.
func seedManifest(path string, realNode bool) ([]byte, error) {
	return demoManifest(path, realNode, func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Image = nodeimages.AgentV1
		ds.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	})
}

// kwokOnlyManifest returns the manifest of a DaemonSet whose images only kwok's kubelets "run":
// kept off the real node.
func kwokOnlyManifest(path string, realNode bool) ([]byte, error) {
	return demoManifest(path, realNode, func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"kwok"}}},
			}}},
		}}
	})
}

// demoManifest reads a demo DaemonSet's manifest, changed for a real node when there is one.
func demoManifest(path string, realNode bool, forRealNode func(*appsv1.DaemonSet)) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil || !realNode {
		return data, err
	}
	return clustertest.EditDaemonSet(data, forRealNode)
}

// applyManifest applies a manifest given as bytes, echoed as `kubectl apply -f name`.
func applyManifest(ctx context.Context, c *localcluster.Cluster, out io.Writer, name string, manifest []byte) (string, error) {
	fmt.Fprintf(out, "\n$ kubectl apply -f %s\n", name)
	cmd := exec.CommandContext(ctx, "kubectl", "apply", "-f", "-")
	cmd.Env = c.Env()
	cmd.Stdin = strings.NewReader(string(manifest))
	var buf strings.Builder
	cmd.Stdout = io.MultiWriter(out, &buf)
	cmd.Stderr = io.MultiWriter(out, &buf)
	err := cmd.Run()
	return buf.String(), err
}
