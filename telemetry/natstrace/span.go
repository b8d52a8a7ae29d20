package natstrace

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// SetAttributes adds attrs to a recording span. Attributes are set after
// the start rather than passed as a start option: on a span that records
// nothing this costs nothing, not even the variadic slice, which does not
// escape (the copy made for a recording span does).
func SetAttributes(span trace.Span, attrs ...attribute.KeyValue) {
	if len(attrs) > 0 && span.IsRecording() {
		span.SetAttributes(slices.Clone(attrs)...)
	}
}

// Fail marks span as failed with a wire error code and message.
func Fail(span trace.Span, code, message string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(Code(code))
	span.SetStatus(codes.Error, message)
}

// End ends span, recording err as its failure if not nil:
//
//	ctx, span := natstrace.StartClient(ctx, tracer, natstrace.SpanRenew)
//	defer func() { natstrace.End(span, err) }()
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

var clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// StartClient starts a client span (a request this process sends) from t as
// a child of the span in ctx. Send the request with the returned context
// through InjectMsg so the server continues the trace.
func StartClient(ctx context.Context, t trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := t.Start(ctx, name, clientKind...)
	SetAttributes(span, attrs...)
	return ctx, span
}
