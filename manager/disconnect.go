package manager

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// Fast release. A holder names its NATS connection in every acquire and
// renewal (conn_server, conn_id), and the lease is bound to it. The NATS
// server publishes an advisory when a client connection closes; a manager
// that hears them (Config.DisconnectEvents) asks the connection's
// server to confirm the close (closecheck.go: an advisory can be forged),
// and frees a lease bound to it DisconnectGrace after the confirmation,
// unless the holder moved the lease to a new connection first (a renewal
// sent on it). So a holder that crashed, was killed or lost its host gives
// its slots back in under a second instead of a TTL.
//
// Only a close made at the holder's end frees anything: the server must
// have recorded "Client Closed" (the holder's host closed the socket: its
// process exited, or its client closed the connection), "Read Error" or
// "Write Error" (the holder's end reset it). A connection the server
// closed itself (it is shutting down, kicked the client, found it stale or
// too slow, or its credentials expired) says nothing about the holder,
// which may be working and about to reconnect: such a lease is left to its
// holder's renewals and to the TTL. That is what lets work outlive a
// restart or a stall of the NATS server (docs/guarantees.md, "Fast
// release").
//
// It never frees slots whose holder may still be working, because the
// holder keeps its own clock (liveness.go): a live holder's end closes a
// connection only when its own client does, which it sees at once; it then
// has 3/4 of the grace from the last PING the server answered on the
// connection to move its leases to a new one, or it stops its work. The
// server answered that PING before it saw the close, and the manager hears
// of the close after that, so the holder stops at least a quarter of the
// grace before the manager frees its slots. A holder that did not say which
// connection it uses, or a record written without the grace, is not freed
// this way: the TTL alone ends it.

// holderClosed reports whether reason, the server's record of why it
// closed a client connection, says the client's end closed it: EOF from
// the client ("Client Closed"), or a read or write that failed on the
// connection ("Read Error", "Write Error": the client's end reset it).
// Every other reason is the server's own doing.
func holderClosed(reason string) bool {
	switch reason {
	case "Client Closed", "Read Error", "Write Error":
		return true
	}
	return false
}

// disconnectAdvisoryType is the type of the server's client disconnect
// advisory (server.DisconnectEventMsgType).
const disconnectAdvisoryType = "io.nats.server.advisory.v1.client_disconnect"

// maxAdvisory bounds the advisory the manager decodes: one carries a
// client's JWT at most, a few kilobytes.
const maxAdvisory = 64 << 10

// checkConn validates a request's connection fields.
func checkConn(server string, id uint64) *lease.Error {
	if server == "" && id == 0 {
		return nil
	}
	if server == "" || id == 0 {
		return errorf(lease.CodeBadRequest, "conn_server and conn_id go together")
	}
	for _, c := range []byte(server) {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return errorf(lease.CodeBadRequest, "conn_server must be a NATS server id: upper-case letters and digits only")
		}
	}
	return nil
}

// disconnects is fast release's owner: the connections the server's
// advisories named, the questions to their servers (closecheck.go) and the
// goroutines that ask them, the closes confirmed, and the pending frees.
// It has its own lock (mu) and lifecycle: closeLocked stops it, wait waits
// for its goroutines (the questions, and frees that fired).
//
// What a close frees is the Manager's (its leases and queued requests,
// under m.mu), reached through bindings, which take the Manager's lock
// themselves: the owner never takes it, and calls bindings without its own
// lock held. The Manager calls the ...Locked methods with m.mu held, and
// they take mu: lock order m.mu, then mu.
type disconnects struct {
	conn     *nats.Conn
	subject  string // Config.DisconnectEvents
	log      *slog.Logger
	ctx      context.Context // ends when the manager closes
	bindings bindings
	wg       sync.WaitGroup // the questions in flight, and armed frees

	mu sync.Mutex
	// stopped is set once the manager closes: nothing more is checked or
	// freed. noFrees is set by a clean stop (stop.go): closes confirmed
	// from then on free nothing. Both change with m.mu held too, so under
	// m.mu they read as the Manager's closed and stop.announced: a free
	// checks them there (freeingLocked) before it frees anything.
	stopped, noFrees bool
	// heard holds the connections an advisory named, with when and their
	// server's name, until their server confirms the close or not
	// (closecheck.go).
	heard map[conn]heardConn
	// checking holds the connections whose server is being asked.
	checking map[conn]struct{}
	// closed holds the connections whose close was confirmed recently,
	// with when: a grant or renewal for one of them, which raced the
	// advisory, is freed as if it had been bound before.
	closed map[conn]time.Time
	// closedOrigins are the same closes by server name and client id: the
	// connections the server vouched for as a queued request's (origin).
	closedOrigins map[origin]time.Time
	pruned        time.Time // when heard and closed were last pruned
	// timers are the pending frees; closeLocked and stopFreeingLocked
	// stop them. Each counts in wg until it fired or was stopped.
	timers map[*time.Timer]struct{}
}

