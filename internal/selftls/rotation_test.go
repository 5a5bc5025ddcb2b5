package selftls

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
)

const day = 24 * time.Hour

// testNow is a whole second: certificates and annotations keep whole seconds, so the fixtures'
// times are exactly what Decide reads back.
var testNow = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// testConfig renews a CA after 200 days and a serving certificate after 20 days.
func testConfig() Config {
	return Config{
		DNSNames:         []string{"daemonguard-webhook.daemonguard.svc", "daemonguard-webhook.daemonguard.svc.cluster.local"},
		IPAddresses:      []net.IP{net.ParseIP("10.96.0.20")},
		CAValidity:       300 * day,
		CertValidity:     30 * day,
		PropagationGrace: time.Minute,
	}
}

// testCA is a CA made by the package's own newCA, with its key.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

type caOptions struct {
	age, validity time.Duration
}

type caOption func(*caOptions)

// madeAgo makes the CA age before now (NotBefore = now - age).
func madeAgo(age time.Duration) caOption { return func(o *caOptions) { o.age = age } }

// caValidFor sets the CA's lifetime (default: testConfig's CAValidity).
func caValidFor(v time.Duration) caOption { return func(o *caOptions) { o.validity = v } }

func newTestCA(t testing.TB, now time.Time, opts ...caOption) testCA {
	t.Helper()
	o := caOptions{validity: testConfig().CAValidity}
	for _, opt := range opts {
		opt(&o)
	}
	cert, key, err := newCA(now.Add(-o.age), o.validity)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

func (c testCA) keyPEM(t testing.TB) []byte {
	t.Helper()
	p, err := pki.EncodePrivateKey(c.key, cmapi.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testLeaf is a serving certificate made by the package's own newLeaf.
type testLeaf struct {
	cert            *x509.Certificate
	certPEM, keyPEM []byte
}

type leafOptions struct {
	age time.Duration
	cfg Config
}

type leafOption func(*leafOptions)

// issuedAgo issues the certificate age before now; a negative age issues it in the future.
func issuedAgo(age time.Duration) leafOption { return func(o *leafOptions) { o.age = age } }

// covering sets the names the certificate covers (default: testConfig's).
func covering(dnsNames []string, ips []net.IP) leafOption {
	return func(o *leafOptions) { o.cfg.DNSNames, o.cfg.IPAddresses = dnsNames, ips }
}

// leafValidFor sets the certificate's lifetime before newLeaf caps it at the CA's end.
func leafValidFor(v time.Duration) leafOption {
	return func(o *leafOptions) { o.cfg.CertValidity = v }
}

func newTestLeaf(t testing.TB, signer testCA, now time.Time, opts ...leafOption) testLeaf {
	t.Helper()
	o := leafOptions{cfg: testConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	certPEM, keyPEM, err := newLeaf(signer.cert, signer.key, o.cfg, now.Add(-o.age))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.DecodeX509CertificateBytes(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return testLeaf{cert: cert, certPEM: certPEM, keyPEM: keyPEM}
}

type stateOption func(*State)

// trusting puts the CAs in the bundle, newest first, with the key of the first.
func trusting(cas ...testCA) stateOption {
	return func(s *State) {
		s.Bundle = nil
		for _, c := range cas {
			s.Bundle = append(s.Bundle, c.cert)
		}
		s.CAKeyValid = len(cas) > 0
	}
}

// caKeyLost says ca.key is missing or belongs to another CA.
func caKeyLost() stateOption { return func(s *State) { s.CAKeyValid = false } }

// serving makes l the serving certificate, with its key.
func serving(l testLeaf) stateOption {
	return func(s *State) { s.Leaf, s.LeafKeyValid = l.cert, true }
}

// leafKeyLost says tls.key is missing or belongs to another certificate.
func leafKeyLost() stateOption { return func(s *State) { s.LeafKeyValid = false } }

// publishedSince says the webhook configurations carry the bundle and it was recorded at at.
func publishedSince(at time.Time) stateOption {
	return func(s *State) { s.ConfigurationsFound, s.Published, s.BundlePublishedAt = true, true, at }
}

// publishedUnrecorded says the webhook configurations carry the bundle, not yet recorded.
func publishedUnrecorded() stateOption { return publishedSince(time.Time{}) }

// unpublished says the webhook configurations exist but carry another bundle.
func unpublished() stateOption {
	return func(s *State) { s.ConfigurationsFound, s.Published, s.BundlePublishedAt = true, false, time.Time{} }
}

// withdrawnSince says the bundle was recorded as published at, but the webhook configurations no
// longer carry it (a hand edit or a stale apply reset their caBundle).
func withdrawnSince(at time.Time) stateOption {
	return func(s *State) { s.ConfigurationsFound, s.Published, s.BundlePublishedAt = true, false, at }
}

// noConfigurations says the webhook configurations do not exist.
func noConfigurations() stateOption {
	return func(s *State) { s.ConfigurationsFound, s.Published, s.BundlePublishedAt = false, false, time.Time{} }
}

// rotationRequested sets the operator's rotate-requested-at annotation.
func rotationRequested(at time.Time) stateOption {
	return func(s *State) { s.RotateRequestedAt = at }
}

func newState(opts ...stateOption) State {
	var s State
	for _, opt := range opts {
		opt(&s)
	}
	return s
}

func TestDecide(t *testing.T) {
	now, cfg := testNow, testConfig()
	otherNames := []string{"someone-else.default.svc"}
	otherIPs := []net.IP{net.ParseIP("10.0.0.1")}

	// A settled CA and its serving certificate.
	current := newTestCA(t, now, madeAgo(10*day))
	currentLeaf := newTestLeaf(t, current, now, issuedAgo(day))
	// A CA old enough that serving certificates reach their renewal or expiry under it.
	seasoned := newTestCA(t, now, madeAgo(100*day))
	// A CA past two thirds of its life (200 of 300 days).
	aging := newTestCA(t, now, madeAgo(201*day))
	agingLeaf := newTestLeaf(t, aging, now, issuedAgo(day))
	// A CA past its end; a certificate it signed ends with it.
	expired := newTestCA(t, now, madeAgo(301*day))
	expiredCALeaf := newTestLeaf(t, expired, now, issuedAgo(29*day))
	// A rotation in progress: successor was added in front of previous, which signs the leaf.
	previous := newTestCA(t, now, madeAgo(205*day))
	previousLeaf := newTestLeaf(t, previous, now, issuedAgo(5*day))
	successor := newTestCA(t, now, madeAgo(10*time.Minute))
	// A CA the Secret does not trust.
	stranger := newTestCA(t, now, madeAgo(day))

	tests := map[string]struct {
		// state is what Gather found at now.
		state State
		// grace replaces testConfig's one-minute PropagationGrace when set.
		grace time.Duration
		// newCA, issueLeaf, recordPublished and forget (ForgetPublished) are the step's flags.
		newCA, issueLeaf, recordPublished, forget bool
		// keep is the step's KeepCAs.
		keep []int
		// waiting is a phrase RotationStep.Waiting holds; empty means the step waits for nothing.
		waiting string
		// reason is a phrase one of RotationStep.Reasons holds; empty skips the check.
		reason string
		// requeue is the step's RequeueAfter.
		requeue time.Duration
	}{
		"a missing Secret gets a CA and a serving certificate at once": {
			state:     newState(noConfigurations()),
			newCA:     true,
			issueLeaf: true,
			reason:    "no CA yet",
		},
		"a missing CA key makes a new CA, keeps the old one and leaves the usable certificate serving": {
			state:   newState(trusting(current), caKeyLost(), serving(currentLeaf), publishedSince(now.Add(-day))),
			newCA:   true,
			keep:    []int{0},
			waiting: "new CA must be published",
			reason:  "CA key is missing or does not match",
		},
		"an expired CA is replaced and dropped, and its expired certificate is reissued at once": {
			state:     newState(trusting(expired), serving(expiredCALeaf), publishedSince(now.Add(-100*day))),
			newCA:     true,
			issueLeaf: true,
			reason:    "the CA has expired",
		},
		"a CA two thirds through its life gets a successor in front of it, and the usable certificate is not reissued in the same step": {
			state:   newState(trusting(aging), serving(agingLeaf), publishedSince(now.Add(-200*day))),
			newCA:   true,
			keep:    []int{0},
			waiting: "new CA must be published",
			reason:  "two thirds through its life",
		},
		"a CA renewal wins over a serving certificate renewal due at the same time: the usable certificate waits for the new CA": {
			state:   newState(trusting(aging), serving(newTestLeaf(t, aging, now, issuedAgo(21*day))), publishedSince(now.Add(-200*day))),
			newCA:   true,
			keep:    []int{0},
			waiting: "new CA must be published",
		},
		"a certificate from the previous CA waits while the new bundle is not in the webhook configurations": {
			state:   newState(trusting(successor, previous), serving(previousLeaf), unpublished()),
			keep:    []int{0, 1},
			waiting: "not in the webhook configurations yet",
			requeue: time.Second,
		},
		"a certificate from the previous CA waits while the webhook configurations do not exist, and says so": {
			state:   newState(trusting(successor, previous), serving(previousLeaf), noConfigurations()),
			keep:    []int{0, 1},
			waiting: "webhook configurations do not exist",
			requeue: 10 * time.Second,
		},
		"a bundle seen in the webhook configurations for the first time is recorded, and the certificate keeps waiting": {
			state:           newState(trusting(successor, previous), serving(previousLeaf), publishedUnrecorded()),
			keep:            []int{0, 1},
			recordPublished: true,
			waiting:         "not in the webhook configurations yet",
		},
		"a certificate from the previous CA waits while the bundle has been published for less than the grace": {
			state:   newState(trusting(successor, previous), serving(previousLeaf), publishedSince(now.Add(-20*time.Second))),
			keep:    []int{0, 1},
			waiting: "may not trust the new CA yet",
			requeue: 40 * time.Second,
		},
		"a certificate from the previous CA moves to the new CA once the bundle has been published for the grace, and the previous CA stays": {
			state:     newState(trusting(successor, previous), serving(previousLeaf), publishedSince(now.Add(-time.Minute))),
			keep:      []int{0, 1},
			issueLeaf: true,
			reason:    "moves to the newest CA",
		},
		"a previous CA stays while the certificate from the newest CA has been served for less than the grace": {
			state:   newState(trusting(successor, previous), serving(newTestLeaf(t, successor, now, issuedAgo(20*time.Second))), publishedSince(now.Add(-2*time.Minute))),
			keep:    []int{0, 1},
			requeue: 40 * time.Second,
		},
		"a previous CA leaves once the certificate from the newest CA has been served for the grace": {
			state:  newState(trusting(successor, previous), serving(newTestLeaf(t, successor, now, issuedAgo(time.Minute))), publishedSince(now.Add(-2*time.Minute))),
			keep:   []int{0},
			reason: "replaced and leaves the bundle",
		},
		"an unrelated CA behind the newest leaves once the certificate from the newest has been served for the grace": {
			state:  newState(trusting(current, stranger), serving(currentLeaf), publishedSince(now.Add(-day))),
			keep:   []int{0},
			reason: "replaced and leaves the bundle",
		},
		"an expired older CA leaves even while the certificate still comes from the previous CA": {
			state:   newState(trusting(successor, previous, expired), serving(previousLeaf), publishedSince(now.Add(-20*time.Second))),
			keep:    []int{0, 1},
			waiting: "may not trust the new CA yet",
			reason:  "expired and leaves the bundle",
		},
		"a certificate two thirds through its life is renewed from the same CA at once, published or not": {
			state:     newState(trusting(seasoned), serving(newTestLeaf(t, seasoned, now, issuedAgo(20*day))), unpublished()),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "serving certificate is two thirds through its life",
		},
		"a certificate missing a DNS name is reissued at once": {
			state:     newState(trusting(current), serving(newTestLeaf(t, current, now, covering(otherNames, cfg.IPAddresses))), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "names differ",
		},
		"a certificate for another IP address is reissued at once": {
			state:     newState(trusting(current), serving(newTestLeaf(t, current, now, covering(cfg.DNSNames, otherIPs))), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "names differ",
		},
		"a certificate whose key is missing or wrong is reissued at once": {
			state:     newState(trusting(current), serving(currentLeaf), leafKeyLost(), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "serving key is missing or does not match",
		},
		"an expired certificate is reissued at once": {
			state:     newState(trusting(seasoned), serving(newTestLeaf(t, seasoned, now, issuedAgo(31*day))), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "not valid now",
		},
		"a certificate that is not valid yet is reissued at once": {
			state:     newState(trusting(current), serving(newTestLeaf(t, current, now, issuedAgo(-time.Hour))), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "not valid now",
		},
		"a certificate signed by a CA outside the bundle is reissued at once": {
			state:     newState(trusting(current), serving(newTestLeaf(t, stranger, now)), publishedSince(now.Add(-day))),
			keep:      []int{0},
			issueLeaf: true,
			reason:    "no CA in the bundle signed",
		},
		"a rotation requested after the CA was made makes a new CA": {
			state:   newState(trusting(current), serving(currentLeaf), publishedSince(now.Add(-day)), rotationRequested(now.Add(-time.Hour))),
			newCA:   true,
			keep:    []int{0},
			waiting: "new CA must be published",
			reason:  "rotation was requested",
		},
		"a rotation request older than the CA changes nothing": {
			state:   newState(trusting(current), serving(currentLeaf), publishedSince(now.Add(-day)), rotationRequested(now.Add(-11*day))),
			keep:    []int{0},
			requeue: time.Hour,
		},
		"a rotation request from the future changes nothing until its time": {
			state:   newState(trusting(current), serving(currentLeaf), publishedSince(now.Add(-day)), rotationRequested(now.Add(10*time.Minute))),
			keep:    []int{0},
			requeue: 10 * time.Minute,
		},
		"a recorded bundle is not recorded again and a settled Secret changes nothing for an hour": {
			state:   newState(trusting(current), serving(currentLeaf), publishedSince(now.Add(-day))),
			keep:    []int{0},
			requeue: time.Hour,
		},
		"a settled bundle seen for the first time is recorded": {
			state:           newState(trusting(current), serving(currentLeaf), publishedUnrecorded()),
			keep:            []int{0},
			recordPublished: true,
		},
		"a bundle that is not in the webhook configurations is not recorded": {
			state:   newState(trusting(current), serving(currentLeaf), unpublished()),
			keep:    []int{0},
			requeue: time.Hour,
		},
		"a recorded bundle that left the webhook configurations is forgotten, and the certificate from the previous CA does not move": {
			state:   newState(trusting(successor, previous), serving(previousLeaf), withdrawnSince(now.Add(-day))),
			keep:    []int{0, 1},
			forget:  true,
			waiting: "not in the webhook configurations yet",
			reason:  "grace starts again",
		},
		"a bundle that changes in this step is not recorded even though the old one is published": {
			state:   newState(trusting(aging), serving(agingLeaf), publishedUnrecorded()),
			newCA:   true,
			keep:    []int{0},
			waiting: "new CA must be published",
		},
		"a settled Secret looks again when the CA's renewal comes before anything else": {
			state:   stateDueIn(t, now, 10*time.Minute, 0),
			keep:    []int{0},
			requeue: 10 * time.Minute,
		},
		"a settled Secret looks again when the serving certificate's renewal comes first": {
			state:   stateDueIn(t, now, 0, 25*time.Minute),
			keep:    []int{0},
			requeue: 25 * time.Minute,
		},
		"a kept older CA's expiry wakes the rotator when it comes before the end of the grace": {
			state: newState(trusting(current, newTestCA(t, now, madeAgo(300*day-15*time.Minute))),
				serving(newTestLeaf(t, current, now, issuedAgo(time.Minute))), publishedSince(now.Add(-day))),
			grace:   50 * time.Minute,
			keep:    []int{0, 1},
			requeue: 15 * time.Minute,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			if tc.grace != 0 {
				cfg.PropagationGrace = tc.grace
			}
			p := Decide(tc.state, cfg, now)
			if p.NewCA != tc.newCA || p.IssueLeaf != tc.issueLeaf || p.RecordPublished != tc.recordPublished || p.ForgetPublished != tc.forget {
				t.Errorf("NewCA=%v IssueLeaf=%v RecordPublished=%v ForgetPublished=%v, want %v %v %v %v (reasons %q, waiting %q)",
					p.NewCA, p.IssueLeaf, p.RecordPublished, p.ForgetPublished, tc.newCA, tc.issueLeaf, tc.recordPublished, tc.forget, p.Reasons, p.Waiting)
			}
			if !slices.Equal(p.KeepCAs, tc.keep) {
				t.Errorf("KeepCAs = %v, want %v (reasons %q)", p.KeepCAs, tc.keep, p.Reasons)
			}
			if tc.waiting == "" && p.Waiting != "" || !strings.Contains(p.Waiting, tc.waiting) {
				t.Errorf("Waiting = %q, want it to say %q", p.Waiting, tc.waiting)
			}
			if tc.reason != "" && !slices.ContainsFunc(p.Reasons, func(r string) bool { return strings.Contains(r, tc.reason) }) {
				t.Errorf("Reasons = %q, want one saying %q", p.Reasons, tc.reason)
			}
			if p.RequeueAfter != tc.requeue {
				t.Errorf("RequeueAfter = %s, want %s", p.RequeueAfter, tc.requeue)
			}
			for _, v := range violations(tc.state, cfg, now, p) {
				t.Errorf("breaks an invariant: %s", v)
			}
		})
	}
}

// stateDueIn is a settled, published Secret whose CA renews in caDue and whose serving certificate
// renews in leafDue; a zero duration puts that renewal far away.
func stateDueIn(t testing.TB, now time.Time, caDue, leafDue time.Duration) State {
	t.Helper()
	caAge := 30 * day
	if caDue != 0 {
		caAge = 200*day - caDue
	}
	leafAge := day
	if leafDue != 0 {
		leafAge = 20*day - leafDue
	}
	ca := newTestCA(t, now, madeAgo(caAge))
	return newState(trusting(ca), serving(newTestLeaf(t, ca, now, issuedAgo(leafAge))), publishedSince(now.Add(-day)))
}

// violations lists the invariants of Decide's comment (and the RotationStep contract around them) that p
// breaks for st.
func violations(st State, cfg Config, now time.Time, p RotationStep) []string {
	cfg = cfg.WithDefaults()
	var v []string
	fail := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	expired := func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) }
	usable, _ := usableLeaf(st, cfg, now)
	kept := map[int]bool{}

	// KeepCAs are valid, increasing, unique indexes; the newest CA is never dropped.
	for j, i := range p.KeepCAs {
		if i < 0 || i >= len(st.Bundle) || j > 0 && i <= p.KeepCAs[j-1] {
			fail("KeepCAs %v is not an increasing list of indexes into a bundle of %d", p.KeepCAs, len(st.Bundle))
			break
		}
		kept[i] = true
	}
	if !p.NewCA && len(st.Bundle) > 0 && !kept[0] {
		fail("the newest CA is dropped")
	}

	// A step never issues from a CA that is not in the bundle: the new CA, or Bundle[0] with its key.
	if p.IssueLeaf && !p.NewCA {
		switch {
		case len(st.Bundle) == 0:
			fail("issues a serving certificate without any CA")
		case !st.CAKeyValid:
			fail("issues a serving certificate from Bundle[0] without its key")
		case expired(st.Bundle[0]):
			fail("issues a serving certificate from an expired CA")
		}
	}

	// A usable serving certificate is only replaced by one from the CA that signed it, or from a
	// CA published for at least grace. An unusable one is always replaced.
	if !usable && !p.IssueLeaf {
		fail("leaves an unusable serving certificate in place")
	}
	if usable && p.IssueLeaf {
		switch {
		case p.NewCA:
			fail("replaces a usable serving certificate with one from a CA that does not exist yet")
		case !signedBy(st.Leaf, st.Bundle[0]) && (!st.Published || st.BundlePublishedAt.IsZero() ||
			now.Before(st.BundlePublishedAt.Add(cfg.PropagationGrace))):
			fail("replaces a usable serving certificate with one from a CA published less than %s ago (published=%v at %s)",
				cfg.PropagationGrace, st.Published, st.BundlePublishedAt)
		}
	}
	if p.Waiting != "" && p.IssueLeaf {
		fail("waits (%q) yet issues a serving certificate", p.Waiting)
	}
	if usable && !p.IssueLeaf && (p.NewCA || !signedBy(st.Leaf, st.Bundle[0])) && p.Waiting == "" {
		fail("keeps a serving certificate from an older CA without saying what it waits for")
	}

	// A CA leaves only when it expired, or when the serving certificate comes from the newest CA
	// and has been served for at least grace. So the signer of a usable certificate stays.
	fromNewestServed := usable && !p.NewCA && signedBy(st.Leaf, st.Bundle[0]) &&
		!now.Before(st.Leaf.NotBefore.Add(cfg.PropagationGrace))
	for i, ca := range st.Bundle {
		if kept[i] || expired(ca) || fromNewestServed {
			continue
		}
		if usable && signedBy(st.Leaf, ca) {
			fail("drops CA %d, which signs the usable serving certificate", i)
		} else {
			fail("drops CA %d before the serving certificate from the newest CA has been served for %s", i, cfg.PropagationGrace)
		}
	}

	// The grace clock starts the first time the unchanged bundle is seen published, and only then.
	wantRecord := !p.BundleChanged(st) && st.Published && st.BundlePublishedAt.IsZero()
	if p.RecordPublished != wantRecord {
		fail("RecordPublished = %v with published=%v, recorded at %s, bundle changed=%v", p.RecordPublished, st.Published, st.BundlePublishedAt, p.BundleChanged(st))
	}

	// A recorded bundle that is no longer published is forgotten, so its grace starts again.
	wantForget := !p.BundleChanged(st) && !st.Published && !st.BundlePublishedAt.IsZero()
	if p.ForgetPublished != wantForget {
		fail("ForgetPublished = %v with published=%v, recorded at %s, bundle changed=%v", p.ForgetPublished, st.Published, st.BundlePublishedAt, p.BundleChanged(st))
	}

	// RequeueAfter: now when something changes, else the next due time, within an hour.
	switch {
	case p.RequeueAfter < 0 || p.RequeueAfter > maxRequeue:
		fail("RequeueAfter %s is outside [0, %s]", p.RequeueAfter, maxRequeue)
	case p.Changed(st) && p.RequeueAfter != 0:
		fail("RequeueAfter %s after a change, want 0", p.RequeueAfter)
	case !p.Changed(st) && p.RequeueAfter == 0:
		fail("RequeueAfter 0 though nothing changes: nothing would look again")
	}
	if !p.Changed(st) {
		due := func(what string, at time.Time) {
			if at.After(now) && now.Add(p.RequeueAfter).After(at) {
				fail("RequeueAfter %s sleeps past the %s at %s", p.RequeueAfter, what, at.Sub(now))
			}
		}
		if len(st.Bundle) > 0 {
			due("CA renewal", renewAt(st.Bundle[0]))
		}
		for i := range kept {
			if i > 0 {
				due("expiry of an older CA", st.Bundle[i].NotAfter)
			}
		}
		if usable && signedBy(st.Leaf, st.Bundle[0]) {
			due("serving certificate renewal", renewAt(st.Leaf))
			if len(p.KeepCAs) > 1 {
				due("end of the grace for the serving certificate", st.Leaf.NotBefore.Add(cfg.PropagationGrace))
			}
		}
		if p.Waiting != "" && st.Published && !st.BundlePublishedAt.IsZero() {
			due("end of the grace for the bundle", st.BundlePublishedAt.Add(cfg.PropagationGrace))
		}
		due("rotation request", st.RotateRequestedAt)
	}
	return v
}

// randomConfig draws a valid Config: certificates living an hour to 30 days, CAs 2 to 12 times
// longer, a grace of a second to 10 minutes.
func randomConfig(r *rand.Rand) Config {
	cfg := testConfig()
	cfg.CertValidity = []time.Duration{time.Hour, 6 * time.Hour, day, 30 * day}[r.IntN(4)]
	cfg.CAValidity = cfg.CertValidity * time.Duration(2+r.IntN(11))
	cfg.PropagationGrace = []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}[r.IntN(4)]
	return cfg
}

// between draws a whole second in [from, to].
func between(r *rand.Rand, from, to time.Time) time.Time {
	n := int64(to.Sub(from) / time.Second)
	if n <= 0 {
		return from
	}
	return from.Add(time.Duration(r.Int64N(n+1)) * time.Second)
}

// randomSecret draws a Secret from anywhere in a rotation: 0 to 3 CAs of random ages (the first
// often well inside its life, the others anywhere up to past their end; once in a while the first
// is not the newest), with the key of the first, of another CA or none; a serving certificate from
// one of them (often an older one, as in the middle of a rotation), from a CA outside the bundle
// or none, of random age (often younger than the grace, sometimes not valid yet), sometimes for
// other names or with another key; published-at and rotate-requested-at annotations in the past,
// within the grace, in the future or absent.
func randomSecret(t testing.TB, r *rand.Rand, cfg Config, now time.Time) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{Data: map[string][]byte{}}
	s.Annotations = map[string]string{}
	seconds := func(d time.Duration) time.Duration {
		return time.Duration(r.Int64N(int64(d/time.Second)+1)) * time.Second
	}
	var cas []testCA
	if r.IntN(10) != 0 {
		for i := range 1 + r.IntN(3) {
			validity := cfg.CAValidity
			if r.IntN(4) == 0 {
				validity = cfg.CAValidity / time.Duration(1+r.IntN(3))
			}
			age := seconds(validity * 6 / 5)
			if i == 0 && r.IntN(2) == 0 {
				age = seconds(validity * 2 / 3)
			}
			cas = append(cas, newTestCA(t, now, madeAgo(age), caValidFor(validity)))
		}
	}
	if r.IntN(10) == 0 {
		slices.Reverse(cas) // an older CA first
	}
	if len(cas) > 0 {
		var certs []*x509.Certificate
		for _, c := range cas {
			certs = append(certs, c.cert)
		}
		s.Data[KeyCABundle] = pemOf(t, certs...)
		switch r.IntN(10) {
		case 0: // no key
		case 1:
			s.Data[KeyCAKey] = newTestCA(t, now).keyPEM(t)
		default:
			s.Data[KeyCAKey] = cas[0].keyPEM(t)
		}
	}

	// The serving certificate.
	signer := newTestCA(t, now, madeAgo(day)) // outside the bundle
	switch {
	case len(cas) == 0 || r.IntN(10) == 0:
	case len(cas) > 1 && r.IntN(2) == 0:
		signer = cas[1+r.IntN(len(cas)-1)]
	default:
		signer = cas[r.IntN(len(cas))]
	}
	if r.IntN(20) != 0 {
		issued := between(r, maxTime(signer.cert.NotBefore, now.Add(-cfg.CertValidity*6/5)), now)
		switch r.IntN(20) {
		case 0:
			issued = now.Add(time.Hour) // not valid yet
		case 1, 2, 3, 4:
			issued = between(r, maxTime(signer.cert.NotBefore, now.Add(-2*cfg.PropagationGrace)), now)
		}
		opts := []leafOption{issuedAgo(now.Sub(issued)), leafValidFor(cfg.CertValidity)}
		if r.IntN(10) == 0 {
			opts = append(opts, covering([]string{"elsewhere.example"}, cfg.IPAddresses))
		}
		l := newTestLeaf(t, signer, now, opts...)
		s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = l.certPEM, l.keyPEM
		if r.IntN(10) == 0 {
			s.Data[corev1.TLSPrivateKeyKey] = newTestLeaf(t, signer, now).keyPEM
		}
	}

	// Published a while ago, within about the grace, in the future (clock skew) or not recorded.
	switch n := r.IntN(20); {
	case n < 5:
	case n < 10:
		s.Annotations[AnnotationBundlePublishedAt] = now.Add(-seconds(3 * day)).Format(time.RFC3339)
	case n < 18:
		s.Annotations[AnnotationBundlePublishedAt] = now.Add(-seconds(2 * cfg.PropagationGrace)).Format(time.RFC3339)
	default:
		s.Annotations[AnnotationBundlePublishedAt] = now.Add(seconds(5 * time.Minute)).Format(time.RFC3339)
	}
	if r.IntN(10) < 3 && len(cas) > 0 {
		// Anywhere from an hour before the oldest CA to two hours ahead.
		from := now
		for _, c := range cas {
			from = minTime(from, c.cert.NotBefore.Add(-time.Hour))
		}
		s.Annotations[AnnotationRotateRequestedAt] = between(r, from, now.Add(2*time.Hour)).Format(time.RFC3339)
	}
	return s
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// describe prints a State for a failure message.
func describe(st State, now time.Time) string {
	var b strings.Builder
	at := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Sub(now).String()
	}
	for i, ca := range st.Bundle {
		fmt.Fprintf(&b, "CA %d: from %s to %s; ", i, at(ca.NotBefore), at(ca.NotAfter))
	}
	fmt.Fprintf(&b, "CA key valid %v; ", st.CAKeyValid)
	if st.Leaf != nil {
		signer := "none"
		for i, ca := range st.Bundle {
			if signedBy(st.Leaf, ca) {
				signer = fmt.Sprint(i)
			}
		}
		fmt.Fprintf(&b, "leaf from CA %s, from %s to %s, key valid %v, names %v; ", signer, at(st.Leaf.NotBefore), at(st.Leaf.NotAfter), st.LeafKeyValid, st.Leaf.DNSNames)
	}
	fmt.Fprintf(&b, "configurations found %v, published %v, recorded %s, rotation requested %s (times relative to now)",
		st.ConfigurationsFound, st.Published, at(st.BundlePublishedAt), at(st.RotateRequestedAt))
	return b.String()
}

// Every step Decide chooses, from any state, keeps the invariants of its comment.
func TestDecideKeepsItsInvariants(t *testing.T) {
	const seed, states = 20260301, 500
	r := rand.New(rand.NewPCG(seed, seed))
	steps := []string{
		"no CA yet", "CA key is missing", "the CA has expired", "the CA is two thirds", "rotation was requested",
		"new CA must be published", "do not exist yet", "not in the webhook configurations yet", "may not trust the new CA yet",
		"moves to the newest CA", "serving certificate is two thirds", "names differ", "not valid now", "no CA in the bundle signed",
		"serving key is missing", "replaced and leaves", "expired and leaves", "recorded",
	}
	seen := map[string]int{}
	for n := range states {
		cfg := randomConfig(r)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("state %d: random config is invalid: %v", n, err)
		}
		now := testNow.Add(time.Duration(r.IntN(3600)) * time.Second)
		st := parseSecret(randomSecret(t, r, cfg, now)).state
		st.ConfigurationsFound = r.IntN(5) != 0
		st.Published = st.ConfigurationsFound && r.IntN(3) != 0
		p := Decide(st, cfg, now)
		for _, v := range violations(st, cfg, now, p) {
			t.Errorf("state %d (seed %d): %s\n  state: %s\n  step: %+v", n, seed, v, describe(st, now), p)
		}
		for _, said := range append(slices.Clone(p.Reasons), p.Waiting) {
			for _, step := range steps {
				if strings.Contains(said, step) {
					seen[step]++
				}
			}
		}
		if p.RecordPublished {
			seen["recorded"]++
		}
	}
	// The states must reach every step of a rotation, or the invariants were checked on few steps.
	for _, step := range steps {
		if seen[step] < 5 {
			t.Errorf("only %d of %d random states lead to a step saying %q", seen[step], states, step)
		}
	}
	t.Logf("steps per phrase: %v", seen)
}

// written is one version of the Secret in a simulation: from at, replicas start serving leaf and
// the API server starts trusting bundle; both are certain grace later.
type written struct {
	at     time.Time
	bundle []*x509.Certificate
	leaf   *x509.Certificate
}

// inUse returns the versions whose leaf some replica may serve, and whose bundle the API server
// may trust, at now: the last one written at least grace ago and every later one.
func inUse(history []written, now time.Time, grace time.Duration) []written {
	k := 0
	for i, w := range history {
		if !now.Before(w.at.Add(grace)) {
			k = i
		}
	}
	return history[k:]
}

// trusted says leaf verifies, at now, against bundle as the API server checks it.
func trusted(leaf *x509.Certificate, bundle []*x509.Certificate, now time.Time) bool {
	roots := x509.NewCertPool()
	for _, ca := range bundle {
		roots.AddCert(ca)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// simulation is the outcome of applying steps until a settled Secret.
type simulation struct {
	steps, newCAs int
	// replacedUsable counts the serving certificates replaced while still usable.
	replacedUsable int
	final          State
	// untrusted describes every moment a replica may serve a certificate the API server may not
	// trust; failures lists broken invariants and a run that does not settle.
	untrusted, failures []string
}

// simulate runs the rotator's loop on secret from start: parse, Decide, render, publish at once,
// and look again after RequeueAfter (rounded up to a whole second, as the Secret keeps times to
// the second). The webhook configurations always carry the bundle last written. The run ends at
// the first settled Secret from settledFrom on.
func simulate(t testing.TB, secret *corev1.Secret, cfg Config, start, settledFrom time.Time, maxSteps int) simulation {
	t.Helper()
	var sim simulation
	now := start
	initial := parseSecret(secret).state
	history := []written{{at: start.AddDate(-100, 0, 0), bundle: initial.Bundle, leaf: initial.Leaf}}
	for ; sim.steps < maxSteps; sim.steps++ {
		m := parseSecret(secret)
		m.state.ConfigurationsFound = true
		m.state.Published = len(m.bundle) > 0
		p := Decide(m.state, cfg, now)
		for _, v := range violations(m.state, cfg, now, p) {
			sim.failures = append(sim.failures, fmt.Sprintf("step %d at +%s: %s (state: %s)", sim.steps, now.Sub(start), v, describe(m.state, now)))
		}
		if !p.Changed(m.state) && p.Waiting == "" && len(m.state.Bundle) == 1 && !now.Before(settledFrom) {
			sim.final = m.state
			return sim
		}
		if p.Changed(m.state) {
			secret = rendered(t, secret, m, p, cfg, now)
			if p.NewCA {
				sim.newCAs++
			}
			if usable, _ := usableLeaf(m.state, cfg, now); usable && p.IssueLeaf {
				sim.replacedUsable++
			}
			st := parseSecret(secret).state
			history = append(history, written{at: now, bundle: st.Bundle, leaf: st.Leaf})
			for _, served := range inUse(history, now, cfg.PropagationGrace) {
				for _, trust := range inUse(history, now, cfg.PropagationGrace) {
					if served.leaf != nil && !trusted(served.leaf, trust.bundle, now) {
						sim.untrusted = append(sim.untrusted, fmt.Sprintf("step %d at +%s (%q): the certificate written at +%s may be served while the API server may trust only the bundle written at +%s",
							sim.steps, now.Sub(start), p.Reasons, served.at.Sub(start), trust.at.Sub(start)))
					}
				}
			}
		}
		now = now.Add(p.RequeueAfter + time.Second - 1).Truncate(time.Second)
	}
	sim.failures = append(sim.failures, fmt.Sprintf("not settled after %d steps (state: %s)", maxSteps, describe(parseSecret(secret).state, now)))
	return sim
}

// maxSettleSteps bounds the looks before a settled Secret: a rotation takes seven (new CA, record,
// wait out the grace, move the certificate, wait out the grace, drop the old CA, record), and a
// rotation requested 90 minutes ahead adds two.
const maxSettleSteps = 12

// From any state, applying steps reaches a settled Secret - one CA, a certificate from it, nothing
// to do - within a few steps; and from any state whose certificate was usable, no replica ever
// serves a certificate the API server may not trust.
func TestDecideConvergesWithoutServingAnUntrustedCertificate(t *testing.T) {
	const seed, runs = 20260302, 150
	r := rand.New(rand.NewPCG(seed, seed))
	cfg := testConfig()
	most, usableStarts, replacedUsable := 0, 0, 0
	for n := range runs {
		cfg.CertValidity = []time.Duration{time.Hour, day, 30 * day}[r.IntN(3)]
		cfg.CAValidity = cfg.CertValidity * time.Duration(2+r.IntN(11))
		secret := randomSecret(t, r, cfg, testNow)
		start := parseSecret(secret).state
		usable, _ := usableLeaf(start, cfg, testNow)
		sim := simulate(t, secret, cfg, testNow, testNow, maxSettleSteps)
		most = max(most, sim.steps)
		for _, f := range sim.failures {
			t.Errorf("run %d (seed %d): %s\n  start: %s", n, seed, f, describe(start, testNow))
		}
		if usable {
			usableStarts++
			replacedUsable += sim.replacedUsable
			for _, u := range sim.untrusted {
				t.Errorf("run %d (seed %d): %s\n  start: %s", n, seed, u, describe(start, testNow))
			}
		}
		checkSettled(t, fmt.Sprintf("run %d", n), sim.final, cfg)
	}
	t.Logf("settled within %d steps at most; %d runs started from a usable certificate and replaced %d usable certificates", most, usableStarts, replacedUsable)
	if usableStarts < runs/4 || replacedUsable < runs/10 {
		t.Errorf("the random starts exercise too little: %d start from a usable certificate, %d usable certificates replaced", usableStarts, replacedUsable)
	}
}

// A rotation forced by the annotation on a settled Secret makes one new CA, at or after the
// requested time, moves the certificate to it and drops the old CA, never serving an untrusted
// certificate.
func TestDecideConvergesAfterARotationRequest(t *testing.T) {
	tests := map[string]struct {
		// ahead is how far the requested time is ahead of the cluster's clock.
		ahead time.Duration
	}{
		"a rotation requested now":                                     {},
		"a rotation requested 90 minutes ahead of the cluster's clock": {ahead: 90 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			ca := newTestCA(t, testNow, madeAgo(10*day))
			leaf := newTestLeaf(t, ca, testNow, issuedAgo(day))
			requested := testNow.Add(tc.ahead)
			secret := settledSecret(t, ca, leaf, testNow.Add(-10*day))
			secret.Annotations[AnnotationRotateRequestedAt] = requested.Format(time.RFC3339)
			sim := simulate(t, secret, cfg, testNow, requested, maxSettleSteps)
			for _, f := range append(sim.failures, sim.untrusted...) {
				t.Error(f)
			}
			if sim.newCAs != 1 {
				t.Errorf("made %d CAs, want 1", sim.newCAs)
			}
			checkSettled(t, "after the rotation", sim.final, cfg)
			if len(sim.final.Bundle) == 1 && sim.final.Bundle[0].NotBefore.Before(requested) {
				t.Errorf("settled on a CA made at %s, before the requested %s", sim.final.Bundle[0].NotBefore, requested)
			}
			t.Logf("settled in %d steps", sim.steps)
		})
	}
}

// checkSettled says a simulation ended with one CA and a usable certificate from it.
func checkSettled(t *testing.T, what string, st State, cfg Config) {
	t.Helper()
	if len(st.Bundle) != 1 {
		return // the simulation already reported that it did not settle
	}
	if !st.CAKeyValid || st.Leaf == nil || !st.LeafKeyValid || !signedBy(st.Leaf, st.Bundle[0]) {
		t.Errorf("%s: settled without a certificate from the only CA: %s", what, describe(st, testNow))
	}
	if v := pki.FuzzyX509AltNamesMatchSpec(st.Leaf, cmapi.CertificateSpec{DNSNames: cfg.DNSNames, IPAddresses: pki.IPAddressesToString(cfg.IPAddresses)}); len(v) > 0 {
		t.Errorf("%s: settled with a certificate for other names: %v", what, v)
	}
}

// rendered is the Secret as the rotator writes it after render: the new data, the other
// annotations kept and the published-at annotation set or removed.
func rendered(t testing.TB, old *corev1.Secret, m material, p RotationStep, cfg Config, now time.Time) *corev1.Secret {
	t.Helper()
	data, publishedAt, err := render(old, m, p, cfg, now)
	if err != nil {
		t.Fatalf("render %+v: %v", p, err)
	}
	next := &corev1.Secret{Data: data}
	if old != nil {
		next.Annotations = maps.Clone(old.Annotations)
	}
	setAnnotation(next, AnnotationBundlePublishedAt, publishedAt)
	return next
}

// settledSecret holds one CA with its key and a serving certificate from it, its bundle recorded
// as published at publishedAt.
func settledSecret(t testing.TB, ca testCA, leaf testLeaf, publishedAt time.Time) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{Data: map[string][]byte{
		KeyCABundle: pemOf(t, ca.cert), KeyCAKey: ca.keyPEM(t),
		corev1.TLSCertKey: leaf.certPEM, corev1.TLSPrivateKeyKey: leaf.keyPEM,
	}}
	s.Annotations = map[string]string{AnnotationBundlePublishedAt: publishedAt.Format(time.RFC3339)}
	return s
}

func pemOf(t testing.TB, certs ...*x509.Certificate) []byte {
	t.Helper()
	b, err := encodeBundle(certs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
