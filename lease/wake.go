package lease

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// Waking the heartbeats. Two things make every lease of a Client renew at
// once instead of at its next TTL/3:
//
//   - its connection came back (a reconnect): a lease with fast release
//     must move to the new connection within about half its grace
//     (liveness.go), and any lease's renewal sent while disconnected may
//     have been lost;
//   - its node's manager announced a clean stop (EventStopping, stop.go):
//     a renewal now starts the holder's deadline a full TTL (less the
//     margin) ahead, which a restart of the manager then has.
//
// The hooks are set up with the Client's first lease and removed by Close.
type wake struct {
	mu     sync.Mutex
	ch     chan struct{}      // closed and replaced by fire
	hooked bool               // the hooks below were set up
	sub    *nats.Subscription // the node's stop notices
	status chan nats.Status   // the connection's reconnects
	done   chan struct{}      // closed when the status goroutine returned
}

// wait returns a channel that closes at the next wake-up.
func (w *wake) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// fire wakes every heartbeat waiting.
func (w *wake) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// hookWake sets up the wake-ups for c's leases, once. A subscription that
// fails leaves only the reconnect wake-up: a holder then keeps the
// deadline of its last renewal through a manager restart.
func (c *Client) hookWake() {
	c.mu.Lock() // before w.mu, as in Close
	defer c.mu.Unlock()
	w := &c.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hooked || c.closed {
		return
	}
	w.hooked = true
	if sub, err := c.nc.Subscribe(EventFilter(c.prefix, c.node, "", EventStopping), func(*nats.Msg) { w.fire() }); err == nil {
		w.sub = sub
	}
	w.status = c.nc.StatusChanged(nats.CONNECTED)
	w.done = make(chan struct{})
	go func(status <-chan nats.Status, done chan struct{}) {
		defer close(done)
		for range status {
			w.fire()
		}
	}(w.status, w.done)
}

// unhook removes the hooks and waits for the status goroutine (Close).
func (w *wake) unhook(nc *nats.Conn) {
	w.mu.Lock()
	sub, status, done := w.sub, w.status, w.done
	w.sub, w.status, w.done = nil, nil, nil
	w.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	if status != nil {
		nc.RemoveStatusListener(status) // closes it: the goroutine returns
		<-done
	}
}
