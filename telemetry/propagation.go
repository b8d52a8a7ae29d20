package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel"
)

// Inject writes the trace context of ctx into h with the global propagator.
// A nil h cannot be written to and is left alone: use InjectMsg to give a
// message a header only when there is something to carry.
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, natstrace.HeaderCarrier(h))
}

// InjectMsg writes the trace context of ctx into msg's header, creating the
// header only if there is something to write. With no span in ctx the
// message is left as it was, so publishing stays a plain PUB.
func InjectMsg(ctx context.Context, msg *nats.Msg) {
	natstrace.InjectMsg(ctx, otel.GetTextMapPropagator(), msg)
}

// Extract returns ctx with the trace context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, natstrace.HeaderCarrier(h))
}
