package admission

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// The policies read the value of the PriorityClass a template names as input.priorityClass when
// the lookup answers, and never see it otherwise: offline, without a name, for a class that does
// not exist or cannot be read.
func TestPoliciesSeeThePriorityClassTheTemplateNames(t *testing.T) {
	const module = `package daemonguard.policies.pc

violation contains {"field": "spec.template.spec.priorityClassName", "msg": msg} if {
	msg := sprintf("%s=%d", [input.priorityClass.name, input.priorityClass.value])
}

violation contains {"field": "spec.template.spec.priorityClassName", "msg": "absent"} if not input.priorityClass
`
	set, err := policy.Compile(context.Background(), []policy.Module{{Name: "pc.rego", Source: module}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	values := PriorityClassValues(map[string]int32{"high": 1000000, "system-node-critical": 2000001000})
	tests := map[string]struct {
		className string                                       // spec.template.spec.priorityClassName; "" for none
		lookup    func(context.Context, string) (int32, error) // Lookups.PriorityClass
		want      string                                       // the policy's message
	}{
		"a class the lookup knows":        {className: "high", lookup: values, want: "high=1000000"},
		"a system class":                  {className: "system-node-critical", lookup: values, want: "system-node-critical=2000001000"},
		"a class that does not exist":     {className: "missing", lookup: values, want: "absent"},
		"a class that cannot be read":     {className: "high", lookup: func(context.Context, string) (int32, error) { return 0, errors.New("forbidden") }, want: "absent"},
		"no lookup (offline)":             {className: "high", want: "absent"},
		"a template without a class name": {lookup: values, want: "absent"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var raw []byte
			if tc.className == "" {
				raw = gatedDaemonSet(t, "")
			} else {
				raw = []byte(strings.Replace(string(gatedDaemonSet(t, "")), `"spec":{"containers"`, `"spec":{"priorityClassName":"`+tc.className+`","containers"`, 1))
				if !strings.Contains(string(raw), tc.className) {
					t.Fatal("the fixture has no priorityClassName")
				}
			}
			core := &Reviewer{Lookups: Lookups{PriorityClass: tc.lookup}}
			rv := Review{Operation: policy.OpCreate, Namespace: "team", Object: raw}
			for op, r := range map[string]Outcome{"Validate": core.Validate(context.Background(), set, rv), "Simulate": core.Simulate(context.Background(), set, rv)} {
				if r.Err() != nil || len(r.Violations) != 1 || r.Violations[0].Message != tc.want {
					t.Errorf("%s: err %v, violations %v; want one saying %q", op, r.Err(), r.Violations, tc.want)
				}
			}
		})
	}
}

// ReaderLookups reads a PriorityClass's value from the cache, and says NotFound for one that does
// not exist, so that the policies see it absent rather than unknown.
func TestReaderLookupsReadPriorityClasses(t *testing.T) {
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000000}
	lookups := ReaderLookups(fake.NewClientBuilder().WithObjects(pc).Build(), nil)
	if v, err := lookups.PriorityClass(context.Background(), "high"); err != nil || v != 1000000 {
		t.Errorf("high: %d, %v; want 1000000", v, err)
	}
	if _, err := lookups.PriorityClass(context.Background(), "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing: %v; want NotFound", err)
	}
}

// A namespace or PriorityClass the cache does not hold yet is read from the API server before it
// counts as absent: a DaemonSet applied with its namespace reads the namespace's mark. What the
// cache holds is not read again, and a cache that fails is not read around.
func TestReaderLookupsReadWhatTheCacheMissesLive(t *testing.T) {
	marked := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: map[string]string{"mark": "live"}}}
	cachedNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cached", Labels: map[string]string{"mark": "cache"}}}
	staleNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cached", Labels: map[string]string{"mark": "live"}}}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Value: 7}
	failing := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("cache not synced")
		},
	}).Build()
	tests := map[string]struct {
		cache, live client.Reader
		namespace   string
		wantLabels  map[string]string
		wantErr     func(error) bool
	}{
		"a namespace only the API server holds yet is read live": {
			cache: fake.NewClientBuilder().Build(), live: fake.NewClientBuilder().WithObjects(marked).Build(),
			namespace: "agents", wantLabels: marked.Labels,
		},
		"a namespace the cache holds is read from the cache": {
			cache: fake.NewClientBuilder().WithObjects(cachedNS).Build(), live: fake.NewClientBuilder().WithObjects(staleNS).Build(),
			namespace: "cached", wantLabels: cachedNS.Labels,
		},
		"a namespace neither holds is absent": {
			cache: fake.NewClientBuilder().Build(), live: fake.NewClientBuilder().Build(),
			namespace: "gone", wantErr: apierrors.IsNotFound,
		},
		"without a live reader the cache decides": {
			cache: fake.NewClientBuilder().Build(), namespace: "agents", wantErr: apierrors.IsNotFound,
		},
		"a cache that fails is not read around": {
			cache: failing, live: fake.NewClientBuilder().WithObjects(marked).Build(),
			namespace: "agents", wantErr: func(err error) bool { return err != nil && !apierrors.IsNotFound(err) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			labels, err := ReaderLookups(tc.cache, tc.live).NamespaceLabels(context.Background(), tc.namespace)
			switch {
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Errorf("error %v, want another", err)
			case tc.wantErr == nil && (err != nil || !reflect.DeepEqual(labels, tc.wantLabels)):
				t.Errorf("labels %v, %v; want %v", labels, err, tc.wantLabels)
			}
		})
	}
	t.Run("a PriorityClass only the API server holds yet is read live", func(t *testing.T) {
		lookups := ReaderLookups(fake.NewClientBuilder().Build(), fake.NewClientBuilder().WithObjects(pc).Build())
		if v, err := lookups.PriorityClass(context.Background(), "new"); err != nil || v != 7 {
			t.Errorf("new: %d, %v; want 7", v, err)
		}
	})
}
