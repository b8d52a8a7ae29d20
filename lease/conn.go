package lease

import "time"

// DefaultDisconnectGrace is how long after a holder's connection closed
// the manager frees its leases, when fast release is on.
const DefaultDisconnectGrace = 800 * time.Millisecond

// Bounds of the manager's DisconnectGrace (manager.Config): under the minimum a holder's
// pings would lose leases to a busy machine's hiccups; the maximum keeps
// it well inside the TTL, whose path it is meant to beat.
const (
	MinDisconnectGrace = 200 * time.Millisecond
	MaxDisconnectGrace = 10 * time.Second
)

// conn names a client connection: its server's id and the client id the
// server gave it. The zero conn is "not said".
type conn struct {
	server string
	id     uint64
}

func (c conn) known() bool { return c.server != "" }

func recordConn(r *Record) conn { return conn{r.ConnServer, r.ConnID} }
