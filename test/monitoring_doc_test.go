package test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAlertsAndDashboardUseDocumentedMetrics: every daemonguard_ metric the chart's alert rules and
// Grafana dashboard name, in an expression or in the text that tells the operator where to look, is
// in docs/monitoring.md's table, which TestMetricsTableMatchesTheCode holds equal to the code. A
// histogram's series are named with _bucket, _sum and _count after the documented name. The
// libraries' metrics they use (controller-runtime's leader_election_) are rows of the table too.
func TestAlertsAndDashboardUseDocumentedMetrics(t *testing.T) {
	docs := documentedMetrics(t)
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"leader_election_master_status"} {
		docs[m] = metric{kind: "library"}
		if !strings.Contains(string(doc), "| `"+m+"` |") {
			t.Errorf("docs/monitoring.md's table has no row for %s", m)
		}
	}
	name := regexp.MustCompile(`(daemonguard|leader_election)_[a-zA-Z0-9_]+`)
	for _, file := range []string{"prometheus-rules.yaml", "grafana-dashboard.json"} {
		path := filepath.Join(repoRoot, "charts", "daemonguard", "files", file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		used := slices.Compact(slices.Sorted(slices.Values(name.FindAllString(string(data), -1))))
		if len(used) < 5 {
			t.Fatalf("%s names %d daemonguard_ metrics (%v): the pattern no longer finds them", path, len(used), used)
		}
		for _, m := range used {
			if !documented(docs, m) {
				t.Errorf("%s uses %s, which docs/monitoring.md's table does not document", path, m)
			}
		}
	}
}

// documented says whether a series name is a documented metric or a series of a documented
// histogram.
func documented(docs map[string]metric, series string) bool {
	if _, ok := docs[series]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && docs[base].kind == "histogram" {
			return true
		}
	}
	return false
}
