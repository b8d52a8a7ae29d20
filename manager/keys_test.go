package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// TestKeyCapDoesNotBlockOtherKeys: in a fair pool of 4 with a key cap of
// 2, key a's third request waits with slots free, and key b's requests,
// which came after it, are granted at once. A successor manager restores
// both the leases' keys and the waiter's: a's request still waits with a
// slot free, b still goes past it, and a's own release lets it in.
func TestKeyCapDoesNotBlockOtherKeys(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{
		{Name: "k", Capacity: 4, Options: pools.Options{Policy: pools.PolicyFair, KeyCap: 2}}}}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	acquire := func(key string) *lease.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, "k", 1, lease.WithKey(key))
		if err != nil {
			t.Fatalf("acquire of key %q: %v", key, err)
		}
		if l.Record().Key != key {
			t.Fatalf("lease record key %q, want %q", l.Record().Key, key)
		}
		return l
	}
	a1 := acquire("a")
	acquire("a")
	a3Got, a3Err, pos := harness.QueuedAcquire(t, c, ctx, "k", 1, lease.WithKey("a"))
	if pos != 1 {
		t.Fatalf("a's third request queued at %d, want 1", pos)
	}
	acquire("b") // past a's waiter: a at its cap blocks nobody
	if s := harness.PoolStats(t, first.Manager, "k"); s.InUse != 3 || s.QueuedRequests != 1 || s.KeyCap != 2 {
		t.Fatalf("stats %+v, want 3 in use, 1 queued, key cap 2", s)
	}
	// The scheduler's view: a at its cap, held back with its waiter; b
	// running.
	sc := harness.PoolStats(t, first.Manager, "k").Scheduler
	if sc == nil || sc.Strategy != "deficit_round_robin" || sc.Quantum != 1 || len(sc.Keys) != 2 {
		t.Fatalf("scheduler %+v", sc)
	}
	if a, b := sc.Keys[0], sc.Keys[1]; a.Key != "a" || a.InUse != 2 || a.Queued != 1 || a.Ready != 0 || !a.Capped ||
		b.Key != "b" || b.InUse != 1 || b.Queued != 0 || b.Capped {
		t.Fatalf("scheduler keys %+v, want a (2 in use, 1 queued, capped) and b (1 in use)", sc.Keys)
	}
	if _, err := c.Acquire(ctx, "k", 3, lease.WithKey("c")); !errors.Is(err, lease.ErrExceedsCapacity) {
		t.Fatalf("a request over the key cap: %v, want exceeds_capacity", err)
	}

	harness.Eventually(t, 10*time.Second, "a's waiting request stored", func() bool { return storedQueueEntries(t, first) == 1 })
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	if s := harness.PoolStats(t, second.Manager, "k"); s.InUse != 3 || s.QueuedRequests != 1 {
		t.Fatalf("after restart: %+v, want 3 in use and a's request still queued with a slot free", s)
	}
	acquire("b") // the last slot: b is still not held up
	select {
	case l := <-a3Got:
		t.Fatalf("a's third request granted while a held 2: %+v", l.Record())
	case err := <-a3Err:
		t.Fatalf("a's third request failed: %v", err)
	default:
	}
	if err := a1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a3 := mustGrant(t, a3Got, a3Err)
	if a3.Record().Key != "a" {
		t.Fatalf("a's third lease has key %q", a3.Record().Key)
	}
}
