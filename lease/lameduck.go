package lease

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// A NATS server in lame duck mode (a rolling restart: SIGUSR2, `nats-server
// --signal ldm=PID`) tells its clients so, then, a grace period later,
// closes their connections one at a time. Such a close is the server's
// doing and frees nothing, but a holder cannot tell it from a reset on its
// path, which would: so a lease with fast release is lost unless it moves
// to a new connection within 3/4 of the grace of the close (liveness.go),
// about half a second, which a busy machine or a store stall at that moment
// can outlast (docs/guarantees.md, "Rolling restart of a cluster").
//
// Told by its server, a holder does better: it renews each lease bound to
// the connection at once, saying so (RenewRequest.LameDuck), and the
// manager unbinds the lease from that connection: no close of it frees the
// lease any more, so the holder stops counting the connection's clocks
// once the renewal's answer says it is unbound, and the lease rides the
// close on its TTL alone. The next renewal on another connection binds it
// there again. Until that answer comes, nothing changes. From the moment
// an unbound lease's renewal goes out on a connection, the holder counts
// that connection as the lease's, dated from the send: the manager may
// bind the lease to it on receipt, and a close can only come after that.
//
// The server's notice reaches the Client only through its connection's
// lame duck handler: connect with LameDuck (natsconn.Connect does).

// LameDuck is a nats.Option that passes the server's lame duck notice to
// every Client of the connection. A program that sets its own
// LameDuckModeHandler can call LameDuckNotice from it instead.
func LameDuck() nats.Option { return nats.LameDuckModeHandler(LameDuckNotice) }

// LameDuckNotice tells every Client of nc that nc's server has entered lame
// duck mode: the leases bound to nc's connection leave fast release before
// the server closes it.
func LameDuckNotice(nc *nats.Conn) {
	server := nc.ConnectedServerId()
	id, err := nc.GetClientID()
	if server == "" || err != nil {
		return // already gone: the reconnect moves the leases
	}
	c := conn{server, id}
	for _, cl := range clientsOf(nc) {
		cl.live.lameDuck(c)
		cl.wake.fire()
	}
}

// clients are the open Clients by connection, for LameDuckNotice.
var clients struct {
	sync.Mutex
	m map[*nats.Conn]map[*Client]struct{}
}

func registerClient(c *Client) {
	clients.Lock()
	defer clients.Unlock()
	if clients.m == nil {
		clients.m = make(map[*nats.Conn]map[*Client]struct{})
	}
	if clients.m[c.nc] == nil {
		clients.m[c.nc] = make(map[*Client]struct{})
	}
	clients.m[c.nc][c] = struct{}{}
}

func unregisterClient(c *Client) {
	clients.Lock()
	defer clients.Unlock()
	delete(clients.m[c.nc], c)
	if len(clients.m[c.nc]) == 0 {
		delete(clients.m, c.nc)
	}
}

func clientsOf(nc *nats.Conn) []*Client {
	clients.Lock()
	defer clients.Unlock()
	out := make([]*Client, 0, len(clients.m[nc]))
	for c := range clients.m[nc] {
		out = append(out, c)
	}
	return out
}

// lameDuck notes that c's server said it is in lame duck mode.
func (v *liveness) lameDuck(c conn) {
	v.mu.Lock()
	defer v.mu.Unlock()
	remember(&v.lameDucks, c)
}

// isLameDuck reports whether c's server said it is in lame duck mode.
func (v *liveness) isLameDuck(c conn) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.lameDucks[c]
	return ok
}
