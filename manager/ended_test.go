package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// A re-send of an acquire that reaches the manager after its request ended
// for good is answered with that end and queues nothing: a cancelled
// request, a released lease, a request whose wait expired. A first send
// of the same id is a new request; so is a re-send with another secret.
func TestLateResendIsToldItsEnd(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node, lease.WithHolder("h"))
	nc := harness.Connect(t, srv.URL)
	acq := lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire)
	resend := func(id, secret string) lease.Reply {
		t.Helper()
		return harness.Request(t, nc, acq, lease.AcquireRequest{RequestID: id, Holder: "h", Secret: secret, Slots: 1, Resend: true})
	}
	wantCode := func(what string, r lease.Reply, code lease.Code) {
		t.Helper()
		if r.Error == nil || r.Error.Code != code {
			t.Fatalf("%s: %+v, want %s", what, r, code)
		}
	}
	queued := func(what string) {
		t.Helper()
		if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 0 || s.InUse != 1 {
			t.Fatalf("%s: %+v, want the holder alone", what, s)
		}
	}

	holder, err := c.Acquire(context.Background(), "p", 1, lease.WithRequestID("held"), lease.WithSecret("s-held"))
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled by its holder while queued.
	ctx, cancel := context.WithCancel(context.Background())
	_, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithRequestID("q"), lease.WithSecret("s-q"))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	harness.Eventually(t, 5*time.Second, "the cancel handled", func() bool { return harness.PoolStats(t, n.Manager, "p").QueuedRequests == 0 })
	wantCode("re-send after the cancel", resend("q", "s-q"), lease.CodeCancelled)
	queued("after the late re-send")

	// Another secret is another request; so is a first send.
	if r := resend("q", "other"); r.Status != lease.StatusQueued {
		t.Fatalf("re-send with another secret: %+v, want queued", r)
	}
	harness.Request(t, nc, lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbCancel), lease.CancelRequest{RequestID: "q", Holder: "h", Secret: "other"})
	if r := harness.Request(t, nc, acq, lease.AcquireRequest{RequestID: "q", Holder: "h", Secret: "s-q", Slots: 1}); r.Status != lease.StatusQueued {
		t.Fatalf("first send of a cancelled id: %+v, want queued", r)
	}
	harness.Request(t, nc, lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbCancel), lease.CancelRequest{RequestID: "q", Holder: "h", Secret: "s-q"})

	// Refused with wait_expired.
	if _, err := c.Acquire(context.Background(), "p", 1, lease.WithRequestID("w"), lease.WithSecret("s-w"), lease.WithWait(100*time.Millisecond)); !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatalf("acquire with a short wait: %v", err)
	}
	wantCode("re-send after wait_expired", resend("w", "s-w"), lease.CodeWaitExpired)
	queued("after the late re-send")

	// Released by its holder.
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "released", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
	wantCode("re-send after the release", resend("held", "s-held"), lease.CodeLeaseNotFound)
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 0 || s.QueuedRequests != 0 {
		t.Fatalf("a late re-send after the release took the slot: %+v", s)
	}
}
