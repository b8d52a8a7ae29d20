package lease

import (
	"errors"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// tracing is where a client's spans come from and how its requests carry
// the trace context.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// defaultTracing makes no spans of its own and writes the caller's W3C
// trace context and baggage into every request, so the manager's spans
// still join the caller's trace.
var defaultTracing = tracing{
	tracer: noop.NewTracerProvider().Tracer(natstrace.ScopeName),
	prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
}

// WithTracing makes the client record its own spans (lease.acquire,
// lease.renew and lease.release, of client kind) with tp, and write the
// trace context into its requests with p (nil keeps the default: W3C trace
// context and baggage). A program with an OpenTelemetry SDK installed
// passes otel.GetTracerProvider() and otel.GetTextMapPropagator().
//
// Without it the client records no spans, and its requests still carry
// the trace context of the caller's context: the manager's spans join the
// caller's trace either way. The package does not read OpenTelemetry's
// global provider itself, so a program that uses it pulls in the tracing
// API only, not the global provider's package.
func WithTracing(tp trace.TracerProvider, p propagation.TextMapPropagator) ClientOption {
	return func(c *Client) error {
		if tp == nil {
			return errors.New("lease: WithTracing needs a tracer provider")
		}
		c.tracing.tracer = tp.Tracer(natstrace.ScopeName)
		if p != nil {
			c.tracing.prop = p
		}
		return nil
	}
}
