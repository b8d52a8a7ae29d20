package telemetry

import (
	"context"

	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span names and attributes of the job queue. A job's submit and its runs
// may be days apart and on other machines: each run starts a trace of its
// own, linked to the submit span, whose W3C trace context (traceparent,
// tracestate) is stored in the job.
//
//	job.submit  the submitter: storing the job (producer)
//	job.run     executor serve: one attempt, lease to result (consumer),
//	            linked to job.submit
const (
	SpanJobSubmit = "job.submit"
	SpanJobRun    = "job.run"

	KeyJobID      = attribute.Key("job.id")
	KeyJobAttempt = attribute.Key("job.attempt")
	KeyJobParent  = attribute.Key("job.parent")
)

// JobID is the job id attribute.
func JobID(id string) attribute.KeyValue { return KeyJobID.String(id) }

// JobAttempt is the attempt number attribute.
func JobAttempt(n int) attribute.KeyValue { return KeyJobAttempt.Int(n) }

// JobParent is the id of the job that submitted this one from inside.
func JobParent(id string) attribute.KeyValue { return KeyJobParent.String(id) }

// StartJobSubmit starts the "job.submit" span as a child of ctx's span and
// returns the trace context to store with the job (nil when the span is not
// sampled: there is nothing to link to).
func StartJobSubmit(ctx context.Context, attrs ...attribute.KeyValue) (context.Context, trace.Span, map[string]string) {
	ctx, span := tracer().Start(ctx, SpanJobSubmit, trace.WithSpanKind(trace.SpanKindProducer))
	natstrace.SetAttributes(span, attrs...)
	if !span.SpanContext().IsSampled() {
		return ctx, span, nil
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if len(carrier) == 0 {
		return ctx, span, nil
	}
	return ctx, span, carrier
}

// StartJobRun starts the "job.run" span of one attempt, in a trace of its
// own linked to the submit span found in stored (the job's trace context,
// nil or invalid for none). Values of stored are the job's, so hostile:
// the propagator accepts only a well-formed traceparent.
func StartJobRun(stored map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot()}
	if len(stored) > 0 {
		submit := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(stored)))
		if submit.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: submit, Attributes: []attribute.KeyValue{attribute.String("job.link", "submit")}}))
		}
	}
	ctx, span := tracer().Start(context.Background(), SpanJobRun, opts...)
	natstrace.SetAttributes(span, attrs...)
	return ctx, span
}
