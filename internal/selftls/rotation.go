// Package selftls gives the webhook TLS without cert-manager: it keeps a CA and a serving
// certificate in one Secret of daemonguard's namespace, writes the CA bundle into daemonguard's own
// webhook configurations, writes the serving certificate to the folder controller-runtime's
// certwatcher reloads from, and rotates both before they expire. Rotation is staged so that no
// admission request fails on the way: a new CA is trusted by the API server before anything is
// served with it, and an old CA is trusted until every replica serves the new certificate.
//
// The work is split the house way: Gather reads the Secret and the webhook configurations into a
// State, Decide (pure, clock passed in) chooses the next RotationStep, and one apply step writes
// the Secret, the webhook configurations and the files. rotation.go is the State, the decision
// and its invariants; secret.go reads and renders the Secret; rotator.go is the reconciler that
// gathers, decides and applies.
package selftls

import (
	"crypto/x509"
	"fmt"
	"net"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
)

// Config is what the serving certificate must cover and how long things live.
type Config struct {
	DNSNames    []string
	IPAddresses []net.IP
	// CAValidity and CertValidity are the lifetimes of a new CA and a new serving certificate; each
	// is renewed when two thirds of its life have passed, as cert-manager does by default.
	CAValidity   time.Duration
	CertValidity time.Duration
	// PropagationGrace is how long a change must have been visible before the next step relies on
	// it: a new CA sits in the published caBundle this long before the serving certificate is
	// issued from it (the API server's webhook informers must have seen the bundle), and a new
	// serving certificate is this old before older CAs leave the bundle (every replica must have
	// written it to disk and its certwatcher must have reloaded it; certwatcher polls every 10 s
	// even when a file event is missed).
	PropagationGrace time.Duration
}

// Defaults used when a Config field is zero.
const (
	DefaultCAValidity       = 2 * 365 * 24 * time.Hour
	DefaultCertValidity     = 90 * 24 * time.Hour
	DefaultPropagationGrace = time.Minute
)

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.CAValidity == 0 {
		c.CAValidity = DefaultCAValidity
	}
	if c.CertValidity == 0 {
		c.CertValidity = DefaultCertValidity
	}
	if c.PropagationGrace == 0 {
		c.PropagationGrace = DefaultPropagationGrace
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if len(c.DNSNames) == 0 && len(c.IPAddresses) == 0 {
		return fmt.Errorf("the serving certificate needs at least one DNS name or IP address")
	}
	if c.CertValidity >= c.CAValidity {
		return fmt.Errorf("certificate validity %s must be shorter than the CA validity %s", c.CertValidity, c.CAValidity)
	}
	if c.PropagationGrace*3 > c.CertValidity {
		return fmt.Errorf("propagation grace %s is too long for a certificate valid %s", c.PropagationGrace, c.CertValidity)
	}
	return nil
}

// State is what Gather found: the Secret's content, parsed, and whether the webhook configurations
// carry its bundle.
type State struct {
	// Bundle is the list of trusted CAs (ca.crt), newest first. The newest signs serving certs.
	Bundle []*x509.Certificate
	// CAKeyValid says ca.key parses and belongs to Bundle[0].
	CAKeyValid bool
	// Leaf is the serving certificate (tls.crt), nil when missing or unparseable.
	Leaf *x509.Certificate
	// LeafKeyValid says tls.key parses and belongs to Leaf.
	LeafKeyValid bool
	// BundlePublishedAt is when the current bundle was first seen in every webhook configuration;
	// zero when it has not been since it last changed.
	BundlePublishedAt time.Time
	// RotateRequestedAt is set by an operator (annotation) to force a new CA and certificate.
	RotateRequestedAt time.Time
	// Published says every webhook of both configurations carries exactly Bundle right now.
	Published bool
	// ConfigurationsFound says both webhook configurations exist; without them nothing can be
	// published (the chart or the harness has not created them yet).
	ConfigurationsFound bool
}

