package lease

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The holder's side of fast release (disconnect.go). A lease granted with
// a disconnect grace G is bound to the connection its request came on, and
// the manager frees it G after it hears that connection closed. So the
// holder must stop its work by then, and it knows when the connection was
// last certainly open: when it sent a PING the server answered on it (the
// server answers before it closes a connection, and announces the close
// after). While it holds such leases, a Client pings its server every G/8;
// each lease's deadline is then at most
//
//	send time of the last answered PING on the lease's connection + G*3/4
//
// which leaves G/4 for the holder's work to stop (LossGrace is G/8) before
// the manager can free the slots. After a reconnect the new connection's
// PINGs do not count for a lease until a renewal sent on it has moved the
// lease there; the lease renews at once when it sees the connection change.

// liveDeadline is how long after the last answered PING a lease with
// disconnect grace g stays held.
func liveDeadline(g time.Duration) time.Duration { return g - g/4 }

// liveness pings a Client's server while leases with fast release need it.
type liveness struct {
	nc *nats.Conn

	mu       sync.Mutex
	users    int                // leases that need it
	interval time.Duration      // the shortest any of them needs
	last     map[conn]time.Time // send time of the last answered PING, per connection
	stop     chan struct{}      // closes to end run; nil when not running
	done     chan struct{}      // closed when run has returned
}

// maxLiveConns bounds the connections whose last PING is remembered: the
// current one and a few before it, whose leases are being moved.
const maxLiveConns = 4

// identity is the connection nc is on now (zero while disconnected).
func (v *liveness) identity() conn {
	server := v.nc.ConnectedServerId()
	id, err := v.nc.GetClientID()
	if server == "" || err != nil {
		return conn{}
	}
	return conn{server, id}
}

// join registers a lease with disconnect grace g, starting the pings.
func (v *liveness) join(g time.Duration) {
	every := min(max(g/8, 10*time.Millisecond), 250*time.Millisecond)
	v.mu.Lock()
	v.users++
	if v.stop != nil && every >= v.interval {
		v.mu.Unlock()
		return
	}
	// Not running, or too slowly for this lease: (re)start.
	stop, done := v.stop, v.done
	v.interval = every
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	go v.run(every, v.stop, v.done)
	v.mu.Unlock()
	halt(stop, done)
}

// leave unregisters a lease; the pings stop with the last one.
func (v *liveness) leave() {
	v.mu.Lock()
	if v.users > 0 {
		v.users--
	}
	var stop, done chan struct{}
	if v.users == 0 {
		stop, done = v.stop, v.done
		v.stop, v.done = nil, nil
	}
	v.mu.Unlock()
	halt(stop, done)
}

// close stops the pings for good (Client.Close).
func (v *liveness) close() {
	v.mu.Lock()
	stop, done := v.stop, v.done
	v.stop, v.done, v.users = nil, nil, 0
	v.mu.Unlock()
	halt(stop, done)
}

// halt ends a run, if any, and waits for it.
func halt(stop, done chan struct{}) {
	if stop != nil {
		close(stop)
		<-done
	}
}

func (v *liveness) run(every time.Duration, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			// A slow answer still counts (by its send time), up to when
			// it could no longer help: 6 intervals, the live deadline.
			v.ping(6 * every)
		}
	}
}

// ping sends a PING and, if the server answers within timeout on the same
// connection, records its send time for that connection.
func (v *liveness) ping(timeout time.Duration) {
	c := v.identity()
	if !c.known() {
		return
	}
	sent := time.Now()
	if v.nc.FlushTimeout(timeout) != nil || v.identity() != c {
		return
	}
	v.record(c, sent)
}

// record notes that the server answered a PING sent on c at sent.
func (v *liveness) record(c conn, sent time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last == nil {
		v.last = make(map[conn]time.Time)
	}
	if sent.After(v.last[c]) {
		v.last[c] = sent
	}
	for len(v.last) > maxLiveConns {
		var oldest conn
		for k, t := range v.last {
			if !oldest.known() || t.Before(v.last[oldest]) {
				oldest = k
			}
		}
		delete(v.last, oldest)
	}
}

// lastAnswered is the send time of the last PING answered on c (zero if
// none is known).
func (v *liveness) lastAnswered(c conn) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last[c]
}
