package jetstream

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// Events publishes lease events on core NATS subjects
// <prefix>.events.<node>.<pool>.<kind>. Publishing is buffered by the
// connection, so it does not wait on the network.
type Events struct {
	nc     *nats.Conn
	prefix string
	log    *slog.Logger
}

var _ manager.EventSink = (*Events)(nil)

// NewEvents returns a publisher for prefix.
func NewEvents(nc *nats.Conn, prefix string, log *slog.Logger) *Events {
	if log == nil {
		log = slog.Default()
	}
	return &Events{nc: nc, prefix: prefix, log: log}
}

// Publish sends ev. A failure is logged: events are for watching, and a
// lease transition must not fail because nobody could be told about it.
func (e *Events) Publish(ev lease.Event) {
	b := eventBuffers.Get()
	data := manager.AppendEvent(*b, &ev)
	if err := e.nc.Publish(lease.EventSubject(e.prefix, ev.Node, ev.Pool, ev.Kind), data); err != nil {
		e.log.Warn("publishing a lease event", "kind", ev.Kind, "pool", ev.Pool, "err", err)
	}
	eventBuffers.Put(b, data)
}

var eventBuffers manager.Buffers
