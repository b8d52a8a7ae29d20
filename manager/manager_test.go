package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

const node = "n1"

func startNode(t *testing.T, ttl time.Duration, pools ...manager.PoolConfig) (*harness.Server, *harness.Node) {
	t.Helper()
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: ttl, Pools: pools})
	return srv, n
}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "gpu", Capacity: 2})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()

	l, err := c.Acquire(ctx, "gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == 0 || l.Pool() != "gpu" || l.Node() != node || l.Slots() != 2 || l.TTL() != 5*time.Second {
		t.Fatalf("unexpected lease %+v", l.Record())
	}
	if time.Until(l.Deadline()) > 5*time.Second || time.Until(l.Deadline()) < 4*time.Second {
		t.Fatalf("deadline %v from now, want within (4s, 5s]", time.Until(l.Deadline()))
	}
	if s := harness.PoolStats(t, n.Manager, "gpu"); s.InUse != 2 || s.Available != 0 {
		t.Fatalf("stats after grant: %+v", s)
	}
	// The record is in KV before the holder heard of the grant.
	if _, rev, err := n.Store.Get(ctx, lease.RecordKey(node, "gpu", l.ID())); err != nil || rev != l.Token() {
		t.Fatalf("stored record: rev %d err %v, want rev %d", rev, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(l.Err(), lease.ErrReleased) {
		t.Fatalf("Err after release = %v", l.Err())
	}
	harness.Eventually(t, 5*time.Second, "slots back after release", func() bool {
		return harness.PoolStats(t, n.Manager, "gpu").InUse == 0
	})
	if _, _, err := n.Store.Get(ctx, lease.RecordKey(node, "gpu", l.ID())); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("record after release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

// Many concurrent acquirers never hold more than the capacity, in the
// holders' own view and in the manager's.
func TestConcurrentAcquirersNeverExceedCapacity(t *testing.T) {
	t.Parallel()
	const capacity = 4
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "io", Capacity: capacity})
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 16 {
		c := harness.Client(t, srv.URL, node, lease.WithHolder(fmt.Sprintf("g%d", g)))
		wg.Go(func() {
			for range 15 {
				slots := int64(1 + rand.IntN(2))
				l, err := c.Acquire(context.Background(), "io", slots)
				if err != nil {
					errs <- err
					return
				}
				now := held.Add(slots)
				for {
					p := peak.Load()
					if now <= p || peak.CompareAndSwap(p, now) {
						break
					}
				}
				if s := harness.PoolStats(t, n.Manager, "io"); s.InUse > capacity {
					errs <- fmt.Errorf("manager in_use %d > capacity", s.InUse)
				}
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				held.Add(-slots)
				if err := l.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := peak.Load(); p > capacity {
		t.Fatalf("peak held %d > capacity %d", p, capacity)
	}
	harness.Eventually(t, 5*time.Second, "pool drained", func() bool {
		s := harness.PoolStats(t, n.Manager, "io")
		return s.InUse == 0 && s.QueuedRequests == 0
	})
}

func mustGrant(t *testing.T, got <-chan *lease.Lease, errc <-chan error) *lease.Lease {
	t.Helper()
	select {
	case l := <-got:
		return l
	case err := <-errc:
		t.Fatalf("acquire failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not granted")
	}
	return nil
}

func TestFIFOMultiSlotHeadIsNotJumped(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 4})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()

	a, err := c.Acquire(ctx, "p", 2)
	if err != nil {
		t.Fatal(err)
	}
	bGot, bErr, bPos := harness.QueuedAcquire(t, c, ctx, "p", 3)
	// 2 slots are free, but the 3-slot request at the head waits, so a
	// 2-slot newcomer must queue behind it instead of jumping it.
	cGot, cErr, cPos := harness.QueuedAcquire(t, c, ctx, "p", 2)
	if bPos != 1 || cPos != 2 {
		t.Fatalf("positions %d, %d; want 1, 2", bPos, cPos)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 2 || s.QueuedRequests != 2 || s.QueuedSlots != 5 {
		t.Fatalf("stats with two waiters: %+v", s)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustGrant(t, bGot, bErr)
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 3 || s.QueuedRequests != 1 {
		t.Fatalf("stats after the head was granted: %+v", s)
	}
	select {
	case l := <-cGot:
		t.Fatalf("2-slot waiter granted with only 1 slot free: %+v", l.Record())
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cl := mustGrant(t, cGot, cErr)
	if cl.Token() <= b.Token() || b.Token() <= a.Token() {
		t.Fatalf("tokens not growing in grant order: %d, %d, %d", a.Token(), b.Token(), cl.Token())
	}
	_ = cl.Release(ctx)
}

func TestFIFOOrderAcrossWaiters(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	const waiters = 6
	first, order := queueBehind(t, c, "p", make([][]lease.AcquireOption, waiters), true)
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, order, waiters)
}

// queueBehind takes the only slot of pool, then queues one request per
// option set behind it (each checked to be queued at its own place if
// checkPos). It returns the held lease and a channel of the waiters'
// indexes in the order they are granted (each releases at once), closed
// once every waiter has ended.
func queueBehind(t *testing.T, c *lease.Client, pool string, opts [][]lease.AcquireOption, checkPos bool) (*lease.Lease, <-chan int) {
	t.Helper()
	ctx := context.Background()
	h, err := c.Acquire(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		got, errc, pos := harness.QueuedAcquire(t, c, ctx, pool, 1, o...)
		if checkPos && pos != i+1 {
			t.Fatalf("waiter %d queued at %d", i, pos)
		}
		wg.Go(func() {
			select {
			case l := <-got:
				order <- i
				_ = l.Release(ctx)
			case err := <-errc:
				t.Errorf("waiter %d: %v", i, err)
			}
		})
	}
	go func() { wg.Wait(); close(order) }()
	return h, order
}

func TestWaitDeadlineRemovesWaiter(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Acquire(ctx, "p", 1, lease.WithWait(300*time.Millisecond))
	if !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatalf("err = %v, want wait_expired", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before the deadline", d)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 0 || s.InUse != 1 {
		t.Fatalf("stats after deadline: %+v", s)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "nothing granted to the expired waiter", func() bool {
		s := harness.PoolStats(t, n.Manager, "p")
		return s.InUse == 0 && s.QueuedRequests == 0
	})
}

func TestCancelRemovesWaiter(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	h, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	harness.Eventually(t, 5*time.Second, "waiter removed", func() bool {
		return harness.PoolStats(t, n.Manager, "p").QueuedRequests == 0
	})
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "pool empty", func() bool {
		return harness.PoolStats(t, n.Manager, "p").InUse == 0
	})
}

// A cancel that races the grant: whichever wins, the slots come back.
func TestCancelGrantRaceGivesSlotsBack(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	bg := context.Background()
	var granted, cancelled int
	for i := range 30 {
		h, err := c.Acquire(bg, "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
		// Release the holder and cancel the waiter at about the same time;
		// vary the order so both sides of the race are hit.
		jitter := time.Duration(rand.IntN(1500)) * time.Microsecond
		if i%2 == 0 {
			go func() { _ = h.Release(bg) }()
			time.Sleep(jitter)
			cancel()
		} else {
			go func() {
				time.Sleep(jitter)
				_ = h.Release(bg)
			}()
			cancel()
		}
		select {
		case l := <-got:
			granted++
			_ = l.Release(bg)
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: %v", i, err)
			}
			cancelled++
		}
		harness.Eventually(t, 5*time.Second, fmt.Sprintf("round %d: pool empty", i), func() bool {
			s := harness.PoolStats(t, n.Manager, "p")
			return s.InUse == 0 && s.QueuedRequests == 0
		})
	}
	t.Logf("granted %d, cancelled %d", granted, cancelled)
}

func TestRetriedAcquireReturnsSameLease(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 2})
	nc := harness.Connect(t, srv.URL)
	subj := lease.Subject("lease", node, "p", lease.VerbAcquire)
	req := lease.AcquireRequest{RequestID: "req-1", Holder: "h1", Slots: 1, Secret: "s1"}
	r1 := harness.Request(t, nc, subj, req)
	r2 := harness.Request(t, nc, subj, req)
	if r1.Status != lease.StatusGranted || r2.Status != lease.StatusGranted {
		t.Fatalf("replies %+v %+v", r1, r2)
	}
	if r1.Lease.ID != r2.Lease.ID || r1.Lease.Token != r2.Lease.Token {
		t.Fatalf("retry got another lease: %+v vs %+v", r1.Lease, r2.Lease)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 {
		t.Fatalf("in_use %d after a retried acquire, want 1", s.InUse)
	}
	// Another holder reusing the id is refused, and so is the same holder
	// name without the secret.
	for _, other := range []lease.AcquireRequest{
		{RequestID: "req-1", Holder: "h2", Slots: 1, Secret: "s1"},
		{RequestID: "req-1", Holder: "h1", Slots: 1},
	} {
		r3 := harness.Request(t, nc, subj, other)
		if r3.Error == nil || r3.Error.Code != lease.CodeConflict {
			t.Fatalf("%+v: %+v", other, r3)
		}
	}
	// Renew and release need the secret too.
	for _, verb := range []string{lease.VerbRenew, lease.VerbRelease} {
		r := harness.Request(t, nc, lease.Subject("lease", node, "p", verb), lease.RenewRequest{LeaseID: "req-1", Token: r1.Lease.Token, Secret: "guess"})
		if r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
			t.Fatalf("%s with a wrong secret: %+v", verb, r)
		}
	}
	if ls := n.Manager.Leases(); len(ls) != 1 || ls[0].Secret != "" {
		t.Fatalf("Leases() must not show secrets: %+v", ls)
	}

	// The same through the client: a retry with the same request id.
	c := harness.Client(t, srv.URL, node, lease.WithHolder("h1"))
	l, err := c.Acquire(context.Background(), "p", 1, lease.WithRequestID("req-1"), lease.WithSecret("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != r1.Lease.Token {
		t.Fatalf("client retry token %d, want %d", l.Token(), r1.Lease.Token)
	}

	// A retried queued request keeps its single place in the queue.
	req2 := lease.AcquireRequest{RequestID: "req-2", Holder: "h1", Slots: 2}
	q1 := harness.Request(t, nc, subj, req2)
	q2 := harness.Request(t, nc, subj, req2)
	if q1.Status != lease.StatusQueued || q2.Status != lease.StatusQueued || q1.Position != 1 || q2.Position != 1 {
		t.Fatalf("queued replies %+v %+v", q1, q2)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 1 {
		t.Fatalf("queued %d after a retried queued acquire, want 1", s.QueuedRequests)
	}
	_ = l.Release(context.Background())
}

func TestErrorCodesFromTheNetwork(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 2})
	nc := harness.Connect(t, srv.URL)
	c := harness.Client(t, srv.URL, node)
	l, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	acq := lease.Subject("lease", node, "p", lease.VerbAcquire)
	ren := lease.Subject("lease", node, "p", lease.VerbRenew)
	rel := lease.Subject("lease", node, "p", lease.VerbRelease)
	can := lease.Subject("lease", node, "p", lease.VerbCancel)
	ok := func(slots int64) lease.AcquireRequest {
		return lease.AcquireRequest{RequestID: "r" + fmt.Sprint(slots), Holder: "h", Slots: slots}
	}
	cases := []struct {
		name    string
		subject string
		body    any
		code    lease.Code
	}{
		{"empty body", acq, "", lease.CodeBadRequest},
		{"malformed JSON", acq, "{", lease.CodeBadRequest},
		{"not an object", acq, "[1,2]", lease.CodeBadRequest},
		{"JSON null", acq, "null", lease.CodeBadRequest},
		{"wrong type", acq, `{"request_id":"a","holder":"h","slots":"two"}`, lease.CodeBadRequest},
		{"slots overflow", acq, `{"request_id":"a","holder":"h","slots":1e40}`, lease.CodeBadRequest},
		{"missing request id", acq, lease.AcquireRequest{Holder: "h", Slots: 1}, lease.CodeBadRequest},
		{"request id with a dot", acq, lease.AcquireRequest{RequestID: "a.b", Holder: "h", Slots: 1}, lease.CodeBadRequest},
		{"request id with a wildcard", acq, lease.AcquireRequest{RequestID: "a*", Holder: "h", Slots: 1}, lease.CodeBadRequest},
		{"missing holder", acq, lease.AcquireRequest{RequestID: "a", Slots: 1}, lease.CodeBadRequest},
		{"zero slots", acq, ok(0), lease.CodeInvalidSlots},
		{"negative slots", acq, ok(-1), lease.CodeInvalidSlots},
		{"slots above capacity", acq, ok(3), lease.CodeExceedsCapacity},
		{"negative wait", acq, lease.AcquireRequest{RequestID: "a", Holder: "h", Slots: 1, WaitMs: -1}, lease.CodeBadRequest},
		{"unknown pool", lease.Subject("lease", node, "nope", lease.VerbAcquire), ok(1), lease.CodeUnknownPool},
		{"renew malformed", ren, "{x", lease.CodeBadRequest},
		{"renew unknown lease", ren, lease.RenewRequest{LeaseID: "nope", Token: 1}, lease.CodeLeaseNotFound},
		{"renew wrong token", ren, lease.RenewRequest{LeaseID: l.ID(), Token: l.Token() + 1}, lease.CodeTokenMismatch},
		{"renew unknown pool", lease.Subject("lease", node, "nope", lease.VerbRenew), lease.RenewRequest{LeaseID: l.ID(), Token: l.Token()}, lease.CodeUnknownPool},
		{"release wrong token", rel, lease.ReleaseRequest{LeaseID: l.ID(), Token: 0}, lease.CodeTokenMismatch},
		{"release unknown lease", rel, lease.ReleaseRequest{LeaseID: "nope", Token: 1}, lease.CodeLeaseNotFound},
		{"release bad lease id", rel, lease.ReleaseRequest{LeaseID: "../x", Token: 1}, lease.CodeBadRequest},
		{"cancel malformed", can, "nope", lease.CodeBadRequest},
		{"cancel without holder", can, lease.CancelRequest{RequestID: "x"}, lease.CodeBadRequest},
		{"renew without lease id", ren, lease.RenewRequest{Token: 1}, lease.CodeBadRequest},
		{"retry with other slots", acq, lease.AcquireRequest{RequestID: l.ID(), Holder: c.Holder(), Slots: 2}, lease.CodeConflict},
		{"cancel another holder's request", can, lease.CancelRequest{RequestID: l.ID(), Holder: "someone-else"}, lease.CodeConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := harness.Request(t, nc, tc.subject, tc.body)
			if r.Status != lease.StatusError || r.Error == nil || r.Error.Code != tc.code || r.Error.Message == "" {
				t.Fatalf("reply %+v, want error %s with a message", r, tc.code)
			}
		})
	}
	// The client surfaces the same codes as errors.
	if _, err := c.Acquire(context.Background(), "p", 0); !errors.Is(err, lease.ErrInvalidSlots) {
		t.Fatalf("client slots 0: %v", err)
	}
	if _, err := c.Acquire(context.Background(), "nope", 1); !errors.Is(err, lease.ErrUnknownPool) {
		t.Fatalf("client unknown pool: %v", err)
	}
	// A node with no manager is a clear error, not a hang.
	other := harness.Client(t, srv.URL, "no-such-node", lease.WithNoManagerWait(300*time.Millisecond))
	if _, err := other.Acquire(context.Background(), "p", 1); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("acquire on a node without a manager: %v", err)
	}
	// Nothing above hurt the manager or the lease.
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 0 {
		t.Fatalf("stats after bad input: %+v", s)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("the good lease: %v", err)
	}
}

