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

// handOver has c acquire a slot of pool "p" (a), queue a request behind
// it and release a, and returns a and the request's lease (b).
func handOver(t *testing.T, c *lease.Client) (a, b *lease.Lease) {
	t.Helper()
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return a, granted(t, got, errc)
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
	a, b := handOver(t, c)
	aKey := lease.RecordKey(node, "p", a.ID())
	if id, rev := storedAt(t, n, aKey); id != b.ID() || rev != b.Token() {
		t.Fatalf("%s holds lease %s revision %d, want the waiter's %s revision %d", aKey, id, rev, b.ID(), b.Token())
	}
	// Its queue entry is deleted after the grant, not before its answer
	// (a successor that found it would drop it: the lease is counted
	// first), so it goes soon, not at once.
	harness.Eventually(t, 10*time.Second, "the waiter's own key (its queue entry's) empty once granted", func() bool {
		_, _, err := n.Store.Get(ctx, lease.RecordKey(node, "p", b.ID()))
		return errors.Is(err, manager.ErrStoreNotFound)
	})
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
	other, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	a, b := handOver(t, c)
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

// lossyStore passes everything to the real store but what the test takes
// away from the writes sent without an acknowledgement that it picks:
// handovers (writes whose record is another id's key's), or where grant
// is set, the grant of that request id sent at once at its own key. It
// takes their send (drop: "sent" and lost; fail: refused), or their echo
// on the manager's watch (blind).
type lossyStore struct {
	manager.Store
	ew                manager.EchoWriter
	drop, blind, fail bool
	grant             string
}

func (s *lossyStore) picks(key string, value []byte) bool {
	var rec lease.Record
	if json.Unmarshal(value, &rec) != nil || rec.ID == "" {
		return false
	}
	own := key == lease.RecordKey(rec.Node, rec.Pool, rec.ID)
	if s.grant != "" {
		return own && rec.ID == s.grant
	}
	return !own
}

// send is what becomes of a picked write's send: lost (nil), refused, or
// sent by the real store.
func (s *lossyStore) send(key string, value []byte, real func() error) error {
	switch {
	case s.drop && s.picks(key, value):
		return nil
	case s.fail && s.picks(key, value):
		return errors.New("send refused by the test")
	}
	return real()
}

func (s *lossyStore) SendCreate(key string, value []byte, ttl time.Duration) error {
	return s.send(key, value, func() error { return s.ew.SendCreate(key, value, ttl) })
}

func (s *lossyStore) SendDelete(key string, rev uint64) error { return s.ew.SendDelete(key, rev) }

func (s *lossyStore) SendRenew(key string, value []byte, ttl time.Duration, rev uint64) error {
	return s.send(key, value, func() error { return s.ew.SendRenew(key, value, ttl, rev) })
}

func (s *lossyStore) Watch(ctx context.Context, filter string) (manager.Watcher, error) {
	w, err := s.Store.Watch(ctx, filter)
	if err != nil || !s.blind {
		return w, err
	}
	out := &filteredWatch{Watcher: w, ch: make(chan manager.Change)}
	go func() {
		defer close(out.ch)
		for ch := range w.Changes() {
			if ch.Op == manager.ChangePut && s.picks(ch.Key, ch.Value) {
				continue
			}
			out.ch <- ch
		}
	}()
	return out, nil
}

type filteredWatch struct {
	manager.Watcher
	ch chan manager.Change
}

func (w *filteredWatch) Changes() <-chan manager.Change { return w.ch }

// startLossy starts a manager for a 1-slot pool "p" on s, and a client.
func startLossy(t *testing.T, s *lossyStore) (*harness.Node, *lease.Client) {
	t.Helper()
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}},
		func(inner manager.Store) manager.Store {
			s.Store, s.ew = inner, inner.(manager.EchoWriter)
			return s
		})
	return n, harness.Client(t, srv.URL, node)
}

// startHandover starts a manager for a 1-slot pool "p" on a lossyStore,
// and has a lease a held and a request queued behind it.
func startHandover(t *testing.T, s *lossyStore) (n *harness.Node, a *lease.Lease, got <-chan *lease.Lease, errc <-chan error) {
	t.Helper()
	n, c := startLossy(t, s)
	a, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ = harness.QueuedAcquire(t, c, context.Background(), "p", 1)
	return n, a, got, errc
}

func granted(t *testing.T, got <-chan *lease.Lease, errc <-chan error) *lease.Lease {
	t.Helper()
	select {
	case b := <-got:
		return b
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted")
	}
	return nil
}

// A handover that is lost becomes a delete, and the waiter is granted in
// a write of its own once the released record is gone.
func TestLostHandoverBecomesADelete(t *testing.T) {
	t.Parallel()
	n, a, got, errc := startHandover(t, &lossyStore{drop: true})
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := granted(t, got, errc)
	if id, _ := storedAt(t, n, lease.RecordKey(node, "p", b.ID())); id != b.ID() {
		t.Fatalf("the waiter's own key holds %s", id)
	}
	if _, _, err := n.Store.Get(context.Background(), lease.RecordKey(node, "p", a.ID())); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("the released record: %v, want deleted", err)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 {
		t.Fatalf("%d slots in use, want 1", s.InUse)
	}
}

// A handover stored but not seen on the watch is found in the store and
// kept: the waiter is granted the record at the released lease's key.
func TestUnseenHandoverIsFoundStored(t *testing.T) {
	t.Parallel()
	n, a, got, errc := startHandover(t, &lossyStore{blind: true})
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := granted(t, got, errc)
	if id, rev := storedAt(t, n, lease.RecordKey(node, "p", a.ID())); id != b.ID() || rev != b.Token() {
		t.Fatalf("the released lease's key holds %s revision %d, want %s revision %d", id, rev, b.ID(), b.Token())
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the pool idle", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
}
