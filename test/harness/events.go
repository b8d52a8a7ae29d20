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
