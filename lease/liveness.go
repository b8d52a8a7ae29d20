package lease

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The holder's side of fast release (disconnect.go). A lease granted with
// a disconnect grace G is bound to the connection its request came on. The
// manager frees it G after that connection's server confirmed a close made
// at the holder's end ("Client Closed", "Read Error", "Write Error"),
// unless a renewal moved the lease to another connection first. A close
// the server made itself (stopping, restarting, kicking, timing out a
// stale or slow client) frees nothing: only the TTL ends such a lease.
//
// A live holder's end closes a connection only when its own client does
// (Close, a reconnect it decided on, its own stale-connection or write
// timeout), so the holder keeps two clocks per connection, both from the
// send time of the last PING the server answered on it (the server
// answered it before it saw any close):
//
//   - dropped: once its client is no longer connected on the lease's
//     connection (reconnecting, reconnected elsewhere, closed), the lease
//     is lost at that PING + 3/4 G unless a renewal sent on the new
//     connection moved it there first. The manager frees no earlier than
//     G after the close it confirmed, and the close came after the PING.
//     A drop by a server that, with its manager, said it was stopping
//     (ServerStopping, stop.go) does not count: no manager can have that
//     server confirm a close any more; nor does any drop on a connection
//     only its server can close (WithServerOnlyDrops: loopback to
//     leasemgr's embedded server, a program that closes nothing itself).
//   - silent: while the connection stays open but unanswered (a stalled
//     server or manager, a partition), the lease is lost at that PING +
//     maxSilence, long after any stall a restart or a pause causes, and
//     before the holder's own client can have closed the connection on
//     its own (MaxPingsOut x PingInterval, FlusherTimeout) or the server's
//     TCP stack can have given up on an unreachable holder as a "Read
//     Error" (minutes of retransmission; nats-server turns TCP keepalive
//     off).
//
// The TTL deadline applies too, whichever comes first. While it holds such
// leases, a Client pings its server every G/8, so the drop clock leaves
// the holder at least about G/2 to move a lease; it renews at once when it
// reconnects (wake.go). LossGrace is G/8: the work stops in well under the
// quarter of the grace left before the manager can free the slots.

// liveDeadline is how long after the last answered PING a lease with
// disconnect grace g stays held once its connection dropped.
func liveDeadline(g time.Duration) time.Duration { return g - g/4 }

// maxSilence bounds the silent clock: far beyond a restart or a stall,
// far within the minutes a server's TCP stack retransmits to an
// unreachable peer before it reports the connection broken (RFC 1122
// asks for at least 100 s).
const maxSilence = 30 * time.Second

// silenceLimit is maxSilence, or less if the connection's own client
// would close a silent connection sooner: nats.go does after MaxPingsOut
// unanswered PINGs sent PingInterval apart, or a write blocked for
// FlusherTimeout, and that close would count as the holder's.
func silenceLimit(o *nats.Options) time.Duration {
	d := maxSilence
	if o.PingInterval > 0 && o.MaxPingsOut > 0 {
		d = min(d, o.PingInterval*time.Duration(o.MaxPingsOut))
	}
	if o.FlusherTimeout > 0 {
		d = min(d, o.FlusherTimeout)
	}
	return d
}

// liveness pings a Client's server while leases with fast release need it.
type liveness struct {
	nc      *nats.Conn
	silence time.Duration // silenceLimit of nc's options
	// serverDrops: every drop of nc is its server's doing
	// (WithServerOnlyDrops), so the dropped clock never runs.
	serverDrops bool

	mu       sync.Mutex
	users    int                // leases that need it
	interval time.Duration      // the shortest any of them needs
	last     map[conn]time.Time // send time of the last answered PING, per connection
	// stopping holds the servers said to stop with their manager
	// (ServerStopping), with when it was said.
	stopping map[string]time.Time
	// lameDucks holds the connections whose server said it is in lame
	// duck mode (lameduck.go), with when it was said.
	lameDucks map[conn]time.Time
	stop      chan struct{} // closes to end run; nil when not running
	done      chan struct{} // closed when run has returned
}

// maxLiveConns bounds the connections whose last PING is remembered: the
// current one and a few before it, whose leases are being moved. The same
// bound holds for the servers said to be stopping.
const maxLiveConns = 4

func newLiveness(nc *nats.Conn) liveness {
	return liveness{nc: nc, silence: silenceLimit(&nc.Opts)}
}

// identity is the connection nc is on now (zero while disconnected).
func (v *liveness) identity() conn {
	server := v.nc.ConnectedServerId()
	id, err := v.nc.GetClientID()
	if server == "" || err != nil {
		return conn{}
	}
	return conn{server, id}
}

// deadline is when a lease with disconnect grace g that is bound to c must
// be given up, by c's clocks (the silent one, and the dropped one once c
// is not the connection nc is on). since, if later than c's last answered
// PING, dates c instead: the send time of a renewal that may have bound the
// lease to c (lameduck.go).
func (v *liveness) deadline(c conn, g time.Duration, since time.Time) time.Time {
	v.mu.Lock()
	last := v.last[c]
	if since.After(last) {
		last = since
	}
	_, stopping := v.stopping[c.server]
	v.mu.Unlock()
	d := last.Add(v.silence)
	if !stopping && !v.serverDrops && v.identity() != c {
		d = minTime(d, last.Add(liveDeadline(g)))
	}
	return d
}

// dropped reports whether the lease bound to c is on the dropped clock.
func (v *liveness) dropped(c conn) bool {
	v.mu.Lock()
	_, stopping := v.stopping[c.server]
	v.mu.Unlock()
	return c.known() && !stopping && !v.serverDrops && v.identity() != c
}

// serverStopping notes a manager's word that server stops with it.
func (v *liveness) serverStopping(server string) {
	if server == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	remember(&v.stopping, server)
}

// remember notes k in *m with the time now, making the map if needed, and
// prunes it.
func remember[K comparable](m *map[K]time.Time, k K) {
	if *m == nil {
		*m = make(map[K]time.Time)
	}
	(*m)[k] = time.Now()
	prune(*m)
}

// prune drops the oldest entries of m beyond maxLiveConns.
func prune[K comparable](m map[K]time.Time) {
	for len(m) > maxLiveConns {
		var oldest K
		first := true
		for k, t := range m {
			if first || t.Before(m[oldest]) {
				oldest, first = k, false
			}
		}
		delete(m, oldest)
	}
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
			// it could no longer help a lease whose connection drops.
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
	prune(v.last)
}

// lastAnswered is the send time of the last PING answered on c (zero if
// none is known).
func (v *liveness) lastAnswered(c conn) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last[c]
}
