package cluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/test/harness"
)

// A rolling restart of the 3-node cluster under load (issues 30, 39): every
// NATS server, one at a time, stopped the documented way (lame duck mode:
// Cluster.Stop), then every manager candidate of the three nodes, one at a
// time, while the executors acquire, hold and release, all at the
// product's defaults: LEASE_TTL 15s, LEADER_TTL 5s, DISCONNECT_GRACE
// 800ms. No lease may be lost (a server's stop frees nothing: its raft
// leaders move before it stops, and its holders take their leases off fast
// release when it tells them it is in lame duck mode, so they can take
// their time to move) unless the store itself was out for longer than the
// budget, nothing over-granted, and the usual checks hold.
// docs/guarantees.md, "Rolling restart of a cluster", is the procedure
// this follows, with the figures.
//
// Before issue 39 it ran at a 30s TTL and a 4s grace: servers stopped
// with SIGTERM left a bucket without a leader for an election of 4-9s
// now and then, and every holder of the server had to move its lease
// within 3/4 of the grace, all at once; at the defaults that lost leases
// in most loaded runs. FAULT_LEASE_TTL and FAULT_DISCONNECT_GRACE still
// override the defaults.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("restarts three servers and six managers under load, about a minute and a half")
	}
	cfg := SuiteConfig{Duration: 5 * time.Second, Seed: 30, Rolling: true, Weights: map[string]int{}, StrictOrphans: true}
	cfg.LeaseTTL = 15 * time.Second // LEASE_TTL's default
	cfg.MaxHold, cfg.LongHold, cfg.LongHolds = 7500*time.Millisecond, 30*time.Second, 0.25
	if v := os.Getenv("FAULT_LEASE_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 3*time.Second || d%time.Second != 0 {
			t.Fatalf("FAULT_LEASE_TTL %q: want whole seconds, at least 3s", v)
		}
		cfg.LeaseTTL = d
	}
	cfg.LeaderTTL = 5 * time.Second                     // LEADER_TTL's default
	cfg.DisconnectGrace = config.DefaultDisconnectGrace // DISCONNECT_GRACE's
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
	// Nothing may be lost (issue 39): a loss the auditor excuses (a store
	// outage it measured, outages.go) fails the test too, naming it; an
	// unexcused one is a violation, below.
	for why, n := range res.Report.LostExcused {
		t.Errorf("%d leases lost over the rolling restart (excused by the auditor: %q): a rolling restart must lose none", n, why)
	}
	for _, v := range res.Report.Violations {
		t.Error(v)
	}
}