// RotationStep is the next step of the rotation: what apply must do. The zero RotationStep
// changes nothing.
type RotationStep struct {
	// NewCA generates a CA and puts it first in the bundle.
	NewCA bool
	// KeepCAs are the indexes into State.Bundle that stay in the bundle (after the new CA, if any).
	KeepCAs []int
	// IssueLeaf issues a serving certificate from the newest CA.
	IssueLeaf bool
	// RecordPublished records now as BundlePublishedAt.
	RecordPublished bool
	// ForgetPublished clears BundlePublishedAt: the bundle was taken out of the webhook
	// configurations (a hand edit, a stale apply), so its grace must start again once it is back.
	ForgetPublished bool
	// Reasons explain every change, for logs and Events.
	Reasons []string
	// Waiting explains a step that is due but held back, and RequeueAfter says when to look again.
	Waiting      string
	RequeueAfter time.Duration
}

// BundleChanged says the trusted CA set changes, so it must be published again.
func (step RotationStep) BundleChanged(st State) bool {
	return step.NewCA || len(step.KeepCAs) != len(st.Bundle)
}

// Changed says the Secret must be written.
func (step RotationStep) Changed(st State) bool {
	return step.BundleChanged(st) || step.IssueLeaf || step.RecordPublished || step.ForgetPublished
}

// renewAt is two thirds through a certificate's life.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// maxRequeue bounds how long the reconciler sleeps, so a missed watch event heals within it.
const maxRequeue = time.Hour

