package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"github.com/slotlease/slotlease/test/harness"
)

// useRecorder makes the global tracer provider record every span until the
// test ends, and installs the propagator Setup installs.
func useRecorder(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	return harness.RecordSpans(t)
}

func endedByName(rec *tracetest.SpanRecorder) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		out[s.Name()] = append(out[s.Name()], s)
	}
	return out
}

// The trace context crosses a real NATS hop under the exact W3C header
// names, and the server's span continues the client's trace.
func TestTraceContextAcrossNATS(t *testing.T) {
	rec := useRecorder(t)
	srv := harness.StartServer(t)
	server := harness.Connect(t, srv.URL)
	client := harness.Connect(t, srv.URL)

	type seen struct {
		header nats.Header
		span   trace.SpanContext
	}
	got := make(chan seen, 1)
	_, err := server.Subscribe("lease.n1.gpu.acquire", func(msg *nats.Msg) {
		_, span := telemetry.StartServerSpan(msg.Header, natstrace.SpanAcquire, natstrace.Node("n1"), natstrace.Pool("gpu"))
		got <- seen{header: msg.Header, span: span.SpanContext()}
		span.End()
		_ = msg.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, span := natstrace.StartClient(context.Background(), otel.Tracer(natstrace.ScopeName), natstrace.SpanAcquire, natstrace.Pool("gpu"), natstrace.Slots(2))
	msg := &nats.Msg{Subject: "lease.n1.gpu.acquire", Data: []byte("{}")}
	natstrace.InjectMsg(ctx, otel.GetTextMapPropagator(), msg)
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.RequestMsgWithContext(rctx, msg); err != nil {
		t.Fatal(err)
	}
	span.End()

	var s seen
	select {
	case s = <-got:
	case <-rctx.Done():
		t.Fatal("the server never saw the request")
	}
	want := span.SpanContext()
	if v, ok := s.header["traceparent"]; !ok || len(v) != 1 {
		t.Fatalf("received header %v: want exactly one value under the exact name \"traceparent\"", s.header)
	}
	if _, ok := s.header["Traceparent"]; ok {
		t.Fatalf("received header %v has a canonicalized \"Traceparent\"", s.header)
	}
	if wantTP := "00-" + want.TraceID().String() + "-" + want.SpanID().String() + "-01"; s.header["traceparent"][0] != wantTP {
		t.Fatalf("traceparent = %q, want %q", s.header["traceparent"][0], wantTP)
	}
	if s.span.TraceID() != want.TraceID() {
		t.Fatalf("server span trace id %s, client's %s", s.span.TraceID(), want.TraceID())
	}

	spans := endedByName(rec)[natstrace.SpanAcquire]
	if len(spans) != 2 {
		t.Fatalf("recorded %d %s spans, want 2 (client and server)", len(spans), natstrace.SpanAcquire)
	}
	var cs, ss sdktrace.ReadOnlySpan
	for _, sp := range spans {
		switch sp.SpanKind() {
		case trace.SpanKindClient:
			cs = sp
		case trace.SpanKindServer:
			ss = sp
		}
	}
	if cs == nil || ss == nil {
		t.Fatalf("want one client and one server span, got kinds %v and %v", spans[0].SpanKind(), spans[1].SpanKind())
	}
	if ss.Parent().SpanID() != cs.SpanContext().SpanID() || !ss.Parent().IsRemote() {
		t.Fatalf("server span's parent %v, want the client span %v as a remote parent", ss.Parent(), cs.SpanContext())
	}
	if !hasAttr(ss.Attributes(), natstrace.Node("n1")) || !hasAttr(cs.Attributes(), natstrace.Slots(2)) {
		t.Fatalf("attributes missing: server %v, client %v", ss.Attributes(), cs.Attributes())
	}
}

// With no span in the context, a message gets no header at all.
func TestInjectMsgWithoutSpanAddsNoHeader(t *testing.T) {
	useRecorder(t)
	msg := &nats.Msg{Subject: "x"}
	natstrace.InjectMsg(context.Background(), otel.GetTextMapPropagator(), msg)
	if msg.Header != nil {
		t.Fatalf("header %v, want none", msg.Header)
	}
	// And with one, the header appears.
	ctx, span := natstrace.StartClient(context.Background(), otel.Tracer(natstrace.ScopeName), "x")
	defer span.End()
	natstrace.InjectMsg(ctx, otel.GetTextMapPropagator(), msg)
	if msg.Header.Get("traceparent") == "" {
		t.Fatalf("header %v, want a traceparent", msg.Header)
	}
}

func TestHeaderCarrier(t *testing.T) {
	h := nats.Header{}
	c := natstrace.HeaderCarrier(h)
	c.Set("traceparent", "a")
	c.Set("tracestate", "b")
	if _, ok := h["traceparent"]; !ok {
		t.Fatalf("Set wrote %v, want the key exactly as given", h)
	}
	if len(c.Keys()) != 2 {
		t.Fatalf("Keys = %v", c.Keys())
	}
	if c.Get("traceparent") != "a" || c.Get("missing") != "" {
		t.Fatalf("Get: %q %q", c.Get("traceparent"), c.Get("missing"))
	}

	// A sender that canonicalizes names is still understood.
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	canon := nats.Header{"Traceparent": {tp}}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), canon))
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote() {
		t.Fatalf("extracted %v from a canonicalized header", sc)
	}

	// Nil headers: nothing to read, nothing written, no panic.
	if sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), nil)); sc.IsValid() {
		t.Fatalf("extracted %v from a nil header", sc)
	}
	telemetry.Inject(context.Background(), nil)
}
