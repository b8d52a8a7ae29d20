package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
	"github.com/slotlease/slotlease/test/harness"
)

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}

// An acquire that waits: queued and grant spans hang under the request's
// server span, and the grant links to the queued span it ended.
func TestAcquireTraceQueuedThenGranted(t *testing.T) {
	rec := useRecorder(t)
	ctx, req := telemetry.StartServerSpan(nil, natstrace.SpanAcquire)
	tr := telemetry.NewAcquireTrace(ctx)
	tr.StartQueued(ctx, natstrace.Position(3))
	req.End() // the handler returns long before the grant

	_, grant := tr.StartGrant(natstrace.Token(42))
	natstrace.End(grant, nil)
	tr.EndQueued("wait_expired") // after StartGrant: nothing left to end

	spans := endedByName(rec)
	if len(spans[natstrace.SpanAcquireQueued]) != 1 || len(spans[natstrace.SpanGrant]) != 1 {
		t.Fatalf("ended spans %v, want one queued and one grant", spans)
	}
	queued, granted := spans[natstrace.SpanAcquireQueued][0], spans[natstrace.SpanGrant][0]
	reqID := req.SpanContext().SpanID()
	if queued.Parent().SpanID() != reqID || granted.Parent().SpanID() != reqID {
		t.Fatalf("parents: queued %s, grant %s, want the request span %s", queued.Parent().SpanID(), granted.Parent().SpanID(), reqID)
	}
	if granted.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Fatal("grant span is not in the acquire's trace")
	}
	links := granted.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != queued.SpanContext().SpanID() {
		t.Fatalf("grant links %v, want one to the queued span %s", links, queued.SpanContext().SpanID())
	}
	if queued.EndTime().After(granted.StartTime()) {
		t.Fatal("the queued span ends after the grant started")
	}
	if queued.Status().Code == codes.Error {
		t.Fatalf("a granted request's queued span has status %v", queued.Status())
	}
	if !hasAttr(queued.Attributes(), natstrace.Position(3)) || !hasAttr(granted.Attributes(), natstrace.Token(42)) {
		t.Fatalf("attributes: queued %v, grant %v", queued.Attributes(), granted.Attributes())
	}
}

// An acquire granted at once has no queued span and no link; one that
// expires while queued ends its queued span as failed.
func TestAcquireTraceImmediateAndExpired(t *testing.T) {
	rec := useRecorder(t)
	ctx, req := telemetry.StartServerSpan(nil, natstrace.SpanAcquire)
	now := telemetry.NewAcquireTrace(ctx)
	_, grant := now.StartGrant()
	grant.End()

	waits := telemetry.NewAcquireTrace(ctx)
	waits.StartQueued(ctx)
	waits.EndQueued("wait_expired")
	req.End()

	spans := endedByName(rec)
	g := spans[natstrace.SpanGrant]
	if len(g) != 1 || len(g[0].Links()) != 0 || g[0].Parent().SpanID() != req.SpanContext().SpanID() {
		t.Fatalf("immediate grant spans %v: want one, child of the request, no links", g)
	}
	q := spans[natstrace.SpanAcquireQueued]
	if len(q) != 1 || q[0].Status().Code != codes.Error || !hasAttr(q[0].Attributes(), natstrace.Code("wait_expired")) {
		t.Fatalf("expired queued spans %v: want one, failed with lease.code", q)
	}

	// The zero value, and the nil trace made without a span in ctx, trace
	// nothing of their own and do not panic.
	var zero telemetry.AcquireTrace
	zero.EndQueued("cancelled")
	_, s := zero.StartGrant()
	s.End()
	none := telemetry.NewAcquireTrace(context.Background())
	if none != nil {
		t.Fatalf("trace without a span in ctx: %+v, want nil", none)
	}
	none.StartQueued(context.Background())
	none.EndQueued("cancelled")
	_, s = none.StartGrant()
	s.End()
}

func TestEndRecordsError(t *testing.T) {
	rec := useRecorder(t)
	_, span := natstrace.StartClient(context.Background(), otel.Tracer(natstrace.ScopeName), natstrace.SpanRenew)
	natstrace.End(span, errors.New("lease: lease_not_found"))
	_, ok := telemetry.StartSpan(context.Background(), natstrace.SpanRelease)
	natstrace.End(ok, nil)
	spans := endedByName(rec)
	if s := spans[natstrace.SpanRenew]; len(s) != 1 || s[0].Status().Code != codes.Error || len(s[0].Events()) != 1 {
		t.Fatalf("failed span %v: want error status and an exception event", s)
	}
	if s := spans[natstrace.SpanRelease]; len(s) != 1 || s[0].Status().Code == codes.Error {
		t.Fatalf("successful span %v", s)
	}
}

// The span helpers, with the no-op provider, allocate no more than the bare
// no-op API does for a span with no attributes.
func TestNoopSpansAllocateNoMoreThanTheAPI(t *testing.T) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	h := nats.Header{"Other": {"x"}}
	tr := otel.GetTracerProvider().Tracer("bare")
	bare := testing.AllocsPerRun(1000, func() {
		_, span := tr.Start(context.Background(), natstrace.SpanAcquire)
		span.End()
	})
	msg := &nats.Msg{}
	ours := testing.AllocsPerRun(1000, func() {
		ctx, span := telemetry.StartServerSpan(h, natstrace.SpanAcquire, natstrace.Node("n1"), natstrace.Pool("gpu"), natstrace.Slots(1), natstrace.RequestID("r1"))
		natstrace.InjectMsg(ctx, otel.GetTextMapPropagator(), msg)
		natstrace.Fail(span, "x", "y")
		natstrace.End(span, nil)
	})
	if ours > bare {
		t.Fatalf("helpers allocate %.0f per span, the bare no-op API %.0f", ours, bare)
	}
}

// BenchmarkServerSpanNoop is the cost of tracing a request when tracing is
// off: StartServerSpan and End after a Setup that found no exporter.
func BenchmarkServerSpanNoop(b *testing.B) {
	setupNoExporter(b)
	var h nats.Header // requests without trace context
	b.ReportAllocs()
	for b.Loop() {
		_, span := telemetry.StartServerSpan(h, natstrace.SpanAcquire, natstrace.Node("n1"), natstrace.Pool("gpu"), natstrace.Slots(1))
		span.End()
	}
}

func setupNoExporter(b *testing.B) {
	harness.ClearOTelEnv(b)
	shutdown, err := otelsetup.Setup(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = shutdown(context.Background()) })
}

// BenchmarkServerSpanNoopRemoteParent: the same with an incoming
// traceparent (the executor traces, this manager does not).
func BenchmarkServerSpanNoopRemoteParent(b *testing.B) {
	setupNoExporter(b)
	h := nats.Header{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	b.ReportAllocs()
	for b.Loop() {
		_, span := telemetry.StartServerSpan(h, natstrace.SpanAcquire, natstrace.Node("n1"), natstrace.Pool("gpu"), natstrace.Slots(1))
		span.End()
	}
}

// BenchmarkBareNoopAPI is the floor the helpers are measured against: the
// no-op tracer's Start and End with no attributes, no header, no propagator.
func BenchmarkBareNoopAPI(b *testing.B) {
	setupNoExporter(b)
	tr := otel.GetTracerProvider().Tracer("bare")
	b.ReportAllocs()
	for b.Loop() {
		_, span := tr.Start(context.Background(), natstrace.SpanAcquire)
		span.End()
	}
}
