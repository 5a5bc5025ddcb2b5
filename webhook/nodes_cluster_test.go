package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// An integer budget is judged against the nodes the DaemonSet runs on, as the webhook's node
// informer sees them: the same dry-run create that is denied on 5 nodes is allowed once 2 more
// join, and denied again once they leave.
func TestIntegerBudgetFollowsTheNodeList(t *testing.T) {
	startWebhook(t)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	ds := seedDaemonSet(t)
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
		Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(3))},
	}
	dryRun := func(ctx context.Context) error {
		_, err := createDryRun(ctx, ns, ds.DeepCopy())
		return err
	}
	// 5 nodes, all targeted once the control-plane toleration is injected: at most
	// floor(5 * 50%) = 2 may be unavailable.
	wantDenied := func(what string) {
		cluster.WaitFor(t, time.Minute, what, func(ctx context.Context) (bool, string) {
			err := dryRun(ctx)
			return err != nil && strings.Contains(err.Error(), "rolling_update_budget"), fmt.Sprint(err)
		})
	}
	wantDenied("maxUnavailable 3 denied on 5 nodes")

	names := []string{"budget-extra-0", "budget-extra-1"}
	t.Cleanup(func() {
		for _, name := range names {
			_ = cluster.DeleteNode(context.Background(), name)
		}
	})
	var extra []localcluster.Node
	for _, name := range names {
		extra = append(extra, localcluster.Node{Name: name})
	}
	if err := cluster.AddNodes(ctx, extra...); err != nil {
		t.Fatal(err)
	}
	// 7 nodes: floor(3.5) = 3.
	cluster.WaitFor(t, time.Minute, "maxUnavailable 3 allowed on 7 nodes", func(ctx context.Context) (bool, string) {
		err := dryRun(ctx)
		return err == nil, fmt.Sprint(err)
	})

	for _, name := range names {
		if err := cluster.DeleteNode(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	wantDenied("maxUnavailable 3 denied again on 5 nodes")
}
