package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// partitionHolder holds the Lease of a partitioned node instead of kwok.
const partitionHolder = "daemonguard-partition"

// PartitionNode cuts a fake node off the way a crashed kubelet or a network partition does: its
// kubelet stops acting. kwok runs one fake kubelet per node Lease it holds (several kwok
// instances share nodes that way), so taking the node's Lease in kube-node-lease from kwok makes
// kwok leave the node and its pods alone: no status updates, no new pods started, and deletions
// of its pods never complete. kwok notices through its Lease informer, usually within a second but
// on a loaded machine seen to take over 20 seconds, so do not build on the exact moment. The node
// stays Ready, as a real node does until the node lifecycle controller's grace period passes;
// MarkNodeUnreachable ends that grace period at once. A partitioned node is not given back;
// delete it when the test ends.
func (c *Cluster) PartitionNode(ctx context.Context, name string) error {
	leases := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		take(lease)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("take the lease of node %s from kwok: %w", name, err)
	}
	return nil
}

// take makes the partition the Lease's holder for an hour from now: kwok only acquires a Lease
// another holder lets expire. The node lifecycle controller sees one last renewal and then none.
func take(lease *coordinationv1.Lease) {
	lease.Spec.HolderIdentity = ptr.To(partitionHolder)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(3600))
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
}

// MarkNodeUnreachable posts what the node lifecycle controller posts for a node whose kubelet
// stopped reporting for its grace period (Ready and the pressure conditions Unknown, reason
// NodeStatusUnknown), without waiting that period, and waits until the controller has reacted
// as it does to such a node: the node.kubernetes.io/unreachable taints. Partition the node
// first, or kwok, as its kubelet, reports it Ready again. The controller marks the node's pods
// NotReady only when it makes the transition itself, so they keep their Ready condition here.
func (c *Cluster) MarkNodeUnreachable(ctx context.Context, name string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, err
			}
			last = err.Error()
			return false, nil
		}
		ready := readyStatus(node)
		if ready != corev1.ConditionUnknown {
			// First round, or kwok had not yet seen the Lease change and reported the node Ready.
			if err := c.postUnknown(ctx, node); err != nil {
				last = err.Error()
			}
			return false, nil
		}
		noSchedule, noExecute := false, false
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeUnreachable {
				noSchedule = noSchedule || t.Effect == corev1.TaintEffectNoSchedule
				noExecute = noExecute || t.Effect == corev1.TaintEffectNoExecute
			}
		}
		last = fmt.Sprintf("Ready %s, taints %v", ready, node.Spec.Taints)
		return noSchedule && noExecute, nil
	})
	if err != nil {
		return fmt.Errorf("mark node %s unreachable: %w (last: %s)", name, err, last)
	}
	return nil
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// postUnknown writes the conditions as the node lifecycle controller's tryUpdateNodeHealth does
// after the grace period: status Unknown, heartbeat time unchanged, transition time now.
func (c *Cluster) postUnknown(ctx context.Context, node *corev1.Node) error {
	now := metav1.Now()
	var conds []map[string]any
	for _, cond := range node.Status.Conditions {
		switch cond.Type {
		case corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure:
			conds = append(conds, map[string]any{
				"type": cond.Type, "status": corev1.ConditionUnknown, "reason": "NodeStatusUnknown",
				"message": "Kubelet stopped posting node status.", "lastTransitionTime": now,
			})
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
