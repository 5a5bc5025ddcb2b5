// Package kubesupport decides everything daemonguard does differently by Kubernetes version, from
// what the API server says about itself: the supported range (the chart's kubeVersion holds the
// same bounds, checked by a test) and the features a supported server may lack.
//
// In the supported range, 1.33 to 1.37:
//   - in-process injection (admissionregistration.k8s.io/v1 MutatingAdmissionPolicy) needs 1.36 or
//     later; below, the DaemonSet mutating webhook injects (Server.InProcessInjection says why);
//   - ValidatingAdmissionPolicy (GA in 1.30) and sidecar containers (init containers with
//     restartPolicy Always, GA in 1.33) are on every supported server, so nothing depends on them;
//   - the pre-flight plan streams pods with a watch-list where the server allows it: client-go
//     decides that itself and falls back to one list, so daemonguard decides nothing there.
package kubesupport

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The supported range: from the oldest minor in the big providers' standard support to the newest
// release, both tested (make test runs the version suites on the oldest).
const (
	OldestMinor = 33
	NewestMinor = 37
)

// MutatingAdmissionPolicyAPI is the API version in-process injection generates, and the first
// minor that serves it.
const (
	MutatingAdmissionPolicyAPI   = "admissionregistration.k8s.io/v1"
	MutatingAdmissionPolicyMinor = 36
)

// Range says the supported range in words, for messages and docs.
var Range = fmt.Sprintf("1.%d to 1.%d", OldestMinor, NewestMinor)

// Server is what daemonguard needs to know about an API server.
type Server struct {
	// Version is the server's gitVersion, such as v1.34.4 or v1.33.5-eks-1234.
	Version string
	// Minor is the minor of Version (34), or 0 when Version cannot be parsed.
	Minor int
	// MutatingAdmissionPolicyV1 and MutatingAdmissionPolicyV1beta1: the server serves
	// mutatingadmissionpolicies in that version (v1 from 1.36; v1beta1 on 1.34 and 1.35 only when
	// an administrator turned its feature gate and API on).
	MutatingAdmissionPolicyV1      bool
	MutatingAdmissionPolicyV1beta1 bool
}

// ErrUnsupported marks a server outside the supported range.
var ErrUnsupported = errors.New("unsupported Kubernetes version")

// Read asks the API server for its version and for the APIs the features above need.
func Read(ctx context.Context, client discovery.DiscoveryInterface) (Server, error) {
	d := discovery.ToDiscoveryInterfaceWithContext(client)
	info, err := d.ServerVersionWithContext(ctx)
	if err != nil {
		return Server{}, fmt.Errorf("read the Kubernetes server's version: %w", err)
	}
	s := FromVersion(info)
	for gv, served := range map[string]*bool{
		MutatingAdmissionPolicyAPI:             &s.MutatingAdmissionPolicyV1,
		"admissionregistration.k8s.io/v1beta1": &s.MutatingAdmissionPolicyV1beta1,
	} {
		if *served, err = serves(ctx, d, gv, "mutatingadmissionpolicies"); err != nil {
			return Server{}, err
		}
	}
	return s, nil
}

// FromVersion is a Server known by its version alone: no optional API is served.
func FromVersion(info *version.Info) Server {
	s := Server{Version: info.GitVersion}
	if v, err := utilversion.ParseGeneric(info.GitVersion); err == nil && v.Major() == 1 {
		s.Minor = int(v.Minor())
	}
	return s
}

// serves reports whether the server serves resource in group version gv; a group version the
// server does not know is not an error.
func serves(ctx context.Context, d discovery.DiscoveryInterfaceWithContext, gv, resource string) (bool, error) {
	list, err := d.ServerResourcesForGroupVersionWithContext(ctx, gv)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the API server's %s resources: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// Check returns an error wrapping ErrUnsupported when the server is outside the supported range,
// saying which way and what to expect.
func (s Server) Check() error {
	switch {
	case s.Minor == 0:
		return fmt.Errorf("%w: cannot read a Kubernetes 1.x minor from %q; daemonguard supports %s", ErrUnsupported, s.Version, Range)
	case s.Minor < OldestMinor:
		return fmt.Errorf("%w: Kubernetes %s is older than daemonguard supports (%s); upgrade the cluster or use a daemonguard release that supports it", ErrUnsupported, s.Version, Range)
	case s.Minor > NewestMinor:
		return fmt.Errorf("%w: Kubernetes %s is newer than daemonguard has been tested with (%s); it may work, but nothing vouches for it", ErrUnsupported, s.Version, Range)
	}
	return nil
}

// InProcessInjection returns nil when the server can inject in-process (it serves the
// MutatingAdmissionPolicy version daemonguard generates), else an error naming the version and
// the alternative.
func (s Server) InProcessInjection() error {
	if s.MutatingAdmissionPolicyV1 {
		return nil
	}
	msg := fmt.Sprintf("in-process injection needs %s MutatingAdmissionPolicy, which Kubernetes 1.%d and later serve; this server (%s) does not",
		MutatingAdmissionPolicyAPI, MutatingAdmissionPolicyMinor, s.Version)
	if s.MutatingAdmissionPolicyV1beta1 {
		msg += " (it serves v1beta1, which daemonguard does not generate)"
	}
	return errors.New(msg + ": let the DaemonSet mutating webhook inject (the chart's webhook.inProcessInjection: auto or false)")
}

// Announce reads the server a daemonguard process talks to and logs its version, and an error
// when it is outside the supported range: the process runs on, since a version it was not
// tested with is a risk for the administrator to weigh, not a reason to stop admission.
func Announce(ctx context.Context, cfg *rest.Config, log logr.Logger) (Server, error) {
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return Server{}, fmt.Errorf("create discovery client: %w", err)
	}
	s, err := Read(ctx, client)
	if err != nil {
		return Server{}, err
	}
	log.Info("Kubernetes API server", "version", s.Version, "supported", Range)
	if err := s.Check(); err != nil {
		log.Error(err, "Kubernetes version outside the supported range", "version", s.Version)
	}
	return s, nil
}
