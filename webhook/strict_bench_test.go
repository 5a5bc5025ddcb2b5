package webhook

import (
	"testing"

	"github.com/daemonguard/daemonguard/internal/loadgen/fixture"
)

// BenchmarkCheckReviewType measures Serve's type check on the load generator's reviews, as the
// API server sends them.
func BenchmarkCheckReviewType(b *testing.B) {
	cases, err := fixture.CasesWith(fixture.Options{UniqueObjects: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		b.Run(c.Name, func(b *testing.B) {
			b.SetBytes(int64(len(c.Review)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := checkReviewType(c.Review); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
