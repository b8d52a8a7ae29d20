package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// storedAt reads the record stored at key and returns the lease id it
// names and its revision.
func storedAt(t *testing.T, n *harness.Node, key string) (string, uint64) {
	t.Helper()
	data, rev, err := n.Store.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("record at %s: %v", key, err)
	}
	var rec lease.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.ID, rev
}

// A release with a request waiting hands the slot over in one write: the
// waiter's record replaces the holder's at the holder's key, the events
// say released then granted, and the new holder renews and releases by
// its own lease id.
func TestReleaseHandsTheSlotOver(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 2*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	sub, err := nc.SubscribeSync("lease.events.*.p.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	evs := harness.ReadEvents(sub)
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var b *lease.Lease
	select {
	case b = <-got:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted")
	}
	aKey := lease.RecordKey(node, "p", a.ID())
	if id, rev := storedAt(t, n, aKey); id != b.ID() || rev != b.Token() {
		t.Fatalf("%s holds lease %s revision %d, want the waiter's %s revision %d", aKey, id, rev, b.ID(), b.Token())
	}
	if _, _, err := n.Store.Get(ctx, lease.RecordKey(node, "p", b.ID())); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("the waiter's own key (its queue entry's): %v, want nothing once granted", err)
	}
	var kinds []lease.EventKind
	for len(kinds) < 6 {
		ev, _, err := evs.Next(10 * time.Second)
		if err != nil {
			t.Fatalf("events %v: %v", kinds, err)
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == lease.EventGranted && ev.LeaseID == b.ID() {
			break
		}
	}
	want := []lease.EventKind{lease.EventRequested, lease.EventGranted, lease.EventRequested, lease.EventQueued, lease.EventReleased, lease.EventGranted}
	if len(kinds) != len(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events %v, want %v", kinds, want)
		}
	}

	// The old holder's retried release finds nothing of its own: the new
	// lease at its key is untouched.
	raw := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: a.ID(), Token: a.Token(), Secret: a.Record().Secret})
	if raw.Error == nil || raw.Error.Code != lease.CodeLeaseNotFound {
		t.Fatalf("the old holder's retried release: %+v, want lease_not_found", raw)
	}
	// The new holder keeps it past its TTL (its renewals find it) and
	// releases it by its own id.
	time.Sleep(3 * time.Second)
	select {
	case <-b.Done():
		t.Fatalf("the handed-over lease ended: %v", b.Err())
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the pool idle", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
	if _, _, err := n.Store.Get(ctx, aKey); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("%s after the last release: %v", aKey, err)
	}
}

// A lease stored at another's key is counted and found by its id after a
// restart: its holder keeps it, and a request reusing the id whose key it
// occupies is granted at a key of its own.
func TestHandedOverLeaseAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 3 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var b *lease.Lease
	select {
	case b = <-got:
	case err := <-errc:
		t.Fatal(err)
	}
	if id, _ := storedAt(t, first, lease.RecordKey(node, "p", a.ID())); id != b.ID() {
		t.Fatalf("not handed over: %s at the old holder's key", id)
	}
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 2 {
		t.Fatalf("after the restart %d slots in use, want 2", s.InUse)
	}
	time.Sleep(4 * time.Second) // past the TTL: only renewals keep them
	for _, l := range []*lease.Lease{b, other} {
		select {
		case <-l.Done():
			t.Fatalf("lease %s ended after the restart: %v", l.ID(), l.Err())
		default:
		}
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "one slot free", func() bool { return harness.PoolStats(t, second.Manager, "p").InUse == 1 })
	// The old holder's id again, while its key holds b's record.
	again, err := c.Acquire(ctx, "p", 1, lease.WithRequestID(a.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() != a.ID() {
		t.Fatalf("granted lease %s, want %s", again.ID(), a.ID())
	}
	if id, _ := storedAt(t, second, lease.RecordKey(node, "p", a.ID())); id != b.ID() {
		t.Fatalf("%s's key holds %s: the reused id wrote over the lease there", a.ID(), id)
	}
	for _, l := range []*lease.Lease{b, again} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release of %s: %v", l.ID(), err)
		}
	}
	harness.Eventually(t, 10*time.Second, "the pool idle", func() bool { return harness.PoolStats(t, second.Manager, "p").InUse == 0 })
}
