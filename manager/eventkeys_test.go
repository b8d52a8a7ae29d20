package manager_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// TestEventsCarryTheKey: every event of a request or lease with a fairness
// key names it (requested, granted, queued, cancelled, rejected, released);
// those of a request without one carry none.
func TestEventsCarryTheKey(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "f", Capacity: 1, Options: pools.Options{Policy: pools.PolicyFair}})
	nc := harness.Connect(t, srv.URL)
	sub, err := nc.SubscribeSync("lease.events.*.f.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "f", 1, lease.WithKey("a")) // requested, granted
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	_, errc, _ := harness.QueuedAcquire(t, c, cctx, "f", 1, lease.WithKey("b")) // requested, queued
	cancel()                                                                    // cancelled
	<-errc
	if _, err := c.Acquire(ctx, "f", 1, lease.WithKey("c"), lease.WithWait(100*time.Millisecond)); !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatalf("c: %v, want wait_expired", err) // requested, queued, rejected
	}
	if _, err := c.Acquire(ctx, "f", 1, lease.NoWait()); !errors.Is(err, lease.ErrWouldWait) {
		t.Fatalf("no key: %v, want would_wait", err) // requested, rejected: no key
	}
	if err := a.Release(ctx); err != nil { // released
		t.Fatal(err)
	}
	type want struct {
		kind lease.EventKind
		key  string
	}
	wants := []want{
		{lease.EventRequested, "a"}, {lease.EventGranted, "a"},
		{lease.EventRequested, "b"}, {lease.EventQueued, "b"}, {lease.EventCancelled, "b"},
		{lease.EventRequested, "c"}, {lease.EventQueued, "c"}, {lease.EventRejected, "c"},
		{lease.EventRequested, ""}, {lease.EventRejected, ""},
		{lease.EventReleased, "a"},
	}
	events := harness.ReadEvents(sub)
	var got []want
	for i := range wants {
		ev, _, err := events.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("event %d of %d: %v (read: %v)", i+1, len(wants), err, got)
		}
		got = append(got, want{ev.Kind, ev.Key})
	}
	// In order within each kind (subject): events of several kinds sent
	// close together may come in another order across kinds.
	kind := func(w want) lease.EventKind { return w.kind }
	gotBy := harness.PerKind(got, kind)
	for k, ws := range harness.PerKind(wants, kind) {
		if !slices.Equal(gotBy[k], ws) {
			t.Fatalf("%s events: %v, want %v (read: %v)", k, gotBy[k], ws, got)
		}
	}
}
