package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
)

// A rolling restart of the 3-node cluster under load (issue 30): every
// NATS server, one at a time, then every manager candidate of the three
// nodes, one at a time, while the executors acquire, hold and release.
// No lease may be lost (no excuse applies: a server's stop frees nothing,
// and the holders move to another server), nothing over-granted, and the
// usual checks hold. docs/guarantees.md, "Rolling restart", is the
// procedure this follows.
//
// A holder whose server stops must move its lease to another server within
// 3/4 of the grace: the suite's 2s (Settings.DisconnectGrace says why),
// FAULT_DISCONNECT_GRACE=800ms for the product's default, which passed
// alone but lost 2 of 16 leases once inside a full race-built `go test
// ./...` on two shared cores (a stall of half a second at the wrong time).
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("restarts three servers and six managers under load, about a minute")
	}
	cfg := SuiteConfig{Duration: 5 * time.Second, Seed: 30, Rolling: true, Weights: map[string]int{}, StrictOrphans: true}
	// The default TTL: its budget (0.57 x TTL - 0.5s, 8s) is what a
	// server's stop, with its raft leaders moving, must stay within; the
	// suite's 8s leaves 4s, which a loaded machine's stalls exceeded.
	cfg.LeaseTTL = 15 * time.Second
	// And the default LEADER_TTL: a server's stop stalls the buckets for a
	// second or two (its raft leaders move); a manager keeps serving
	// through that within its 4.5s deadline, and answers the renewals that
	// move its holders' leases to their new connections (in memory, before
	// the store write). With the suite's 1s a manager stepped down in such
	// a stall, nobody answered, and holders whose server had stopped lost
	// their leases at 3/4 of the grace (1 run in 20, alone).
	cfg.LeaderTTL = 5 * time.Second
	if v := os.Getenv("FAULT_DISCONNECT_GRACE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULT_DISCONNECT_GRACE: %v", err)
		}
		cfg.DisconnectGrace = d
	}
	cfg.Dir = t.TempDir()
	cfg.Logger = harness.Logger()
	if testing.Verbose() {
		cfg.Logf = t.Logf
	}
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
	if res.Report.Lost > 0 {
		t.Errorf("%d leases lost over the rolling restart (excused: %v)", res.Report.Lost, res.Report.LostExcused)
	}
	for _, v := range res.Report.Violations {
		t.Error(v)
	}
}
