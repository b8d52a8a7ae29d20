package jetstream

import "time"

// Lame duck mode: how a NATS server of a cluster is stopped for a rolling
// restart without costing work (docs/guarantees.md, "Rolling restart of a
// cluster"). In lame duck mode (SIGUSR2, `nats-server --signal ldm=PID`)
// nats-server stops accepting clients, hands every raft group it leads
// (the meta group, each bucket's stream) to another replica and becomes
// an observer so it is not elected again, waits a second for the new
// leaders, stops JetStream, tells its clients (an INFO with "ldm"), waits
// LameDuckGracePeriod, then closes its clients one at a time over the rest
// of LameDuckDuration, and exits. A plain stop (SIGTERM) closes every
// client at once and gives the hand-over no time to arrive.
//
// The generated server configuration (leasemgr layout) sets both, as
// lame_duck_duration and lame_duck_grace_period; the test cluster's
// servers use them too.
const (
	// LameDuckDuration is the whole lame-duck stop, grace included. The
	// server spaces its client closes evenly over LameDuckDuration -
	// LameDuckGracePeriod, at most a second apart: each holder whose
	// connection closes has 3/4 of DISCONNECT_GRACE (0.6 s by default) to
	// reconnect to another server and move its leases there, and closing
	// them one after another keeps those moves from queueing behind each
	// other at the manager. 30 s spreads a thousand clients 25 ms apart
	// and keeps a server's stop (a few dozen clients: one a second) well
	// under a minute; nats-server's own default, 2 minutes, only makes a
	// rolling restart longer.
	LameDuckDuration = 30 * time.Second
	// LameDuckGracePeriod is the pause between the lame-duck notice and
	// the first client close. The raft leaders have moved by then (a
	// second after the notice) and the clients still reach the cluster
	// through this server's routes; the pause lets the new leaders settle
	// before the first holders move. nats-server's default, 10 s, is for
	// several servers put in lame duck mode at once, which a rolling
	// restart never does.
	LameDuckGracePeriod = 5 * time.Second
)