// bindings is what fast release needs of the Manager: what is bound to a
// connection. Each takes the Manager's lock itself.
type bindings interface {
	// boundTo reports whether a lease or a queued request is bound to c,
	// whose server is named name.
	boundTo(c conn, name string) bool
	// connClosed frees, after the grace, what is bound to c (of the server
	// named name), whose close was just confirmed, unless the owner no
	// longer frees by then (freeingLocked).
	connClosed(c conn, name string)
}

// heardConn is when an advisory named a connection, and its server's name.
type heardConn struct {
	at   time.Time
	name string
}

var _ bindings = (*Manager)(nil)

func newDisconnects(nc *nats.Conn, subject string, log *slog.Logger, ctx context.Context, b bindings) *disconnects {
	return &disconnects{conn: nc, subject: subject, log: log, ctx: ctx, bindings: b,
		heard: make(map[conn]heardConn), checking: make(map[conn]struct{}),
		closed: make(map[conn]time.Time), closedOrigins: make(map[origin]time.Time), timers: make(map[*time.Timer]struct{})}
}

// closedMemory is how long a closed connection is remembered: far longer
// than a request can be in flight behind its connection's advisory.
const closedMemory = 30 * time.Second

// subscribe starts listening to the advisories, if configured; the
// subscription is out's, ended with the others.
func (g *disconnects) subscribe(out *outbox) error {
	if g.subject == "" {
		return nil
	}
	sub, err := out.subscribe(g.subject, out.protect(g.handle))
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(1<<16, 1<<28)
	return nil
}