// gatedStore holds every call of one kind (Create or Delete) until the test
// opens the gate, so a request can be made to arrive while that write is in
// flight.
type gatedStore struct {
	manager.Store
	op      string // "create" or "delete"
	entered chan struct{}
	gate    chan struct{}
	// failOnce, if set before the gate opens, fails the held call with it
	// instead of passing it on; later calls pass.
	failOnce error
	failed   atomic.Bool
	opened   sync.Once
}

// open lets the held call, and every later one, through; a test's cleanup
// opens it too, so that a test failing early does not leave the manager's
// Close waiting for a held write.
func (g *gatedStore) open() { g.opened.Do(func() { close(g.gate) }) }

func (g *gatedStore) hold(op string) error {
	if g.op == op {
		select {
		case g.entered <- struct{}{}:
		case <-g.gate: // open: nobody waits to hear of calls any more
		}
		<-g.gate
		if g.failOnce != nil && g.failed.CompareAndSwap(false, true) {
			return g.failOnce
		}
	}
	return nil
}

func (g *gatedStore) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	if err := g.hold("create"); err != nil {
		return 0, err
	}
	return g.Store.Create(ctx, key, value, ttl)
}

func (g *gatedStore) Delete(ctx context.Context, key string, rev uint64) error {
	if err := g.hold("delete"); err != nil {
		return err
	}
	return g.Store.Delete(ctx, key, rev)
}

