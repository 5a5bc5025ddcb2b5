package webhookserver

import (
	"context"
	"fmt"
	"reflect"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daemonguard/daemonguard/internal/inprocess"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// InProcessInjectionStatus says whether the MutatingAdmissionPolicy that injects in place of the
// webhook does what the policy set in force decides.
type InProcessInjectionStatus struct {
	Policy string `json:"policy"`
	InSync bool   `json:"inSync"`
	Reason string `json:"reason,omitempty"`
}

// inProcessCheck compares the live policy with the one generated from the policy set in force.
type inProcessCheck struct {
	policy string
	reader client.Reader // uncached: one GET per check, no cluster-wide watch
	// unavailable says why the server cannot inject in-process (kubesupport); nil when it can.
	unavailable error
	last        InProcessInjectionStatus
	// The policy set in force and the ConfigMaps it came from, for the periodic check.
	modules    []policy.Module
	params     map[string]any
	configMaps []corev1.ConfigMap
}

// inProcessRecheck is how often the live policy is compared with the policy set in force
// between reloads.
const inProcessRecheck = time.Minute

// recheckInProcess checks at start and then every inProcessRecheck until ctx ends.
func (r *policyReloader) recheckInProcess(ctx context.Context) error {
	ticker := time.NewTicker(inProcessRecheck)
	defer ticker.Stop()
	for {
		r.mu.Lock()
		c := r.inProcess
		r.checkInProcess(ctx, c.modules, c.params, c.configMaps)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// checkInProcess records whether the live policy matches what modules and params generate, and
// reports a change to out of sync with an Event on the policy ConfigMaps (on the policy itself
// when none exists). Callers hold r.mu.
func (r *policyReloader) checkInProcess(ctx context.Context, modules []policy.Module, params map[string]any, configMaps []corev1.ConfigMap) {
	c := r.inProcess
	c.modules, c.params, c.configMaps = modules, params, configMaps
	st := InProcessInjectionStatus{Policy: c.policy, InSync: true}
	var live admissionregistrationv1.MutatingAdmissionPolicy
	want, genErr := inprocess.Generate(ctx, modules, params, inprocess.Options{Name: c.policy})
	getErr := c.reader.Get(ctx, types.NamespacedName{Name: c.policy}, &live)
	switch {
	case c.unavailable != nil:
		st.InSync, st.Reason = false, c.unavailable.Error()+": DaemonSets get no injection"
	case genErr != nil:
		st.InSync, st.Reason = false, genErr.Error()
	case apierrors.IsNotFound(getErr):
		st.InSync, st.Reason = false, fmt.Sprintf("MutatingAdmissionPolicy %s does not exist: DaemonSets get no injection", c.policy)
	case getErr != nil:
		st.InSync, st.Reason = false, fmt.Sprintf("MutatingAdmissionPolicy %s cannot be read: %v", c.policy, getErr)
	case !reflect.DeepEqual(live.Spec.Variables, want.Policy.Spec.Variables) || !reflect.DeepEqual(live.Spec.Mutations, want.Policy.Spec.Mutations):
		st.InSync, st.Reason = false, fmt.Sprintf("MutatingAdmissionPolicy %s was generated from other inject parameters than the policy set in force: "+
			"regenerate it (`daemonguard policy export`, or the chart with the same parameters)", c.policy)
	}
	prev := r.status.Load()
	prev.InProcessInjection = &st
	r.status.Store(prev)
	if st == c.last {
		return
	}
	c.last = st
	if st.InSync {
		r.log.Info("In-process injection matches the policy set", "policy", c.policy)
		return
	}
	r.log.Error(nil, "In-process injection does not follow the policy set", "policy", c.policy, "reason", st.Reason)
	var regarding []runtime.Object
	for i := range configMaps {
		regarding = append(regarding, &configMaps[i])
	}
	if len(regarding) == 0 && getErr == nil {
		live.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingAdmissionPolicy"))
		regarding = append(regarding, &live)
	}
	for _, obj := range regarding {
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, "InProcessInjectionOutOfSync", "Reload", "%s", st.Reason)
	}
}

// everyReplica is a runnable that runs on every replica, not only on the elected leader.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
