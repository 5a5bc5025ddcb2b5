package leadership

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Campaign runs work while this process holds the Lease namespace/name, with timing (the zero
// Timing: the constants above), and campaigns again each time it loses the lease, until ctx ends. Losing the lease (it could
// not be renewed within RenewDeadline, or another holder took it) cancels only work's context:
// unlike the leader election of controller-runtime's manager, which ends the whole process, it
// leaves everything else the process serves running. A new term starts only once the work of the
// last one has returned, so two terms never overlap in one process; the lease is released when
// ctx ends.
func Campaign(ctx context.Context, cfg *rest.Config, namespace, name string, timing Timing, log logr.Logger, work func(ctx context.Context)) error {
	timing = timing.orDefault()
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create leader election client: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	// The hostname names the pod; the UUID tells two processes on one host apart.
	identity := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	log = log.WithValues("lease", namespace+"/"+name, "identity", identity)
	for ctx.Err() == nil {
		term := make(chan context.Context, 1) // the context of a term, cancelled when it ends
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            name,
			LeaseDuration:   timing.LeaseDuration,
			RenewDeadline:   timing.RenewDeadline,
			RetryPeriod:     timing.RetryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { term <- ctx },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		// Run returns when ctx ends or the lease is lost; it cancels the term's context first.
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			elector.Run(ctx)
		}()
		select {
		case termCtx := <-term:
			log.Info("Acquired the lease")
			work(termCtx)
			<-ran
			if ctx.Err() == nil {
				log.Info("Lost the lease; campaigning again")
			}
		case <-ran: // ctx ended before the lease was acquired
		}
	}
	return nil
}
