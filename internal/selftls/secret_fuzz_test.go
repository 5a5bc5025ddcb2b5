package selftls

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzTimeAnnotations fuzzes the Secret's two time annotations (go test -fuzz
// FuzzTimeAnnotations ./internal/selftls/): the bundle-published-at time render writes at now,
// and an operator's rotate-requested-at value.
//
//   - What render records, parseSecret reads back as the same instant, to the nanosecond: the
//     propagation grace counts from it. now ranges over the years RFC 3339 can write (1 to 9999).
//   - An operator's value that is an RFC 3339 time is that instant; anything else is no request,
//     never an error.
func FuzzTimeAnnotations(f *testing.F) {
	f.Add(testNow.Unix(), int64(0), "2026-02-27T08:30:00Z")
	f.Add(testNow.Unix(), int64(123456789), "2026-02-27T09:30:00+01:00")
	f.Add(int64(0), int64(999999999), "2026-13-45")
	f.Add(int64(-62135596800), int64(1), "yesterday")
	f.Add(int64(253402300799), int64(999999999), "2026-02-27T08:30:00.5Z")
	f.Add(int64(1), int64(-1), "")
	f.Fuzz(func(t *testing.T, sec, nsec int64, requested string) {
		now := time.Unix(sec, nsec)
		if now.UTC().Year() < 1 || now.UTC().Year() > 9999 {
			return
		}
		_, published, err := render(nil, material{}, RotationStep{RecordPublished: true}, testConfig(), now)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			AnnotationBundlePublishedAt: published, AnnotationRotateRequestedAt: requested,
		}}}
		st := parseSecret(s).state
		if !st.BundlePublishedAt.Equal(now) {
			t.Fatalf("published at %s, written as %q, read as %s", now, published, st.BundlePublishedAt)
		}
		want, err := time.Parse(time.RFC3339, requested)
		if err != nil {
			want = time.Time{}
		}
		if !st.RotateRequestedAt.Equal(want) {
			t.Fatalf("rotation requested at %q read as %s, want %s", requested, st.RotateRequestedAt, want)
		}
	})
}
