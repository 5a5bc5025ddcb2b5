package rollout

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// A DaemonSet's memo of its pods and the nodes lives while the DaemonSet is managed: a reconcile
// keeps it for the next, and one that finds the DaemonSet gone or no longer managed drops it, and
// with it what it remembered.
func TestReconcileDropsTheMemoOfAGoneOrUnmanagedDaemonSet(t *testing.T) {
	for name, end := range map[string]func(t *testing.T, c client.Client){
		"deleted": func(t *testing.T, c client.Client) {
			if err := c.Delete(context.Background(), &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: agentKey.Namespace, Name: agentKey.Name}}); err != nil {
				t.Fatal(err)
			}
		},
		"no longer managed": func(t *testing.T, c client.Client) {
			var ds appsv1.DaemonSet
			if err := c.Get(context.Background(), agentKey, &ds); err != nil {
				t.Fatal(err)
			}
			delete(ds.Annotations, rolloutapi.AnnotationRollout)
			if err := c.Update(context.Background(), &ds); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, c, _, _ := gatedReconciler(t, analysing(gatedSettings(t, "1", true)), errorsOf(0))
			reconcileAgent(t, r, c)
			memo := r.kept[agentKey]
			if memo == nil {
				t.Fatal("no memo kept after a reconcile of a managed DaemonSet")
			}
			reconcileAgent(t, r, c)
			if r.kept[agentKey] != memo {
				t.Fatal("the next reconcile did not use the kept memo")
			}
			end(t, c)
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: agentKey}); err != nil {
				t.Fatal(err)
			}
			if _, ok := r.kept[agentKey]; ok {
				t.Errorf("the memo of a DaemonSet %s is kept", name)
			}
		})
	}
}
