package webhook

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// The decision cache lets an admission request that is identical to an earlier one, under the
// same policy set, reuse that request's policy decision instead of decoding the object and
// evaluating Rego again. Argo CD re-syncs, Helm upgrades and repeated `kubectl apply` of an
// unchanged manifest send such requests.
//
// It is safe because a key holds everything the decision depends on, compared byte for byte (the
// 64-bit hash only picks the bucket):
//   - the policy set: the cache is emptied when a new set is put in force, and is not used at all
//     for a set that calls a nondeterministic built-in (policy.Set.Deterministic);
//   - the webhook, the operation, the namespace and its labels;
//   - the raw object and old object, exactly as received (the policy input, the early answers for
//     opted-out DaemonSets and status-only updates, and the patch are functions of these bytes);
//   - for validation, the node facts' inputs: every node's name, UID and resourceVersion. The API
//     server gives a node a new resourceVersion on every change, so the same list means the same
//     node count and the same matching nodes. A node without a resourceVersion makes the request
//     uncacheable, and so does a node list that could not be read.
//
// Only successful evaluations are stored: errors go through the failure mode every time.
// Everything a request does besides evaluating (metrics, dry-run log lines, warnings) is done
// again on a hit from the cached decision.
type decisionCache struct {
	mu   sync.Mutex
	set  *policy.Set
	seed maphash.Seed
	// Two generations approximate least-recently-used eviction: entries go into current; when it
	// holds generationBytes of keys, previous is dropped and current becomes previous. A hit in
	// previous moves the entry back into current.
	current, previous map[uint64][]*cacheEntry
	currentBytes      int
}

// generationBytes bounds each generation by the size of its keys (mostly raw objects): the
// cache holds at most about twice this.
const generationBytes = 8 << 20

type cacheKey struct {
	webhook, operation, namespace string
	labels                        []byte // canonical: sorted key=value pairs, length-prefixed
	nodes                         []byte // canonical node facts input; empty for the mutating webhook
	object, oldObject             []byte
}

type cacheEntry struct {
	key   cacheKey
	value any
}

var decisionCacheTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "daemonguard_decision_cache_requests_total",
	Help: "Admission requests looked up in the decision cache, by webhook and result (hit, miss).",
}, []string{"webhook", "result"})

func init() { metrics.Registry.MustRegister(decisionCacheTotal) }

func (k *cacheKey) size() int {
	return len(k.webhook) + len(k.operation) + len(k.namespace) + len(k.labels) + len(k.nodes) + len(k.object) + len(k.oldObject)
}

func (k *cacheKey) equal(o *cacheKey) bool {
	return k.webhook == o.webhook && k.operation == o.operation && k.namespace == o.namespace &&
		bytes.Equal(k.labels, o.labels) && bytes.Equal(k.nodes, o.nodes) &&
		bytes.Equal(k.object, o.object) && bytes.Equal(k.oldObject, o.oldObject)
}

func (k *cacheKey) hash(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, s := range []string{k.webhook, k.operation, k.namespace} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	for _, b := range [][]byte{k.labels, k.nodes, k.object, k.oldObject} {
		var n [8]byte
		h.Write(strconv.AppendInt(n[:0], int64(len(b)), 10))
		h.WriteByte(0)
		h.Write(b)
	}
	return h.Sum64()
}

// get returns the value stored for key under set, if any.
func (c *decisionCache) get(set *policy.Set, key *cacheKey) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set != set || c.current == nil {
		return nil, false
	}
	h := key.hash(c.seed)
	for _, e := range c.current[h] {
		if e.key.equal(key) {
			return e.value, true
		}
	}
	for _, e := range c.previous[h] {
		if e.key.equal(key) {
			c.insert(h, e)
			return e.value, true
		}
	}
	return nil, false
}

// put stores value for key under set. It keeps copies of the key's byte slices, so the request's
// buffers stay the caller's.
func (c *decisionCache) put(set *policy.Set, key *cacheKey, value any) {
	size := key.size()
	if size > generationBytes/4 {
		return // one huge object must not flush everything else
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set != set || c.current == nil {
		if c.current == nil {
			c.seed = maphash.MakeSeed()
		}
		c.set, c.current, c.previous, c.currentBytes = set, map[uint64][]*cacheEntry{}, nil, 0
	}
	k := *key
	k.labels, k.nodes, k.object, k.oldObject = bytes.Clone(k.labels), bytes.Clone(k.nodes), bytes.Clone(k.object), bytes.Clone(k.oldObject)
	c.insert(key.hash(c.seed), &cacheEntry{key: k, value: value})
}

func (c *decisionCache) insert(h uint64, e *cacheEntry) {
	for _, old := range c.current[h] {
		if old.key.equal(&e.key) {
			return
		}
	}
	if c.currentBytes+e.key.size() > generationBytes {
		c.previous, c.current, c.currentBytes = c.current, map[uint64][]*cacheEntry{}, 0
	}
	c.current[h] = append(c.current[h], e)
	c.currentBytes += e.key.size()
}

// labelsKey encodes namespace labels canonically.
func labelsKey(labels map[string]string) []byte {
	keys := slices.Sorted(maps.Keys(labels))
	var b []byte
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		b = strconv.AppendInt(b, int64(len(labels[k])), 10)
		b = append(b, ':')
		b = append(b, labels[k]...)
	}
	return b
}

// nodesKey encodes what the node facts depend on: every node's name, UID and resourceVersion, in
// list order. ok is false when a node has no resourceVersion (its content cannot be vouched for).
func nodesKey(nodes []*corev1.Node) ([]byte, bool) {
	b := make([]byte, 0, 1+len(nodes)*64)
	b = append(b, 'N') // a readable, empty list differs from an unreadable one
	for _, n := range nodes {
		if n.ResourceVersion == "" {
			return nil, false
		}
		for _, s := range []string{n.Name, string(n.UID), n.ResourceVersion} {
			b = strconv.AppendInt(b, int64(len(s)), 10)
			b = append(b, ':')
			b = append(b, s...)
		}
	}
	return b, true
}
