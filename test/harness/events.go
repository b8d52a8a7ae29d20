package harness

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
)

// EventReader reads lease events from a subscription one at a time. A
// message holds every event of its subject since the one before
// (lease.DecodeEvents), so one message may hold several.
type EventReader struct {
	sub     *nats.Subscription
	subject string
	held    []lease.Event
}

// ReadEvents reads the events sub receives.
func ReadEvents(sub *nats.Subscription) *EventReader { return &EventReader{sub: sub} }

// Next returns the next event and the subject it came on, waiting at most
// timeout for a message.
func (r *EventReader) Next(timeout time.Duration) (lease.Event, string, error) {
	for len(r.held) == 0 {
		msg, err := r.sub.NextMsg(timeout)
		if err != nil {
			return lease.Event{}, "", err
		}
		evs, err := lease.DecodeEvents(msg.Data)
		if err != nil {
			return lease.Event{}, msg.Subject, fmt.Errorf("events on %s: %w", msg.Subject, err)
		}
		r.subject, r.held = msg.Subject, evs
	}
	ev := r.held[0]
	r.held = r.held[1:]
	return ev, r.subject, nil
}

// PerKind groups items by the event kind each stands for, keeping their
// order within a kind. Events keep their order only within a subject, and
// the kind is the subject's last token (docs/protocol.md, section 6): a
// batch holds the events of one subject, and two batches pending together
// go out in the order of their first events. A test that expects a
// sequence of several kinds compares its events kind by kind.
func PerKind[T any](items []T, kind func(T) lease.EventKind) map[lease.EventKind][]T {
	by := make(map[lease.EventKind][]T)
	for _, it := range items {
		k := kind(it)
		by[k] = append(by[k], it)
	}
	return by
}
