package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
)

// A rolling restart of the 3-node cluster under load (issue 30): every
// NATS server, one at a time, then every manager candidate of the three
// nodes, one at a time, while the executors acquire, hold and release.
// No lease may be lost (a server's stop frees nothing, and the holders
// move to another server) unless the store itself was out for longer than
// the budget, nothing over-granted, and the usual checks hold.
// docs/guarantees.md, "Rolling restart", is the procedure this follows.
//
// A holder whose server stops must move its lease to another server within
// 3/4 of the grace: 4s here (below), FAULT_DISCONNECT_GRACE=800ms for the
// product's default, which passed alone but lost 2 of 16 leases once
// inside a full race-built `go test ./...` on two shared cores (a stall of
// half a second at the wrong time).
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("restarts three servers and six managers under load, about a minute")
	}
	cfg := SuiteConfig{Duration: 5 * time.Second, Seed: 30, Rolling: true, Weights: map[string]int{}, StrictOrphans: true}
	// A TTL of 30s: its budget (0.57 x TTL - 0.5s, 16.5s) is what a
	// server's stop, with its raft leaders moving, must stay within. The
	// default 15s leaves 8s, and beside the integration tests on two
	// cores the in-process cluster took up to 17s to be healthy again
	// after a server's restart, a clean hand-over up to 6s: a lease was
	// lost to the TTL in 1 of 15 runs so, and once in CI, with nothing the
	// product could do (the suite's 8s left 4s, and lost more).
	// FAULT_LEASE_TTL=15s runs it at the default (docs/guarantees.md
	// gives the figures). The holds stay those of a 15s TTL.
	cfg.LeaseTTL = 30 * time.Second
	cfg.MaxHold, cfg.LongHold, cfg.LongHolds = 7500*time.Millisecond, 30*time.Second, 0.25
	if v := os.Getenv("FAULT_LEASE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 3*time.Second || d%time.Second != 0 {
			t.Fatalf("FAULT_LEASE_TTL %q: want whole seconds, at least 3s", v)
		}
		cfg.LeaseTTL = d
	}
	// And the default LEADER_TTL: a server's stop usually stalls the
	// buckets for a second or two (its raft leaders move); a manager keeps serving
	// through that within its 4.5s deadline, and answers the renewals that
	// move its holders' leases to their new connections (in memory, before
	// the store write). With the suite's 1s a manager stepped down in such
	// a stall, nobody answered, and holders whose server had stopped lost
	// their leases at 3/4 of the grace (1 run in 20, alone).
	cfg.LeaderTTL = 5 * time.Second
	// A grace of 4s: every holder's connection drops once, and it has 3s
	// to move its lease. The suite's 2s lost leases in 7 of 36 runs beside
	// the integration tests on two cores (some with two suites at once):
	// moved too late, at 1.5s, with the store stalling for 2s and the
	// managers' own connections moving too.
	cfg.DisconnectGrace = min(4*time.Second, cfg.LeaseTTL/2) // a manager refuses more than TTL/2
	if v := os.Getenv("FAULT_DISCONNECT_GRACE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULT_DISCONNECT_GRACE: %v", err)
		}
		cfg.DisconnectGrace = d
	}
	cfg.Dir = t.TempDir()
	cfg.Logger = harness.Logger()
	suiteLog(t, &cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := RunSuite(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rolling restart:\n%s", res.Summary())
	if res.Faults["rolling-server"] != 3 || res.Faults["rolling-manager"] != 6 {
		t.Errorf("restarted %v, want 3 servers and 6 managers", res.Faults)
	}
	// Only an outage of the store excuses a lost lease here (outages.go):
	// a bucket whose leader's hand-over failed waits for an election, 4-9
	// s, which can outlast the budget (docs/guarantees.md, "Rolling
	// restart"). Every other loss is a violation; a loss excused by
	// anything else is an error too.
	for why, n := range res.Report.LostExcused {
		if !strings.HasPrefix(why, "store out for ") {
			t.Errorf("%d leases lost over the rolling restart, excused by %q: nothing but a store outage may", n, why)
		}
	}
	for _, v := range res.Report.Violations {
		t.Error(v)
	}
}
