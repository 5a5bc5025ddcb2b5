package localcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Node describes a fake node to create.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Allocatable is what the scheduler may place on the node (also written as its capacity);
	// nil leaves kwok's default, room for everything.
	Allocatable corev1.ResourceList
}

// ControlPlaneNode returns a node labelled and tainted like a kubeadm control-plane node.
func ControlPlaneNode(name string) Node {
	return Node{
		Name:   name,
		Labels: map[string]string{ControlPlaneLabel: "", ZoneLabel: "zone-a"},
		Taints: []corev1.Taint{{Key: ControlPlaneLabel, Effect: corev1.TaintEffectNoSchedule}},
	}
}

// WorkerNodes returns n untainted workers named prefix-0..n-1, spread round-robin over zones.
func WorkerNodes(prefix string, n int, zones ...string) []Node {
	if len(zones) == 0 {
		zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{
			Name:   fmt.Sprintf("%s-%d", prefix, i),
			Labels: map[string]string{ZoneLabel: zones[i%len(zones)]},
		}
	}
	return nodes
}

// DefaultNodes is one tainted control-plane node and four workers over three zones: the smallest
// cluster on which "a DaemonSet misses the control plane" is visible.
func DefaultNodes() []Node {
	return append([]Node{ControlPlaneNode("control-plane-0")}, WorkerNodes("worker", 4)...)
}

// AddNodes creates fake nodes for kwok to manage and waits until each is Ready with the
// node-lifecycle not-ready taint lifted, i.e. until the DaemonSet controller would place pods on it.
func (c *Cluster) AddNodes(ctx context.Context, nodes ...Node) error {
	if len(nodes) == 0 {
		return nil
	}
	const workers = 16
	errs := make(chan error, len(nodes))
	work := make(chan Node)
	var wg sync.WaitGroup
	for range min(workers, len(nodes)) {
		wg.Go(func() {
			for n := range work {
				errs <- c.createNode(ctx, n)
			}
		})
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return c.WaitNodesSchedulable(ctx, names...)
}

func (c *Cluster) createNode(ctx context.Context, n Node) error {
	labels := map[string]string{
		HostnameLabel:        n.Name,
		"kubernetes.io/os":   "linux",
		"kubernetes.io/arch": "amd64",
		"type":               "kwok",
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Spec: corev1.NodeSpec{Taints: n.Taints},
		// A node's status is kept on create, as the kubelet registers it; kwok's node-initialize
		// stage keeps an allocatable and capacity it finds.
		Status: corev1.NodeStatus{Allocatable: n.Allocatable, Capacity: n.Allocatable},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	return nil
}

// WaitNodesSchedulable waits until the named nodes are Ready and carry none of the taints the
// node lifecycle controller puts on nodes it has not yet seen healthy.
func (c *Cluster) WaitNodesSchedulable(ctx context.Context, names ...string) error {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var pending []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pending = pending[:0]
		seen := 0
		for i := range list.Items {
			n := &list.Items[i]
			if !want[n.Name] {
				continue
			}
			seen++
			if !nodeSchedulable(n) {
				pending = append(pending, n.Name)
			}
		}
		return seen == len(want) && len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d nodes to be Ready (still waiting for %s): %w", len(want), summarize(pending), err)
	}
	return nil
}

func nodeSchedulable(n *corev1.Node) bool {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	return ready
}

func summarize(names []string) string {
	if len(names) == 0 {
		return "nodes not yet created"
	}
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// DeleteNode deletes a node the way a cloud provider does when an instance goes away.
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}