// Decide chooses the next step of the rotation.
//
// Assumptions:
//   - The API server trusts exactly the published bundle, BundlePublishedAt+grace after it was
//     first seen in the webhook configurations.
//   - Every replica serves the Secret's serving certificate within grace of it being written.
//   - Several replicas may run Decide on the same State; the Secret's resourceVersion makes one
//     write win and the others decide again on the result.
//
// Invariants (what makes a rotation fail no request):
//   - A usable serving certificate is only replaced by one from a CA that has been published for
//     at least grace, or by one from the CA that already signed it.
//   - A CA leaves the bundle only when it has expired, or when the serving certificate comes from
//     a newer CA and has been served for at least grace.
//   - The newest CA is never dropped; a step never issues from a CA that is not in the bundle.
func Decide(st State, cfg Config, now time.Time) RotationStep {
	cfg = cfg.WithDefaults()
	var step RotationStep
	due := now.Add(maxRequeue)
	wake := func(t time.Time) {
		if t.After(now) && t.Before(due) {
			due = t
		}
	}
	// A rotation requested for a time ahead of now (the operator's clock runs ahead) is due when
	// that time comes. Taken now, it would make a new CA at every step until then: each new CA
	// starts before the requested time, so the request stays newer than the newest CA.
	rotateRequestedAt := st.RotateRequestedAt
	if rotateRequestedAt.After(now) {
		wake(rotateRequestedAt)
		rotateRequestedAt = time.Time{}
	}

	// The CA.
	switch {
	case len(st.Bundle) == 0:
		step.NewCA, step.Reasons = true, append(step.Reasons, "no CA yet")
	case !st.CAKeyValid:
		step.NewCA, step.Reasons = true, append(step.Reasons, "the CA key is missing or does not match the CA")
	case !now.Before(st.Bundle[0].NotAfter):
		step.NewCA, step.Reasons = true, append(step.Reasons, "the CA has expired")
	case !now.Before(renewAt(st.Bundle[0])):
		step.NewCA, step.Reasons = true, append(step.Reasons, fmt.Sprintf("the CA is two thirds through its life (expires %s)", st.Bundle[0].NotAfter.UTC().Format(time.RFC3339)))
	case rotateRequestedAt.After(st.Bundle[0].NotBefore):
		step.NewCA, step.Reasons = true, append(step.Reasons, "rotation was requested")
	default:
		wake(renewAt(st.Bundle[0]))
	}

	// The serving certificate, judged against what will be trusted after this step.
	leafUsable, leafReason := usableLeaf(st, cfg, now)
	fromNewest := !step.NewCA && leafUsable && signedBy(st.Leaf, st.Bundle[0])
	publishedLongEnough := !step.NewCA && st.Published && !st.BundlePublishedAt.IsZero() &&
		!now.Before(st.BundlePublishedAt.Add(cfg.PropagationGrace))
	switch {
	case !leafUsable:
		// Nothing that serves today can break, so there is nothing to wait for.
		step.IssueLeaf, step.Reasons = true, append(step.Reasons, leafReason)
	case fromNewest && !now.Before(renewAt(st.Leaf)):
		step.IssueLeaf, step.Reasons = true, append(step.Reasons, "the serving certificate is two thirds through its life")
	case fromNewest && rotateRequestedAt.After(st.Leaf.NotBefore):
		step.IssueLeaf, step.Reasons = true, append(step.Reasons, "rotation was requested")
	case fromNewest:
		wake(renewAt(st.Leaf))
	case publishedLongEnough:
		step.IssueLeaf, step.Reasons = true, append(step.Reasons, "the serving certificate moves to the newest CA")
	default:
		// Signed by an older CA that is still trusted: switch once the newest CA is published.
		switch {
		case step.NewCA:
			step.Waiting = "the new CA must be published before the serving certificate moves to it"
			wake(now.Add(time.Second))
		case !st.ConfigurationsFound:
			step.Waiting = "the webhook configurations do not exist yet, so the new CA cannot be published"
			wake(now.Add(10 * time.Second))
		case !st.Published || st.BundlePublishedAt.IsZero():
			step.Waiting = "the new CA is not in the webhook configurations yet"
			wake(now.Add(time.Second))
		default:
			step.Waiting = "the API server may not trust the new CA yet"
			wake(st.BundlePublishedAt.Add(cfg.PropagationGrace))
		}
	}

	// Which older CAs stay trusted.
	leafFromNewestServedLongEnough := fromNewest && !step.IssueLeaf &&
		!now.Before(st.Leaf.NotBefore.Add(cfg.PropagationGrace))
	for i, ca := range st.Bundle {
		newest := i == 0 && !step.NewCA
		switch {
		case newest:
			step.KeepCAs = append(step.KeepCAs, i)
		case !now.Before(ca.NotAfter):
			step.Reasons = append(step.Reasons, fmt.Sprintf("CA %s expired and leaves the bundle", ca.SerialNumber))
		case leafFromNewestServedLongEnough:
			step.Reasons = append(step.Reasons, fmt.Sprintf("CA %s is replaced and leaves the bundle", ca.SerialNumber))
		default:
			step.KeepCAs = append(step.KeepCAs, i)
			wake(ca.NotAfter)
			if fromNewest && !step.IssueLeaf {
				wake(st.Leaf.NotBefore.Add(cfg.PropagationGrace))
			}
		}
	}

	// Publishing is the reconciler's job after every write; the first time it sees the bundle in
	// place, the grace clock starts.
	if !step.BundleChanged(st) && st.Published && st.BundlePublishedAt.IsZero() {
		step.RecordPublished, step.Reasons = true, append(step.Reasons, "the CA bundle is published; its propagation grace starts")
	}
	if !step.BundleChanged(st) && !st.Published && !st.BundlePublishedAt.IsZero() {
		step.ForgetPublished, step.Reasons = true, append(step.Reasons, "the CA bundle is no longer in the webhook configurations; its grace starts again once it is back")
	}
	if step.Changed(st) {
		due = now // look again right after the write, to publish and take the next step
	}
	step.RequeueAfter = due.Sub(now)
	return step
}

// usableLeaf says whether the serving certificate can keep serving for now: it is present, its key
// matches, it is valid, it covers the wanted names and a CA in the bundle signed it.
func usableLeaf(st State, cfg Config, now time.Time) (bool, string) {
	switch {
	case st.Leaf == nil:
		return false, "no serving certificate yet"
	case !st.LeafKeyValid:
		return false, "the serving key is missing or does not match the certificate"
	case now.Before(st.Leaf.NotBefore) || !now.Before(st.Leaf.NotAfter):
		return false, "the serving certificate is not valid now"
	}
	if v := pki.FuzzyX509AltNamesMatchSpec(st.Leaf, cmapi.CertificateSpec{
		DNSNames: cfg.DNSNames, IPAddresses: pki.IPAddressesToString(cfg.IPAddresses),
	}); len(v) > 0 {
		return false, fmt.Sprintf("the serving certificate's names differ from the wanted ones: %v", v)
	}
	for _, ca := range st.Bundle {
		if signedBy(st.Leaf, ca) {
			return true, ""
		}
	}
	return false, "no CA in the bundle signed the serving certificate"
}

func signedBy(leaf, ca *x509.Certificate) bool {
	return leaf.CheckSignatureFrom(ca) == nil
}
