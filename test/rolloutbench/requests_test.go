package rolloutbench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// requestCounts is apiserver_request_total summed per "VERB resource[/subresource]".
type requestCounts map[string]float64

// sampleRequests reads the API server's request counters (the benchmark's client is an admin).
func sampleRequests(ctx context.Context, c kubernetes.Interface) requestCounts {
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	counts := requestCounts{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(v, `"`)
			}
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		v, _ := strconv.ParseFloat(value, 64)
		counts[key] += v
	}
	return counts
}

func (a requestCounts) delta(b requestCounts) requestCounts {
	d := requestCounts{}
	for k, v := range b {
		if n := v - a[k]; n > 0 {
			d[k] = n
		}
	}
	return d
}

// requestTable renders the requests each rollout made of the API server (WATCH counts watches
// opened, not events), busiest first, those with at least min requests in some rollout.
func requestTable(names []string, all []requestCounts, min float64) string {
	keys := map[string]float64{}
	for _, d := range all {
		for k, v := range d {
			keys[k] = max(keys[k], v)
		}
	}
	var order []string
	for k, v := range keys {
		if v >= min {
			order = append(order, k)
		}
	}
	sort.Slice(order, func(i, j int) bool { return keys[order[i]] > keys[order[j]] })
	var b strings.Builder
	b.WriteString(tableHeader("API requests", names))
	for _, k := range order {
		fmt.Fprintf(&b, "%-44s", k)
		for _, d := range all {
			fmt.Fprintf(&b, " %22.0f", d[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}
