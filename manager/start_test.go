package manager_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// withholdCaughtUp passes the real watch on without its caught-up marker,
// so the rebuild never completes, and closes done when its forwarding
// goroutine has ended.
type withholdCaughtUp struct {
	manager.Store
	done chan struct{}
}

type heldBackWatcher struct {
	manager.Watcher
	out chan manager.Change
}

func (h *heldBackWatcher) Changes() <-chan manager.Change { return h.out }

func (s *withholdCaughtUp) Watch(ctx context.Context, filter string) (manager.Watcher, error) {
	w, err := s.Store.Watch(ctx, filter)
	if err != nil {
		return nil, err
	}
	h := &heldBackWatcher{Watcher: w, out: make(chan manager.Change)}
	go func() {
		defer close(s.done)
		defer close(h.out)
		for ch := range w.Changes() {
			if ch.Op != manager.ChangeCaughtUp {
				h.out <- ch
			}
		}
	}()
	return h, nil
}

// A Start that fails after its watch began (the rebuild stalls) returns
// only once the watch has ended: nothing it started keeps running.
func TestFailedStartStopsItsWatch(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	st := harness.StartManagerStore(t, srv.URL)
	storeRecord(t, st, "before", "old", 0) // something for the watch to deliver
	// The stall limit bounds the watch's set-up too. A loaded machine can
	// take longer to set it up: Start then fails before the watch began,
	// which is not the failure this test is about, so it is tried again
	// with a limit four times as long (up to a minute: only a stuck run).
	for stall := 300 * time.Millisecond; ; stall *= 4 {
		ws := &withholdCaughtUp{Store: st, done: make(chan struct{})}
		m, err := manager.New(manager.Config{Node: node, TTL: 5 * time.Second, Conn: harness.Connect(t, srv.URL), Store: ws,
			Logger: harness.Logger(), RebuildStall: stall, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Start(context.Background())
		if err != nil && strings.Contains(err.Error(), "setting up the watch took longer") && stall < time.Minute {
			t.Logf("the watch's set-up took longer than %v; again", stall)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "delivered nothing") {
			t.Fatalf("Start with a stalled rebuild: %v", err)
		}
		// Start returned after the manager's watch loop saw the watch's end;
		// the forwarding goroutine closes done just after that.
		select {
		case <-ws.done:
		case <-time.After(time.Minute):
			t.Fatal("the watch still runs after Start failed")
		}
		if m.Serving() {
			t.Fatal("a manager whose Start failed reports Serving")
		}
		return
	}
}

// stallOnCaughtUp stalls the manager's connection (proxy) as the rebuild
// completes, so Start cannot finish subscribing, and closes it once the
// restored request's grant write has begun (Renew: a queued grant replaces
// its entry), so Start fails while that write is in flight; the write is
// slow, to stay in flight.
type stallOnCaughtUp struct {
	manager.Store
	proxy *harness.Proxy
	conn  interface{ Close() }
	// renews counts the grant writes started; inFlight those not ended.
	renews, inFlight atomic.Int32
}

func (s *stallOnCaughtUp) Watch(ctx context.Context, filter string) (manager.Watcher, error) {
	w, err := s.Store.Watch(ctx, filter)
	if err != nil {
		return nil, err
	}
	h := &heldBackWatcher{Watcher: w, out: make(chan manager.Change)}
	go func() {
		defer close(h.out)
		for ch := range w.Changes() {
			if ch.Op == manager.ChangeCaughtUp {
				s.proxy.Stall()
			}
			h.out <- ch
		}
	}()
	return h, nil
}

func (s *stallOnCaughtUp) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if s.renews.Add(1) == 1 {
		s.conn.Close() // Start's flush through the stalled proxy fails now
	}
	time.Sleep(300 * time.Millisecond) // slow: still in flight as Start fails
	return s.Store.Renew(ctx, key, value, ttl, rev)
}

// A Start that fails after the rebuild restored a queued request has
// finished that request's grant write before it returns: nothing it
// started writes to the store afterwards.
func TestFailedStartLeavesNoGrantRunning(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	st := harness.StartManagerStore(t, srv.URL) // its own connection, not stalled
	entry := []byte(`{"id":"waiting","node":"` + node + `","pool":"p","slots":1,"holder":"h","manager":"old","queued":true,"reply_to":"_INBOX.x","queued_at":1}`)
	if _, err := st.Create(context.Background(), lease.RecordKey(node, "p", "waiting"), entry, time.Minute); err != nil {
		t.Fatal(err)
	}
	proxy := harness.StartProxy(t, srv.Server.Addr().String())
	nc := harness.Connect(t, proxy.URL())
	cs := &stallOnCaughtUp{Store: st, proxy: proxy, conn: nc}
	m, err := manager.New(manager.Config{Node: node, TTL: 5 * time.Second, Conn: nc, Store: cs,
		Logger: harness.Logger(), Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded on a closed connection")
	}
	if cs.renews.Load() == 0 {
		t.Fatal("the restored request's grant was never written: nothing to check")
	}
	if n := cs.inFlight.Load(); n != 0 {
		t.Fatalf("%d grant writes still in flight after Start had failed", n)
	}
	// Start closed the manager, which waits for everything it runs:
	// nothing of it is left to write.
	before := lastSeq(t, harness.Connect(t, srv.URL))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if after := lastSeq(t, harness.Connect(t, srv.URL)); after != before {
		t.Fatalf("the store moved from sequence %d to %d after Start had failed", before, after)
	}
}