// startGated starts a manager for one 1-slot pool "p" whose store holds op.
func startGated(t *testing.T, op string) (*harness.Server, *harness.Node, *gatedStore) {
	t.Helper()
	return startGatedDelay(t, op, 0)
}

// startGatedDelay is startGated with a queue entry delay (0: the default).
func startGatedDelay(t *testing.T, op string, delay time.Duration) (*harness.Server, *harness.Node, *gatedStore) {
	t.Helper()
	srv := harness.StartServer(t)
	var gs *gatedStore
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, QueueEntryDelay: delay, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}},
		func(s manager.Store) manager.Store {
			gs = &gatedStore{Store: s, op: op, entered: make(chan struct{}, 1), gate: make(chan struct{})}
			return gs
		})
	t.Cleanup(gs.open) // before the manager's Close
	return srv, n, gs
}

func TestCancelWhileGrantIsStoredReleasesIt(t *testing.T) {
	t.Parallel()
	srv, n, gs := startGated(t, "create")
	nc := harness.Connect(t, srv.URL)
	sub, err := nc.SubscribeSync(lease.EventFilter("lease", node, "p", ""))
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	acqReplies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(lease.AcquireRequest{RequestID: "race", Holder: "h", Slots: 1})
	if err := nc.PublishRequest(lease.Subject("lease", node, "p", lease.VerbAcquire), inbox, body); err != nil {
		t.Fatal(err)
	}
	<-gs.entered // slots granted in memory, record being written
	r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbCancel), lease.CancelRequest{RequestID: "race", Holder: "h"})
	if r.Status != lease.StatusCancelled {
		t.Fatalf("cancel reply %+v", r)
	}
	gs.open()
	harness.Eventually(t, 5*time.Second, "the raced grant given back", func() bool {
		s := harness.PoolStats(t, n.Manager, "p")
		return s.InUse == 0 && len(n.Manager.Leases()) == 0
	})
	// The record written for the raced grant is gone from the store too.
	if _, _, err := n.Store.Get(context.Background(), lease.RecordKey(node, "p", "race")); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("record of the raced grant: %v", err)
	}
	// The acquirer never hears of a grant it cancelled.
	if msg, err := acqReplies.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("acquirer got %q after cancelling", msg.Data)
	}
	kinds := eventKinds(t, sub, 3)
	if len(kinds) != 2 || kinds[0] != lease.EventRequested || kinds[1] != lease.EventCancelled {
		t.Fatalf("events %v", kinds)
	}
}

