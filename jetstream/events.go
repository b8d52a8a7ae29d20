package jetstream

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// EventLinger is how often, at most, events of one subject go out while
// they keep coming: the first event after a quiet spell goes out at once,
// and the events that follow within EventLinger of a message go out
// together, as one message, EventLinger after it. A busy pool then costs a
// few event messages per EventLinger instead of three or four per lease
// cycle, and a watcher sees an event at most EventLinger late.
const EventLinger = 10 * time.Millisecond

// maxBatchBytes bounds one event message, well under NATS's smallest
// usual max_payload (1 MB): a subject with this much pending goes out at
// once.
const maxBatchBytes = 64 << 10

// Events publishes lease events on core NATS subjects
// <prefix>.events.<node>.<pool>.<kind>. Each message is a JSON array of
// the events of its subject since the previous message, oldest first
// (lease.DecodeEvents reads it). Publishing is buffered, so it does not
// wait on the network; Flush sends what is pending.
type Events struct {
	nc     *nats.Conn
	prefix string
	log    *slog.Logger
	linger time.Duration

	mu      sync.Mutex
	pending map[string][]byte // subject: "[" and its events, comma separated
	order   []string          // the pending subjects, in the order of their first event
	last    time.Time         // when the last batch went out
	timer   *time.Timer       // the next batch, if one is due
	sending sync.WaitGroup    // the timer's send in flight, if any
}

var (
	_ manager.EventSink = (*Events)(nil)
	_ manager.Flusher   = (*Events)(nil)
)

// NewEvents returns a publisher for prefix.
func NewEvents(nc *nats.Conn, prefix string, log *slog.Logger) *Events {
	if log == nil {
		log = slog.Default()
	}
	return &Events{nc: nc, prefix: prefix, log: log, linger: EventLinger, pending: make(map[string][]byte)}
}

// Publish queues ev for its subject's next message. A failure to send is
// logged: events are for watching, and a lease transition must not fail
// because nobody could be told about it.
func (e *Events) Publish(ev lease.Event) {
	subject := lease.EventSubject(e.prefix, ev.Node, ev.Pool, ev.Kind)
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.pending[subject]
	if ok {
		b = append(b, ',')
	} else {
		b = append(*eventBuffers.Get(), '[')
		e.order = append(e.order, subject)
	}
	b = manager.AppendEvent(b, &ev)
	e.pending[subject] = b
	if len(b) >= maxBatchBytes {
		e.sendLocked() // large enough to go now
		return
	}
	if e.timer == nil {
		e.sending.Add(1)
		e.timer = time.AfterFunc(max(time.Until(e.last.Add(e.linger)), 0), e.send)
	}
}

// send is the timer's: it sends every pending message.
func (e *Events) send() {
	defer e.sending.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.timer = nil
	e.sendLocked()
}

// sendLocked sends every pending message, in the order of their first
// events.
func (e *Events) sendLocked() {
	for _, subject := range e.order {
		data := append(e.pending[subject], ']')
		if err := e.nc.Publish(subject, data); err != nil {
			e.log.Warn("publishing lease events", "subject", subject, "err", err)
		}
		eventBuffers.Put(new([]byte), data)
		delete(e.pending, subject)
	}
	clear(e.order)
	e.order = e.order[:0]
	e.last = time.Now()
}

// Flush sends what is pending now, and returns once no batch is on its
// way; the manager calls it as it closes.
func (e *Events) Flush() {
	e.mu.Lock()
	if e.timer != nil && e.timer.Stop() {
		e.timer = nil
		e.sending.Done() // its send will not run
	}
	e.sendLocked()
	e.mu.Unlock()
	e.sending.Wait()
}

// eventBuffers recycles the messages' buffers.
var eventBuffers manager.Buffers