// handle notes the connection an advisory says closed and, if a lease or
// a queued request is bound to it, asks its server to confirm.
//
// It notes the connection (heard) before it asks whether anything is
// bound, and whoever binds something to a connection asks knownClosedLocked
// in the same step under m.mu: so either this sees the binding, or the
// binder sees the connection heard and asks the server itself.
func (g *disconnects) handle(msg *nats.Msg) {
	if len(msg.Data) > maxAdvisory {
		return
	}
	var adv struct {
		Type   string `json:"type"`
		Server struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"server"`
		Client struct {
			ID uint64 `json:"id"`
		} `json:"client"`
	}
	if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.Type != disconnectAdvisoryType || adv.Server.ID == "" || adv.Client.ID == 0 {
		g.log.Debug("ignoring a message on the disconnect advisory subject that is not one", "subject", echo.Clip(msg.Subject))
		return
	}
	c := conn{adv.Server.ID, adv.Client.ID}
	if !g.hear(c, adv.Server.Name, time.Now()) {
		return
	}
	if g.bindings.boundTo(c, adv.Server.Name) {
		g.mu.Lock()
		g.checkLocked(c)
		g.mu.Unlock()
	}
}

// hear notes that an advisory named c, of the server named name, at now,
// and reports whether c is worth a question: the owner runs, and c's close
// is not known yet.
func (g *disconnects) hear(c conn, name string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	if now.Sub(g.pruned) > time.Second { // not on every advisory: churn
		g.pruned = now
		maps.DeleteFunc(g.closed, func(_ conn, t time.Time) bool { return now.Sub(t) > closedMemory })
		maps.DeleteFunc(g.closedOrigins, func(_ origin, t time.Time) bool { return now.Sub(t) > closedMemory })
		maps.DeleteFunc(g.heard, func(_ conn, h heardConn) bool { return now.Sub(h.at) > closedMemory })
	}
	if _, ok := g.closed[c]; ok {
		return false
	}
	if len(g.heard) < maxHeard {
		g.heard[c] = heardConn{at: now, name: name}
	}
	return true
}

// originClosedLocked reports whether the vouched connection o's close was
// confirmed recently. Called with m.mu held as a request binds to o.
func (g *disconnects) originClosedLocked(o origin) bool {
	if !o.known() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.closedOrigins[o]
	return ok
}

// knownClosedLocked reports whether c's close was confirmed recently.
// Called with m.mu held as something is bound to c: if a close was heard
// but not confirmed yet, it asks c's server, whose answer frees what is
// bound by then.
func (g *disconnects) knownClosedLocked(c conn) bool {
	if !c.known() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.closed[c]; ok {
		return true
	}
	if _, ok := g.heard[c]; ok {
		g.checkLocked(c)
	}
	return false
}

// afterGraceLocked runs f d from now, unless the manager closes or stops
// freeing first; f takes the Manager's lock and checks freeingLocked
// under it, as the manager may close as the timer fires. Called with m.mu
// held.
func (g *disconnects) afterGraceLocked(d time.Duration, f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || g.noFrees {
		return // it would find them set when it fires, and do nothing
	}
	var t *time.Timer
	g.wg.Add(1)
	t = time.AfterFunc(d, func() {
		defer g.wg.Done()
		if g.fired(&t) { // under mu, held here until t is set and in timers
			f()
		}
	})
	g.timers[t] = struct{}{}
}

// freeingLocked reports whether frees still run: the manager neither
// closed nor stopped cleanly. Called with m.mu held, under which a free
// runs.
func (g *disconnects) freeingLocked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.stopped && !g.noFrees
}

// fired forgets the fired timer *t and reports whether its free may run.
// It reads *t under mu, which afterGraceLocked holds until it is set.
func (g *disconnects) fired(t **time.Timer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.timers, *t)
	return !g.stopped && !g.noFrees
}

// closeLocked stops the owner as the manager closes (m.mu held): no more
// questions, and the pending frees are dropped. wait then waits for the
// questions in flight, which end with ctx.
func (g *disconnects) closeLocked() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	g.stopTimersLocked()
}

// stopFreeingLocked drops the pending frees and frees nothing more on a
// close (a clean stop, m.mu held).
func (g *disconnects) stopFreeingLocked() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.noFrees = true
	g.stopTimersLocked()
}

// stopTimersLocked stops the pending frees; g.mu held.
func (g *disconnects) stopTimersLocked() {
	for t := range g.timers {
		if t.Stop() {
			g.wg.Done() // it will not fire
		}
	}
	clear(g.timers)
}

// wait returns once the questions in flight and the frees that fired have
// ended. Call it after closeLocked and after ctx ended, without m.mu.
func (g *disconnects) wait() { g.wg.Wait() }

// boundTo reports whether a lease or a queued request is bound to c,
// of the server named name.
func (m *Manager) boundTo(c conn, name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.leases.byKey {
		if recordConn(&h.rec) == c {
			return true
		}
	}
	o := origin{name, c.id}
	for _, p := range m.pools {
		for _, r := range p.waiting {
			if r.conn == c || (o.known() && r.origin == o) {
				return true
			}
		}
	}
	return false
}

// connClosed frees, after the grace, what is bound to c (of the server
// named name), whose server confirmed its close: a lease unless it has been
// moved to another connection by then, a queued request unless it was
// re-sent on another one (nobody would hear of its grant). A queued
// request is bound to the connection it says it came on (conn) and to the
// one the server vouches for (origin): a request lives no longer than what
// asked for it, whether or not it named its connection (before, one that
// named none stayed queued after its client was gone, and was granted in
// its turn to nobody).
func (m *Manager) connClosed(c conn, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.gone.freeingLocked() {
		return // closed or stopping cleanly since the check began
	}
	for _, h := range m.leases.byKey {
		if recordConn(&h.rec) == c {
			m.freeOnCloseLocked(h)
		}
	}
	o := origin{name, c.id}
	on := func(r *request) bool { return r.conn == c || (o.known() && r.origin == o) }
	for _, p := range m.pools {
		for _, r := range p.waiting {
			if !on(r) {
				continue
			}
			m.gone.afterGraceLocked(m.cfg.DisconnectGrace, freeing(m, func() {
				if !r.waiting() || !on(r) {
					return
				}
				m.leaveQueueLocked(r, errorf(lease.CodeHolderDisconnected, "the requester's connection closed while it waited"), lease.EventRejected)
			}))
		}
	}
}

// freeOnCloseLocked frees h after its grace, unless it has been moved to
// another connection by then. A lease whose record carries no grace was
// granted without fast release: its holder keeps no clock, so only the
// TTL may end it.
func (m *Manager) freeOnCloseLocked(h *held) {
	if h.rec.DisconnectGraceMs <= 0 || h.releasing {
		return
	}
	c := recordConn(&h.rec)
	// The record's grace, if a predecessor granted it with a longer one:
	// that is what its holder was told.
	grace := max(m.cfg.DisconnectGrace, time.Duration(h.rec.DisconnectGraceMs)*time.Millisecond)
	m.gone.afterGraceLocked(grace, freeing(m, func() {
		if m.leases.byKey[h.key] != h || h.releasing || recordConn(&h.rec) != c {
			return // gone already, or moved to a live connection
		}
		m.log.Info("freeing a lease whose holder's connection closed", "key", h.key, "grace", grace)
		h.releaseCode = lease.CodeHolderDisconnected
		m.startReleaseLocked(h, lease.EventReleased)
	}))
}

// freeing is f run with m.mu held, if fast release still frees then.
func freeing(m *Manager, f func()) func() {
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.gone.freeingLocked() {
			f()
		}
	}
}

// rebind moves h to the connection a renewal came on, if it has fast
// release and that is another one: the holder reconnected. The holder hears
// "bound" at once, so it can count its new connection without waiting for
// the renewal's write (a store stall after a server stop would otherwise
// outlast its liveness deadline); the write stores the binding. Only this
// manager's memory decides a free (freeOnCloseLocked, which the caller
// runs if h moved to a connection already known closed), so the in-memory
// binding is what protects the lease. The caller holds m.mu.
//
// A renewal that says its connection's server is in lame duck mode
// (lameDuck) unbinds the lease instead: that server closes the connection
// itself soon, which the holder cannot tell from a reset on its path, so
// the lease leaves fast release, and no close frees it, until a renewal on
// another connection binds it there. The renewal's write stores the
// unbinding, and only its answer (not a "bound") tells the holder, which
// counts its connection until then (lease/lameduck.go).
//
// It returns the "bound" answer, if any (a zero Reply if none).
func (h *held) rebind(server string, id uint64, lameDuck bool) (lease.Reply, *lease.Error) {
	if e := checkConn(server, id); e != nil {
		return lease.Reply{}, e
	}
	c := conn{server, id}
	if lameDuck {
		if h.rec.DisconnectGraceMs > 0 && recordConn(&h.rec).known() {
			h.rec.ConnServer, h.rec.ConnID = "", 0
		}
		return lease.Reply{}, nil
	}
	if !c.known() || h.rec.DisconnectGraceMs <= 0 || c == recordConn(&h.rec) {
		return lease.Reply{}, nil
	}
	h.rec.ConnServer, h.rec.ConnID = c.server, c.id
	rec := h.rec
	return lease.Reply{Status: lease.StatusBound, Lease: &rec}, nil
}
