package webhook

import (
	"slices"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// lazyRequestLogger is admission.DefaultLogConstructor's logger, built only when something logs
// through it. admission.Webhook.Handle builds a logger for every request and puts it into the
// request's context; a zap logger encodes its values when they are added, which cost about 3.3 KB
// and 19 allocations per request, although daemonguard's handlers log through their own logger
// and only an answer that cannot be encoded is logged through this one.
func lazyRequestLogger(base logr.Logger, req *admission.Request) logr.Logger {
	if req == nil {
		return base
	}
	// Only what DefaultLogConstructor reads: the logger must not keep the request's objects
	// alive should a handler keep it.
	s := &lazyRequestSink{base: base, uid: req.UID, namespace: req.Namespace, name: req.Name, resource: req.Resource, user: req.UserInfo.Username}
	return logr.New(s).V(base.GetV())
}

// lazyRequestSink is the sink of a lazyRequestLogger: it remembers the request and what was added
// (names, values, call depth) and builds the real sink when a line is written.
type lazyRequestSink struct {
	base                  logr.Logger
	uid                   types.UID
	namespace, name, user string
	resource              metav1.GroupVersionResource
	added                 []func(logr.Logger) logr.Logger
	depth                 int // frames between the caller and logr's entry, beyond this sink's own
}

// sink is the logger DefaultLogConstructor would have made, with what was added since.
func (s *lazyRequestSink) sink() logr.LogSink {
	var req admission.Request
	req.UID, req.Namespace, req.Name, req.Resource, req.UserInfo.Username = s.uid, s.namespace, s.name, s.resource, s.user
	l := admission.DefaultLogConstructor(s.base, &req)
	for _, add := range s.added {
		l = add(l)
	}
	sink := l.GetSink()
	// One frame more than logr expects: this sink's forwarding call.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(s.depth + 1)
	}
	return sink
}

func (s *lazyRequestSink) with(add func(logr.Logger) logr.Logger) *lazyRequestSink {
	c := *s
	c.added = append(append(make([]func(logr.Logger) logr.Logger, 0, len(s.added)+1), s.added...), add)
	return &c
}

// Init implements logr.LogSink; the real sink was initialized with base.
func (s *lazyRequestSink) Init(logr.RuntimeInfo) {}

// Enabled implements logr.LogSink. Whether a level is enabled does not depend on the values.
// level includes the base logger's own V level (lazyRequestLogger starts there).
func (s *lazyRequestSink) Enabled(level int) bool {
	sink := s.base.GetSink()
	return sink != nil && sink.Enabled(level)
}

// Info implements logr.LogSink.
func (s *lazyRequestSink) Info(level int, msg string, keysAndValues ...any) {
	if sink := s.sink(); sink != nil {
		sink.Info(level, msg, keysAndValues...)
	}
}

// Error implements logr.LogSink.
func (s *lazyRequestSink) Error(err error, msg string, keysAndValues ...any) {
	if sink := s.sink(); sink != nil {
		sink.Error(err, msg, keysAndValues...)
	}
}

// WithValues implements logr.LogSink. The list is copied, as a zap logger encodes it at once: a
// caller that reuses its slice must not change what was added. (Values that are pointers are
// read when a line is written.)
func (s *lazyRequestSink) WithValues(keysAndValues ...any) logr.LogSink {
	kv := slices.Clone(keysAndValues)
	return s.with(func(l logr.Logger) logr.Logger { return l.WithValues(kv...) })
}

// WithName implements logr.LogSink.
func (s *lazyRequestSink) WithName(name string) logr.LogSink {
	return s.with(func(l logr.Logger) logr.Logger { return l.WithName(name) })
}

// WithCallDepth implements logr.CallDepthLogSink.
func (s *lazyRequestSink) WithCallDepth(depth int) logr.LogSink {
	c := *s
	c.depth += depth
	return &c
}
