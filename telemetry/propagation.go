package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel"
)

// Inject writes the trace context of ctx into h with the global propagator.
// A nil h cannot be written to and is left alone: use natstrace.InjectMsg to give a
// message a header only when there is something to carry.
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, natstrace.HeaderCarrier(h))
}

// Extract returns ctx with the trace context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, natstrace.HeaderCarrier(h))
}
