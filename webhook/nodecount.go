package webhook

import (
	"context"
	"strconv"
	"sync"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// nodeFactsMemo remembers, for the current node list generation (Facts.NodesGeneration), the
// node facts of pod templates by their scheduling fields. Which nodes a DaemonSet targets depends
// only on its template's nodeSelector, affinity and tolerations and on the nodes' names, labels
// and taints, which the generation covers; a DaemonSet's image, annotations or budget change far
// more often than where it runs. A validation whose decision is not cached then neither lists
// the nodes nor matches them, which at 500 nodes was most of its cost.
//
// Invariants: every entry belongs to gen; a put for a newer generation empties the memo, one for
// an older generation is dropped (the generation only grows). Keys are the fields' raw JSON, so
// two spellings of the same fields are two entries, never one entry for two meanings.
type nodeFactsMemo struct {
	mu    sync.Mutex
	gen   uint64
	facts map[string]policy.ClusterFacts
	bytes int // of the keys in facts
}

// maxNodeFactsBytes bounds the memo's keys; it is emptied when full (a cluster has far fewer
// distinct DaemonSet scheduling constraints than this holds). A key larger than
// maxNodeFactKeyBytes is not remembered: anyone who may create DaemonSets could otherwise fill
// memory with templates of huge toleration lists.
const (
	maxNodeFactsBytes   = 4 << 20
	maxNodeFactKeyBytes = 64 << 10
)

func (m *nodeFactsMemo) get(gen uint64, key string) (policy.ClusterFacts, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		return policy.ClusterFacts{}, false
	}
	f, ok := m.facts[key]
	return f, ok
}

func (m *nodeFactsMemo) put(gen uint64, key string, f policy.ClusterFacts) {
	if len(key) > maxNodeFactKeyBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case gen < m.gen:
		return
	case gen > m.gen || m.facts == nil || m.bytes+len(key) > maxNodeFactsBytes:
		m.gen, m.facts, m.bytes = gen, map[string]policy.ClusterFacts{}, 0
	}
	if _, ok := m.facts[key]; !ok {
		m.bytes += len(key)
	}
	m.facts[key] = f
}

// schedulingKey returns the raw JSON of spec.template.spec's nodeSelector, affinity and
// tolerations of a DaemonSet, length-prefixed, absent ones marked: the memo key of its node
// facts. ok is false when a level is not an object or a key is spelled with escapes, where the
// raw bytes might not be what decoding sees; the facts are then computed every time. raw must be
// valid JSON (Serve decoded the review that carried it).
func schedulingKey(raw []byte) (string, bool) {
	level := raw
	for i, key := range []string{"spec", "template", "spec"} {
		fields, ok := objectFields(level, i == 0, key)
		if !ok || fields[0] == nil || fields[0][0] != '{' {
			return "", false
		}
		level = fields[0]
	}
	fields, ok := objectFields(level, false, "nodeSelector", "affinity", "tolerations")
	if !ok {
		return "", false
	}
	var b []byte
	for _, f := range fields {
		if f == nil {
			b = append(b, '-')
			continue
		}
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	return string(b), true
}

// templateFacts returns the node facts of the DaemonSet obj (decoded from raw): how many nodes
// there are and how many its template targets; nil when the nodes cannot be read or the template
// is malformed, which turns off the checks that need them. With a node generation, facts are
// memoized by the template's scheduling fields and nodes are read only on a miss.
func (h *Handlers) templateFacts(ctx context.Context, raw []byte, obj map[string]any, f *clusterFacts) *policy.ClusterFacts {
	var key string
	if f.haveGen && !h.NoNodeFactsMemo {
		if k, ok := schedulingKey(raw); ok {
			key = k
			if facts, ok := h.nodeFacts.get(f.nodesGen, key); ok {
				nodeFactsTotal.WithLabelValues("hit").Inc()
				return &facts
			}
			nodeFactsTotal.WithLabelValues("miss").Inc()
		}
	}
	h.loadNodes(ctx, f)
	if f.nodesErr != nil {
		return nil
	}
	podSpec, ok := templatePodSpec(obj)
	if !ok {
		return nil
	}
	facts := policy.ClusterFacts{Nodes: len(f.nodes), MatchingNodes: nodes.Count(podSpec, f.nodes)}
	if key != "" {
		h.nodeFacts.put(f.nodesGen, key, facts)
	}
	return &facts
}
