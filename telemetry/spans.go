package telemetry

import (
	"context"
	"reflect"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Start options built once: passing them does not allocate.
var (
	clientKind   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	serverKind   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	internalKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

// tracerRef caches the tracer of the provider it came from.
type tracerRef struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

var cachedTracer atomic.Pointer[tracerRef]

// tracer returns this project's tracer from the current global provider.
// It follows otel.SetTracerProvider (tests swap providers) and costs one
// atomic load and one comparison when the provider is unchanged.
func tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if ref := cachedTracer.Load(); ref != nil && ref.tp == tp {
		return ref.t
	}
	t := tp.Tracer(natstrace.ScopeName)
	// Only a comparable provider can be recognised next time; comparing
	// two values of one non-comparable type would panic.
	if reflect.TypeOf(tp).Comparable() {
		cachedTracer.Store(&tracerRef{tp: tp, t: t})
	}
	return t
}

// StartServerSpan starts a server span for a request that arrived with
// header h, continuing the sender's trace if h carries one.
func StartServerSpan(h nats.Header, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := Extract(context.Background(), h)
	ctx, span := tracer().Start(ctx, name, serverKind...)
	natstrace.SetAttributes(span, attrs...)
	return ctx, span
}

// StartSpan starts an internal span as a child of the span in ctx.
func StartSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, name, internalKind...)
	natstrace.SetAttributes(span, attrs...)
	return ctx, span
}

// AcquireTrace follows one acquire inside the lease manager, from the
// request that created it to its grant, which may come much later and from
// another goroutine (a release elsewhere frees the slots). The zero value
// is valid and traces nothing, e.g. for queue entries restored after a
// restart. It is not safe for concurrent use: keep it with the request, under
// the lock that guards the request.
//
// The spans form, under the request's server span "lease.acquire":
//
//	lease.acquire.queued  from being queued until granted, cancelled or expired
//	lease.grant           the store write and the reply; a link points to
//	                      the queued span, whose end caused it
type AcquireTrace struct {
	parent trace.SpanContext // the acquire request's span
	queued trace.Span        // nil unless the request waited
}

// NewAcquireTrace remembers the span in ctx (the acquire's server span) as
// the parent of the spans to come. Without a span in ctx (tracing is off)
// it returns nil, which traces nothing and costs a waiting request no
// memory; every method works on nil.
func NewAcquireTrace(ctx context.Context) *AcquireTrace {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return &AcquireTrace{parent: sc}
}

// StartQueued starts the "lease.acquire.queued" span as a child of ctx's
// span. Call it when the request has to wait.
//
// A span that records nothing (tracing off, or not sampled) is not kept: a
// request may wait long, and deep queues hold many.
func (t *AcquireTrace) StartQueued(ctx context.Context, attrs ...attribute.KeyValue) {
	if t == nil {
		return
	}
	_, span := tracer().Start(ctx, natstrace.SpanAcquireQueued, internalKind...)
	if !span.IsRecording() {
		span.End()
		return
	}
	natstrace.SetAttributes(span, attrs...)
	t.queued = span
}

// EndQueued ends the queued span of a request that will not be granted,
// with its wire error code ("" for none). It does nothing if not queued.
func (t *AcquireTrace) EndQueued(code string) {
	if t == nil || t.queued == nil {
		return
	}
	if code != "" {
		natstrace.Fail(t.queued, code, "not granted: "+code)
	}
	t.queued.End()
	t.queued = nil
}

// StartGrant ends the queued span, if any, and starts "lease.grant" in the
// acquire's trace, linked to the queued span. End the returned span once
// the reply is sent.
func (t *AcquireTrace) StartGrant(attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := context.Background()
	if t == nil {
		return StartSpan(ctx, natstrace.SpanGrant, attrs...)
	}
	if t.parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, t.parent)
	}
	var ctxSpan trace.Span
	if t.queued != nil {
		queued := t.queued.SpanContext()
		t.queued.End()
		t.queued = nil
		if queued.IsValid() {
			ctx, ctxSpan = tracer().Start(ctx, natstrace.SpanGrant, trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithLinks(trace.Link{SpanContext: queued, Attributes: []attribute.KeyValue{attribute.String("lease.link", "queued")}}))
			natstrace.SetAttributes(ctxSpan, attrs...)
			return ctx, ctxSpan
		}
	}
	return StartSpan(ctx, natstrace.SpanGrant, attrs...)
}

// Meter returns this project's meter from the global meter provider
// (otelsetup.Setup installs the SDK's; until then the API's no-op one).
func Meter() metric.Meter {
	return otel.GetMeterProvider().Meter(natstrace.ScopeName)
}