func TestCancelAfterGrantReleasesIt(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "x", Holder: "h", Slots: 1})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire %+v", r)
	}
	r = harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbCancel), lease.CancelRequest{RequestID: "x", Holder: "h"})
	if r.Status != lease.StatusReleased {
		t.Fatalf("cancel of a granted request: %+v", r)
	}
	harness.Eventually(t, 5*time.Second, "slots back", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
}

// eventKinds reads up to max events, stopping early when none comes for a while.
func eventKinds(t *testing.T, sub *nats.Subscription, max int) []lease.EventKind {
	t.Helper()
	var kinds []lease.EventKind
	events := harness.ReadEvents(sub)
	for len(kinds) < max {
		ev, _, err := events.Next(time.Second)
		if err != nil {
			break
		}
		kinds = append(kinds, ev.Kind)
	}
	return kinds
}

func TestRetryEdgeCases(t *testing.T) {
	t.Parallel()
	var ignored atomic.Int64 // requests the reply rule refused or ignored
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}, ReplyRefused: func() { ignored.Add(1) }})
	nc := harness.Connect(t, srv.URL)
	acq := lease.Subject("lease", node, "p", lease.VerbAcquire)
	req := lease.AcquireRequest{RequestID: "r1", Holder: "h", Slots: 1}

	// A retry answered from an earlier grant says so: the holder must
	// confirm before trusting its own deadline.
	first := harness.Request(t, nc, acq, req)
	retry := harness.Request(t, nc, acq, req)
	if first.Existing || !retry.Existing || retry.Lease == nil || retry.Lease.Token != first.Lease.Token {
		t.Fatalf("first %+v, retry %+v", first, retry)
	}

	rel := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "r1", Token: first.Lease.Token})
	if rel.Status != lease.StatusReleased {
		t.Fatalf("release %+v", rel)
	}
	harness.Eventually(t, 5*time.Second, "released", func() bool { return len(n.Manager.Leases()) == 0 })

	// An acquire nobody can answer to is not granted.
	body, _ := json.Marshal(lease.AcquireRequest{RequestID: "noreply", Holder: "h", Slots: 1})
	if err := nc.Publish(acq, body); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Proven by the manager's own count of the request it ignored, not by
	// waiting a while: once counted, it was handled, and nothing was granted.
	harness.Eventually(t, 5*time.Second, "the acquire without a reply subject to be counted as ignored", func() bool { return ignored.Load() == 1 })
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 0 {
		t.Fatalf("acquire without a reply subject was granted: %+v", s)
	}

	// A queue entry left behind by a failed attempt is taken over, not an
	// error forever.
	stale, _ := json.Marshal(map[string]any{"id": "stale", "node": node, "pool": "p", "slots": 1, "holder": "h", "queued": true, "queued_at": 1})
	if _, err := n.Store.Create(context.Background(), lease.RecordKey(node, "p", "stale"), stale, 0); err != nil {
		t.Fatal(err)
	}
	r := harness.Request(t, nc, acq, lease.AcquireRequest{RequestID: "stale", Holder: "h", Slots: 1})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire over a stale queue entry: %+v", r)
	}
}

func TestRetryWhileReleasingIsNoGrant(t *testing.T) {
	t.Parallel()
	srv, n, gd := startGated(t, "delete")
	nc := harness.Connect(t, srv.URL)
	acq := lease.Subject("lease", node, "p", lease.VerbAcquire)
	req := lease.AcquireRequest{RequestID: "r1", Holder: "h", Slots: 1}
	first := harness.Request(t, nc, acq, req)
	rel := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "r1", Token: first.Lease.Token})
	if rel.Status != lease.StatusReleased {
		t.Fatalf("release %+v", rel)
	}
	<-gd.entered // the delete is in flight
	retry := harness.Request(t, nc, acq, req)
	if retry.Error == nil || retry.Error.Code != lease.CodeUnavailable {
		t.Fatalf("retry while releasing: %+v", retry)
	}
	gd.open()
	harness.Eventually(t, 5*time.Second, "released", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
	again := harness.Request(t, nc, acq, req)
	if again.Status != lease.StatusGranted || again.Lease.Token <= first.Lease.Token {
		t.Fatalf("acquire after the release: %+v", again)
	}
}
