package manager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// A snapshot lists a pool's holders and its waiters in grant order (here a
// priority pool, so not arrival order), with history, and never a secret.
func TestSnapshotHoldersWaitersInGrantOrder(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second,
		manager.PoolConfig{Name: "gpu", Capacity: 2, Options: pools.Options{Policy: pools.PolicyPriority}},
		manager.PoolConfig{Name: "io", Capacity: 8})
	nc := harness.Connect(t, srv.URL)
	acquire := lease.Subject(lease.DefaultPrefix, node, "gpu", lease.VerbAcquire)
	for _, a := range []lease.AcquireRequest{
		{RequestID: "hold-a", Holder: "alice", Slots: 2, Secret: "s3cret-hold", Tenant: "team-a"},
		{RequestID: "wait-low", Holder: "bob", Slots: 1, Secret: "s3cret-low", Priority: 1},
		{RequestID: "wait-high", Holder: "carol", Slots: 2, Secret: "s3cret-high", Priority: 9},
	} {
		if r := harness.Request(t, nc, acquire, a); r.Status == lease.StatusError {
			t.Fatalf("acquire %s: %+v", a.RequestID, r.Error)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := lease.RequestSnapshot(ctx, nc, lease.DefaultPrefix, node, true)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Node != node || len(snap.Pools) != 2 || snap.Pools[0].Name != "gpu" || snap.Pools[1].Name != "io" {
		t.Fatalf("snapshot %+v", snap)
	}
	gpu := snap.Pools[0]
	if gpu.InUse != 2 || gpu.QueuedRequests != 2 || len(gpu.Holders) != 1 || len(gpu.Waiters) != 2 {
		t.Fatalf("gpu %+v", gpu)
	}
	if h := gpu.Holders[0]; h.Holder != "alice" || h.Slots != 2 || h.Token == 0 || h.Tenant != "team-a" || h.ExpiresAt.Before(h.GrantedAt) {
		t.Fatalf("holder %+v", h)
	}
	w0, w1 := gpu.Waiters[0], gpu.Waiters[1]
	if w0.Holder != "carol" || w0.Position != 1 || w0.Priority != 9 || w1.Holder != "bob" || w1.Position != 2 || w1.Since.IsZero() {
		t.Fatalf("waiters, want carol then bob: %+v", gpu.Waiters)
	}
	for _, p := range snap.Pools {
		if len(p.History) == 0 || p.History[len(p.History)-1][1] != p.InUse || p.History[len(p.History)-1][2] != p.Capacity {
			t.Fatalf("pool %s history %v, want it to end with in_use %d of %d", p.Name, p.History, p.InUse, p.Capacity)
		}
	}
	if m := n.Manager.Snapshot(false); len(m.Pools[0].History) != 0 {
		t.Fatalf("history without asking: %v", m.Pools[0].History)
	}

	raw, err := nc.Request(lease.SnapshotSubject(lease.DefaultPrefix, node), []byte(`{"history":true}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw.Data), "s3cret") {
		t.Fatalf("a secret in the snapshot: %s", raw.Data)
	}

	// A bad body gets a bounded bad_request naming what is wrong.
	for _, body := range []string{`{"history":"yes"}`, `{"nope":1}`, `[`, strings.Repeat("x", 100000)} {
		r := harness.Request(t, nc, lease.SnapshotSubject(lease.DefaultPrefix, node), body)
		if r.Status != lease.StatusError || r.Error.Code != lease.CodeBadRequest || !strings.Contains(r.Error.Message, "snapshot request") || len(r.Error.Message) > 400 {
			t.Fatalf("body %.20q: %+v", body, r)
		}
	}
}

// A snapshot whose history would not fit in one NATS message (many pools,
// an hour each) comes without it, and says so; the figures are all there.
func TestSnapshotTooLargeLeavesHistoryOut(t *testing.T) {
	var pools []manager.PoolConfig
	for i := range 60 {
		pools = append(pools, manager.PoolConfig{Name: fmt.Sprintf("pool-%02d", i), Capacity: 1000000})
	}
	srv, n := startNode(t, 5*time.Second, pools...)
	manager.FillHistory(n.Manager, lease.HistoryPoints)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := lease.RequestSnapshot(ctx, nc, lease.DefaultPrefix, node, true)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.HistoryLeftOut || len(snap.Pools) != 60 || snap.Pools[59].Capacity != 1000000 || snap.Pools[0].History != nil {
		t.Fatalf("snapshot of 60 pools with an hour each: history left out %v, %d pools, pool 0 history %d points",
			snap.HistoryLeftOut, len(snap.Pools), len(snap.Pools[0].History))
	}
	// One pool's hour fits.
	if one := n.Manager.Snapshot(true); len(one.Pools[0].History) < lease.HistoryPoints {
		t.Fatalf("the filled history has %d points", len(one.Pools[0].History))
	}
}

// A holder's expires_at moves with each renewal (issue 31: it stayed at
// grant + TTL, so the page showed live holders expiring at 0s, then
// blank): once the holder has seen a renewal, the manager's record lasts
// past the holder's new deadline. The store's watch usually reports a
// renewal's write before its acknowledgement arrives, which hid it.
func TestSnapshotExpiryFollowsRenewals(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 3*time.Second, manager.PoolConfig{Name: "gpu", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	nc := harness.Connect(t, srv.URL)
	// The client renews every TTL/3 (1s); each renewal moves its deadline.
	// The manager updates the record before it answers, so the snapshot
	// taken after the holder saw the renewal must show it.
	deadline := l.Deadline()
	for i := range 4 {
		harness.Eventually(t, 5*time.Second, fmt.Sprintf("renewal %d", i+1), func() bool { return l.Deadline().After(deadline) })
		deadline = l.Deadline()
		snap, err := lease.RequestSnapshot(ctx, nc, lease.DefaultPrefix, node, false)
		if err != nil || len(snap.Pools) != 1 || len(snap.Pools[0].Holders) != 1 {
			t.Fatalf("snapshot %+v: %v", snap, err)
		}
		if e := snap.Pools[0].Holders[0].ExpiresAt; e.Before(deadline) {
			t.Fatalf("after renewal %d the holder's deadline is %v, but the manager says it expires at %v", i+1, deadline, e)
		}
	}
}
