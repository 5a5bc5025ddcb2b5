package webhook

import (
	"slices"

	"github.com/go-logr/logr"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// requestLogger is the LogConstructor of daemonguard's endpoints: controller-runtime's
// DefaultLogConstructor, the same fields for the same request, added to a line only when one is
// written. controller-runtime builds the request's logger twice per review, and a zap logger
// encodes the fields of WithValues at once (the request's resource by reflection): about 40
// allocations per review, for lines that at the default level are never written (controller-
// runtime logs each request at V(5)). What is written is unchanged (TestRequestLoggerWritesWhat
// TheDefaultWrites).
func requestLogger(base logr.Logger, req *cradmission.Request) logr.Logger {
	sink := base.GetSink()
	if sink == nil {
		return cradmission.DefaultLogConstructor(base, req)
	}
	return cradmission.DefaultLogConstructor(base.WithSink(deferredValues{LogSink: sink}), req)
}

// deferredValues is a LogSink that keeps the key/value pairs given to WithValues and hands them to
// the sink it wraps when a line is written, which the Logger does only at an enabled level.
type deferredValues struct {
	logr.LogSink
	values []any
}

// WithValues implements logr.LogSink.
func (d deferredValues) WithValues(keysAndValues ...any) logr.LogSink {
	return deferredValues{LogSink: d.LogSink, values: append(slices.Clip(d.values), keysAndValues...)}
}

// WithName implements logr.LogSink.
func (d deferredValues) WithName(name string) logr.LogSink {
	return deferredValues{LogSink: d.LogSink.WithName(name), values: d.values}
}

// WithCallDepth implements logr.CallDepthLogSink, so that a sink that records the caller still
// names the Logger's caller.
func (d deferredValues) WithCallDepth(depth int) logr.LogSink {
	if s, ok := d.LogSink.(logr.CallDepthLogSink); ok {
		return deferredValues{LogSink: s.WithCallDepth(depth), values: d.values}
	}
	return d
}

// Info implements logr.LogSink.
func (d deferredValues) Info(level int, msg string, keysAndValues ...any) {
	d.withValues().Info(level, msg, keysAndValues...)
}

// Error implements logr.LogSink.
func (d deferredValues) Error(err error, msg string, keysAndValues ...any) {
	d.withValues().Error(err, msg, keysAndValues...)
}

// withValues is the wrapped sink with the kept pairs, one frame deeper for this sink's own call.
func (d deferredValues) withValues() logr.LogSink {
	s := d.LogSink
	if cd, ok := s.(logr.CallDepthLogSink); ok {
		s = cd.WithCallDepth(1)
	}
	if len(d.values) == 0 {
		return s
	}
	return s.WithValues(d.values...)
}
