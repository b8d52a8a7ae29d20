package natstrace

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier carries W3C trace context in NATS message headers.
//
// It reads and writes the map directly, so header names stay exactly as the
// propagator writes them ("traceparent", "tracestate", "baggage"): NATS
// headers are case-sensitive, and a receiver written in another language
// looks for the lowercase names. Get falls back to a case-insensitive match,
// so a "Traceparent" written by a canonicalizing sender is still understood.
type HeaderCarrier nats.Header

var (
	_ propagation.TextMapCarrier = HeaderCarrier(nil)
	_ propagation.ValuesGetter   = HeaderCarrier(nil)
	_ propagation.TextMapCarrier = msgCarrier{}
)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c.Values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Values returns every value of key.
func (c HeaderCarrier) Values(key string) []string {
	if v, ok := c[key]; ok {
		return v
	}
	// Only reached when the exact name is absent, which on the hot path
	// (no trace context sent) means an empty or small header.
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// Set replaces key's values with value, under exactly the name given. It
// panics on a nil carrier, like any nil map write; Inject checks first.
func (c HeaderCarrier) Set(key, value string) {
	c[key] = []string{value}
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectMsg writes the trace context of ctx into msg's header with p,
// creating the header only if there is something to write. With no span in
// ctx the message is left as it was, so publishing stays a plain PUB.
func InjectMsg(ctx context.Context, p propagation.TextMapPropagator, msg *nats.Msg) {
	p.Inject(ctx, msgCarrier{msg})
}

// msgCarrier writes into a message's header, creating it on the first Set.
// It is one pointer wide, so passing it as an interface does not allocate.
type msgCarrier struct{ msg *nats.Msg }

func (c msgCarrier) Get(key string) string { return HeaderCarrier(c.msg.Header).Get(key) }

func (c msgCarrier) Set(key, value string) {
	if c.msg.Header == nil {
		c.msg.Header = nats.Header{}
	}
	HeaderCarrier(c.msg.Header).Set(key, value)
}

func (c msgCarrier) Keys() []string { return HeaderCarrier(c.msg.Header).Keys() }
