package manager_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// storedShadow is pool p's shadow counts as stored in the pool bucket.
func storedShadow(t *testing.T, ps manager.Store) lease.ShadowCounts {
	t.Helper()
	var v struct {
		Shadow map[string]lease.ShadowCounts `json:"shadow"`
	}
	readStoredCounts(t, ps, &v)
	return v.Shadow["p"]
}

// A shadow pool of 1 grants three at once; the two its capacity would
// have queued are reported in stats and stored beside the pool counts,
// and a successor on the same store carries on from them.
func TestShadowCountsStoredAndCarriedOn(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	shadow := []manager.PoolConfig{{Name: "p", Capacity: 1, Options: pools.Options{Shadow: true}}}
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: shadow})
	ctx := context.Background()
	c := harness.Client(t, srv.URL, node)
	for i := range 2 {
		if _, err := c.Acquire(ctx, "p", 1); err != nil {
			t.Fatalf("acquire %d of a shadow pool of 1: %v", i, err)
		}
	}
	// The third by hand, to retry it with the successor below. Nobody
	// renews it: it lives its TTL.
	if r := harness.Request(t, harness.Connect(t, srv.URL), lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "raw", Holder: "h", Slots: 1}); r.Status != lease.StatusGranted {
		t.Fatalf("the third acquire of a shadow pool of 1: %+v", r)
	}
	s := harness.PoolStats(t, n.Manager, "p")
	if !s.Shadow || s.InUse != 3 || s.ShadowCounts.Of(pools.ShadowCapacity, pools.ShadowQueued) != 2 || len(s.ShadowCounts) != 1 {
		t.Fatalf("stats %+v, want shadow, 3 in use, capacity/queued 2 and nothing else", s)
	}
	if err := n.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedShadow(t, n.Config.PoolStore); got.Of(pools.ShadowCapacity, pools.ShadowQueued) != 2 {
		t.Fatalf("stored as the manager closed: %v, want capacity/queued 2", got)
	}
	second := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: shadow})
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 3 || s.ShadowCounts.Of(pools.ShadowCapacity, pools.ShadowQueued) != 2 {
		t.Fatalf("the successor's stats %+v, want the 3 leases and the counts carried on", s)
	}
	// A retried acquire of a restored lease is answered with it, though
	// the pool holds more than its capacity: a shadow pool does by design
	// (a plain pool refuses it then, docs/guarantees.md problem 9).
	r := harness.Request(t, harness.Connect(t, srv.URL), lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "raw", Holder: "h", Slots: 1})
	if r.Status != lease.StatusGranted || !r.Existing || r.Lease == nil || r.Lease.ID != "raw" {
		t.Fatalf("a retried acquire of a restored lease of an over-capacity shadow pool: %+v, want its lease", r)
	}
}

// Stored shadow counts are checked like the pool counts: a label that is
// no token refuses the whole value; a reason this version does not know
// (a later one's) is kept.
func TestStoredShadowCountsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stored string
		refused      bool
	}{
		{"bad reason", `{"manager":"m","pools":{},"shadow":{"p":{"no token!":{"queued":1}}}}`, true},
		{"bad action", `{"manager":"m","pools":{},"shadow":{"p":{"capacity":{"a.b":1}}}}`, true},
		{"bad pool", `{"manager":"m","pools":{},"shadow":{"p.q":{"capacity":{"queued":1}}}}`, true},
		{"later reason", `{"manager":"m","pools":{},"shadow":{"p":{"budget":{"queued":4}}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.StartServer(t)
			ctx := context.Background()
			ps, err := jetstream.OpenLeaseStore(ctx, harness.Connect(t, srv.URL), jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Pools})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ps.Put(ctx, node+".counts", []byte(tc.stored)); err != nil {
				t.Fatal(err)
			}
			var refused atomic.Value
			n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
				RecordRefused: func(reason string) { refused.Store(reason) }})
			got, _ := refused.Load().(string)
			if tc.refused != (got == manager.RefusedPoolCounts) {
				t.Fatalf("refusal %q, want refused %v", got, tc.refused)
			}
			s := harness.PoolStats(t, n.Manager, "p")
			if want := map[bool]uint64{true: 0, false: 4}[tc.refused]; s.ShadowCounts.Of("budget", pools.ShadowQueued) != want {
				t.Fatalf("shadow counts %v after the stored value", s.ShadowCounts)
			}
		})
	}
}

// A resize of a shadow pool over its capacity keeps its leases and its
// shadow mode, and counts against the new capacity; releases over the
// capacity give slots back as anywhere.
func TestResizeShadowPoolOverCapacity(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1, Options: pools.Options{Shadow: true}})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	var held []*lease.Lease
	for range 3 {
		l, err := c.Acquire(ctx, "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	stats, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if s := stats[0]; s.Capacity != 2 || s.InUse != 3 || s.Available != 0 || !s.Shadow {
		t.Fatalf("after a resize to 2: %+v, want 3 in use of 2, shadow", s)
	}
	if _, err := c.Acquire(ctx, "p", 1); err != nil { // a fourth, counted against 2
		t.Fatal(err)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 10*time.Second, "three released", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 1 })
	if got := harness.PoolStats(t, n.Manager, "p").ShadowCounts.Of(pools.ShadowCapacity, pools.ShadowQueued); got != 3 {
		t.Fatalf("capacity/queued counted %d, want 3 (2 over 1, then 1 over 2)", got)
	}
}
