package jetstream

import (
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Lame duck mode: how a NATS server of a cluster is stopped for a rolling
// restart without costing work (docs/guarantees.md, "Rolling restart of a
// cluster"). In lame duck mode (SIGUSR2, `nats-server --signal ldm=PID`)
// nats-server stops accepting clients, hands every raft group it leads
// (the meta group, each bucket's stream) to another replica and becomes
// an observer so it is not elected again, waits a second for the new
// leaders, stops JetStream, tells its clients (an INFO with "ldm"), waits
// LameDuckGracePeriod, then closes its clients one at a time over the rest
// of LameDuckDuration, and exits. A plain stop (SIGTERM) closes every
// client at once and gives the hand-over no time to arrive: a bucket it
// led could wait 4-9 s for an election.
//
// The generated server configuration (leasemgr layout) sets both, as
// lame_duck_duration and lame_duck_grace_period; the test cluster's
// servers use them too (StartClusterServer).
const (
	// LameDuckDuration is the whole lame-duck stop, grace included. The
	// server spaces its client closes evenly over LameDuckDuration -
	// LameDuckGracePeriod, at most a second apart, so its clients
	// reconnect and renew on the other servers one after another rather
	// than in one burst (the holders need no spreading: they leave fast
	// release before the first close). 30 s is the least nats-server's
	// configuration parser takes; nats-server's default is 2 minutes.
	// Shorter would be better: from its second second on the server runs
	// no JetStream, so the cluster has no replica to spare until it is
	// back and caught up. A server with a few dozen clients (the rolling
	// test's) closes them one a second, in about 16 s; one with hundreds
	// takes the full 30 s.
	LameDuckDuration = 30 * time.Second
	// LameDuckGracePeriod is the pause between the lame-duck notice and
	// the first client close. In it every holder of the server renews
	// its leases saying so, and its manager takes them off fast release
	// (lease/lameduck.go), so the close that follows costs them nothing
	// however long they take to reconnect. That takes a renewal's round
	// trip and write (0.1-0.2 s after the notice in
	// TestLameDuckStopCostsAHolderNothing, on a loaded machine); 5 s leaves room for
	// a loaded machine and for a manager's takeover within LEADER_TTL's
	// default. The clients still reach the cluster through this server's
	// routes meanwhile. nats-server's default, 10 s, is for several
	// servers put in lame duck mode at once, which a rolling restart never
	// does.
	LameDuckGracePeriod = 5 * time.Second
)

// setLameDuck gives a cluster server's options the lame-duck timing above.
func setLameDuck(opts *server.Options) {
	opts.LameDuckDuration, opts.LameDuckGracePeriod = LameDuckDuration, LameDuckGracePeriod
}

// StopLameDuck stops s as SIGUSR2 (`nats-server --signal ldm=PID`) does a
// nats-server process: it enters lame duck mode, hands the raft groups it
// leads to other replicas, closes its clients one at a time and shuts
// down. It returns once s has stopped, about LameDuckDuration later (at
// once for a server without clients).
func StopLameDuck(s *server.Server) {
	s.LameDuckShutdown()
	s.Shutdown() // a no-op if lame duck mode finished it; else (already shutting down) waits for it
	s.WaitForShutdown()
}
