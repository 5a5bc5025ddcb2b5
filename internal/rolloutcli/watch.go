package rolloutcli

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Watch observes the DaemonSet namespace/name the way `kubectl rollout status` does (a list and
// watch narrowed to the object by a field selector on metadata.name, re-established when it
// breaks) and sends its evaluated status on every change. The channel gets an Update with Err
// when the DaemonSet does not exist or is deleted; it is closed after ctx ends.
func Watch(ctx context.Context, c kubernetes.Interface, namespace, name string) <-chan Update {
	updates := make(chan Update)
	send := func(u Update) bool {
		select {
		case updates <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(updates)
		// A missing DaemonSet is an error at once, not an endless wait for it to appear.
		if _, err := c.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			send(Update{Err: err})
			return
		}
		selector := fields.OneTermEqualSelector("metadata.name", name).String()
		dsClient := c.AppsV1().DaemonSets(namespace)
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.FieldSelector = selector
				return dsClient.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.FieldSelector = selector
				return dsClient.Watch(ctx, opts)
			},
		}
		revisions := revisionCache{c: c}
		_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.DaemonSet{}, nil, func(e watch.Event) (bool, error) {
			switch e.Type {
			case watch.Added, watch.Modified:
				ds, ok := e.Object.(*appsv1.DaemonSet)
				if !ok {
					return false, fmt.Errorf("unexpected object %T in the watch of daemon set %q", e.Object, name)
				}
				if !send(Update{Status: Evaluate(ds, revisions.current(ctx, ds))}) {
					return true, nil
				}
				return false, nil
			case watch.Deleted:
				// Abort rather than silently follow a re-created DaemonSet.
				return false, fmt.Errorf("daemon set %q has been deleted", name)
			}
			return false, nil
		})
		if err != nil && ctx.Err() == nil {
			send(Update{Err: err})
		}
	}()
	return updates
}

// revisionCache finds the current controller-revision-hash of a managed DaemonSet once per
// generation (it costs a list of ControllerRevisions).
type revisionCache struct {
	c          kubernetes.Interface
	generation int64
	hash       string
}

func (r *revisionCache) current(ctx context.Context, ds *appsv1.DaemonSet) string {
	if !rolloutapi.IsManaged(ds) {
		return ""
	}
	if r.hash != "" && r.generation == ds.Generation {
		return r.hash
	}
	hash, err := FetchCurrentRevisionHash(ctx, r.c, ds)
	if err != nil || hash == "" {
		return "" // unknown: Evaluate then trusts the controller's report as it is
	}
	r.generation, r.hash = ds.Generation, hash
	return hash
}

// FetchCurrentRevisionHash lists ds's revisions and returns rolloutapi.CurrentRevisionHash of
// them: the controller-revision-hash of ds's current template, or "" while the DaemonSet
// controller has not observed ds's generation (then nothing is listed).
func FetchCurrentRevisionHash(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet) (string, error) {
	if ds.Status.ObservedGeneration < ds.Generation {
		return "", nil // unknown, and listing the revisions would not tell
	}
	revs, err := Revisions(ctx, c, ds)
	if err != nil {
		return "", err
	}
	return rolloutapi.CurrentRevisionHash(ds, revs), nil
}
