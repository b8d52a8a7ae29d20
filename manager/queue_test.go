package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// queueFive holds the only slot and queues five waiters through clients that
// do not poll during the test, so only the stored queue can bring their
// grants. It returns the holder and a channel of waiter indexes in grant
// order, closed once all ended.
func queueFive(t *testing.T, url string, n *harness.Node) (*lease.Lease, <-chan int) {
	t.Helper()
	c := harness.Client(t, url, node, lease.WithPollInterval(time.Minute), lease.WithRequestTimeout(time.Minute))
	h, order := queueBehind(t, c, "p", make([][]lease.AcquireOption, 5), true)
	// Wait until the five entries are stored.
	harness.Eventually(t, 5*time.Second, "queue entries stored", func() bool {
		return storedQueueEntries(t, n) == 5
	})
	return h, order
}

func storedQueueEntries(t *testing.T, n *harness.Node) int {
	t.Helper()
	count := 0
	w, err := n.Store.Watch(context.Background(), lease.NodeKeys(node))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ch := range w.Changes() {
		if ch.Op == manager.ChangeCaughtUp {
			break
		}
		var v struct {
			Queued bool `json:"queued"`
		}
		if ch.Op == manager.ChangePut && json.Unmarshal(ch.Value, &v) == nil && v.Queued {
			count++
		}
	}
	return count
}

// checkOrder reads queueBehind's grant order: waiters 0 to n-1, in
// their order of arrival, and no other.
func checkOrder(t *testing.T, order <-chan int, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for want := 0; ; want++ {
		select {
		case got, ok := <-order:
			switch {
			case !ok && want == n:
				return
			case !ok:
				t.Fatalf("%d of %d waiters granted", want, n)
			case got != want:
				t.Fatalf("grant %d went to waiter %d", want, got)
			}
		case <-deadline:
			t.Fatalf("%d of %d waiters granted in 20s", want, n)
		}
	}
}

func TestQueueSurvivesManagerRestartInOrder(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}}
	first := harness.StartManager(t, srv.URL, cfg)
	h, order := queueFive(t, srv.URL, first)
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 5 {
		t.Fatalf("after restart: %+v, want 1 in use and 5 queued", s)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, order, 5)
	harness.Eventually(t, 5*time.Second, "queue entries cleaned up", func() bool {
		return storedQueueEntries(t, second) == 0 && harness.PoolStats(t, second.Manager, "p").InUse == 0
	})
}

func TestQueueSurvivesTakeoverInOrder(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	var overlap atomic.Int32
	a := startCandidate(t, srv.URL, "a", time.Second, &overlap, manager.PoolConfig{Name: "p", Capacity: 1})
	harness.Eventually(t, 5*time.Second, "a leads", a.serving.Load)
	b := startCandidate(t, srv.URL, "b", time.Second, &overlap, manager.PoolConfig{Name: "p", Capacity: 1})
	store := harness.StartManagerStore(t, srv.URL)
	h, order := queueFive(t, srv.URL, &harness.Node{Store: store})
	a.crash()
	harness.Eventually(t, 3*time.Second, "b takes over", b.serving.Load)
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, order, 5)
}

// inFlight is a 1-slot pool whose only lease, r1, has been released and
// whose delete is held at the store's gate: its slot is still busy.
type inFlight struct {
	t     *testing.T
	nc    *nats.Conn
	n     *harness.Node
	gd    *gatedStore
	first lease.Reply // r1's grant
}

func releaseInFlight(t *testing.T, entryDelay time.Duration) *inFlight {
	t.Helper()
	srv, n, gd := startGatedDelay(t, "delete", entryDelay)
	f := &inFlight{t: t, nc: harness.Connect(t, srv.URL), n: n, gd: gd}
	f.first = harness.Request(t, f.nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "r1", Holder: "h", Slots: 1})
	if f.first.Status != lease.StatusGranted {
		t.Fatalf("acquire %+v", f.first)
	}
	rel := harness.Request(t, f.nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "r1", Token: f.first.Lease.Token})
	if rel.Status != lease.StatusReleased {
		t.Fatalf("release %+v", rel)
	}
	<-gd.entered // r1's delete is in flight
	return f
}

// send publishes an acquire for id and returns the subscription its answers
// come to.
func (f *inFlight) send(id string) *nats.Subscription {
	f.t.Helper()
	return sendAcquire(f.t, f.nc, lease.AcquireRequest{RequestID: id, Holder: "h", Slots: 1})
}

// sendAcquire publishes req to pool "p" with an inbox of its own and
// returns the subscription its answers come to.
func sendAcquire(t *testing.T, nc *nats.Conn, req lease.AcquireRequest) *nats.Subscription {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	if err := nc.PublishRequest(lease.Subject("lease", node, "p", lease.VerbAcquire), inbox, body); err != nil {
		t.Fatal(err)
	}
	return sub
}

func (f *inFlight) waitQueued(requests int) {
	f.t.Helper()
	harness.Eventually(f.t, 5*time.Second, "requests waiting", func() bool { return harness.PoolStats(f.t, f.n.Manager, "p").QueuedRequests == requests })
}

func nextReply(t *testing.T, sub *nats.Subscription) lease.Reply {
	t.Helper()
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func wantQueued(t *testing.T, id string, sub *nats.Subscription, position int) {
	t.Helper()
	if r := nextReply(t, sub); r.Status != lease.StatusQueued || r.Position != position {
		t.Fatalf("acquire %s: %+v, want queued at %d", id, r, position)
	}
}

// A queued request granted before it has waited Config.QueueEntryDelay is
// never told it waits, announced queued, nor given a queue entry: under
// contention that is most requests, and the three would cost five messages
// a lease cycle.
func TestGrantedBeforeTheEntryDelayIsNeverToldItWaits(t *testing.T) {
	t.Parallel()
	f := releaseInFlight(t, time.Minute)
	queued, err := f.nc.SubscribeSync(lease.EventSubject("lease", node, "p", lease.EventQueued))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r2 := f.send("r2")
	f.waitQueued(1)
	if manager.QueueEntryDecided(f.n.Manager, "p", "r2") {
		t.Fatal("queue entry written before the request waited the delay")
	}
	f.gd.open()
	if r := nextReply(t, r2); r.Status != lease.StatusGranted || r.Lease.Token <= f.first.Lease.Token {
		t.Fatalf("r2's first answer: %+v, want its grant", r)
	}
	if msg, err := queued.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a queued event for a request granted before the delay: %s", msg.Data)
	}
	// The grant was written as a new key: no entry was there to replace.
	if got := storedQueueEntries(t, f.n); got != 0 {
		t.Fatalf("%d queue entries stored, want none", got)
	}
}

// A request still waiting after Config.QueueEntryDelay is told it waits,
// with its position, announced queued, and its queue entry written, in
// arrival order, so that a successor restores the queue in order.
func TestToldItWaitsAfterTheEntryDelay(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	f := releaseInFlight(t, delay)
	entry := func(id string) (queuedAt int64, ok bool) {
		data, _, err := f.n.Store.Get(context.Background(), lease.RecordKey(node, "p", id))
		if err != nil {
			return 0, false
		}
		var v struct {
			Queued   bool  `json:"queued"`
			QueuedAt int64 `json:"queued_at"`
		}
		if json.Unmarshal(data, &v) != nil || !v.Queued {
			return 0, false
		}
		return v.QueuedAt, true
	}
	queued, err := f.nc.SubscribeSync(lease.EventSubject("lease", node, "p", lease.EventQueued))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	r2 := f.send("r2")
	f.waitQueued(1)
	r3 := f.send("r3")
	wantQueued(t, "r2", r2, 1)
	if waited := time.Since(sent); waited < delay {
		t.Fatalf("r2 told it waits after %v, before the %v delay", waited, delay)
	}
	wantQueued(t, "r3", r3, 2)
	queuedEvents := harness.ReadEvents(queued)
	for _, id := range []string{"r2", "r3"} {
		ev, _, err := queuedEvents.Next(5 * time.Second)
		if err != nil || ev.RequestID != id {
			t.Fatalf("%s's queued event: %+v, %v", id, ev, err)
		}
	}
	var at2, at3 int64
	harness.Eventually(t, 5*time.Second, "both queue entries written", func() bool {
		var ok2, ok3 bool
		at2, ok2 = entry("r2")
		at3, ok3 = entry("r3")
		return ok2 && ok3
	})
	if at2 >= at3 {
		t.Fatalf("r2 queued at %d, not before r3 at %d", at2, at3)
	}

	f.gd.open()
	if r := nextReply(t, r2); r.Status != lease.StatusGranted || r.Lease.Token <= f.first.Lease.Token {
		t.Fatalf("r2 after the release was stored: %+v", r)
	}
	if s := harness.PoolStats(t, f.n.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 1 {
		t.Fatalf("stats %+v, want r2 holding and r3 queued", s)
	}
}

// A request gets its queue entry, and is told it waits, as soon as a
// release of its pool fails to be stored, however short its wait so far:
// it may wait a while longer, and a successor should find it.
func TestQueuedBehindFailingRelease(t *testing.T) {
	t.Parallel()
	f := releaseInFlight(t, time.Minute)
	r2 := f.send("r2")
	f.waitQueued(1)
	if msg, err := r2.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("answered before the delete failed: %s", msg.Data)
	}

	f.gd.failOnce = errors.New("injected: store unavailable")
	f.gd.open() // the delete fails once, then is retried and stored
	wantQueued(t, "r2", r2, 1)
	if r := nextReply(t, r2); r.Status != lease.StatusGranted {
		t.Fatalf("after the retried delete: %+v, want granted", r)
	}
	if !f.gd.failed.Load() {
		t.Fatal("the injected failure was not used")
	}
}

// entryGate holds every queue entry write (a Create without a TTL) until
// open is closed, and records how many were held at once.
type entryGate struct {
	manager.Store
	open            chan struct{}
	opening         sync.Once
	inFlight, most  atomic.Int32
	entered, passed atomic.Int32
}

func (g *entryGate) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	if strings.Contains(string(value), `"queued":true`) { // a queue entry, not a grant
		n := g.inFlight.Add(1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		g.entered.Add(1)
		<-g.open
		g.inFlight.Add(-1)
		g.passed.Add(1)
	}
	return g.Store.Create(ctx, key, value, ttl)
}

func (g *entryGate) release() { g.opening.Do(func() { close(g.open) }) }

// A burst of queued requests does not write its queue entries all at once:
// at most a bounded number of writes are in flight and the rest wait their
// turn in order. An entry whose request left the queue before its turn is
// never written.
func TestQueueEntryWritesAreBounded(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	var g *entryGate
	// Told at once: the test counts entries, not the delay before them.
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 30 * time.Second, QueueEntryDelay: time.Nanosecond, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}},
		func(s manager.Store) manager.Store {
			g = &entryGate{Store: s, open: make(chan struct{})}
			return g
		})
	t.Cleanup(g.release) // before the manager's Close, which waits for held writes
	nc := harness.Connect(t, srv.URL)
	acquire := lease.Subject("lease", node, "p", lease.VerbAcquire)
	if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "holder", Holder: "h", Slots: 1}); r.Status != lease.StatusGranted {
		t.Fatalf("first acquire: %+v", r)
	}
	const waiters, leaving = 100, 10
	for i := range waiters {
		id := fmt.Sprintf("q%03d", i)
		if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: id, Holder: "h", Slots: 1}); r.Status != lease.StatusQueued || r.Position != i+1 {
			t.Fatalf("acquire %s: %+v, want queued at %d", id, r, i+1)
		}
	}
	// Every request is answered, but only so many entry writes run.
	harness.Eventually(t, 5*time.Second, "entry writes started", func() bool { return g.entered.Load() >= 32 })
	if writers, waiting := manager.EntryWriters(n.Manager); writers != 32 || waiting != waiters-32 {
		t.Fatalf("%d queue entry writers with %d entries waiting for one, want 32 and %d", writers, waiting, waiters-32)
	}
	if got := g.entered.Load(); got != 32 { // each writer holds one write at the gate
		t.Fatalf("%d queue entry writes in flight at once, want 32", got)
	}
	// The last ones leave the queue while their entries still wait.
	for i := waiters - leaving; i < waiters; i++ {
		id := fmt.Sprintf("q%03d", i)
		if r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbCancel), lease.CancelRequest{RequestID: id, Holder: "h"}); r.Status != lease.StatusCancelled {
			t.Fatalf("cancel %s: %+v", id, r)
		}
	}
	g.release()
	harness.Eventually(t, 10*time.Second, "every entry write to end", func() bool {
		writers, waiting := manager.EntryWriters(n.Manager)
		return writers == 0 && waiting == 0
	})
	if got := storedQueueEntries(t, n); got != waiters-leaving {
		t.Errorf("%d queue entries stored, want %d", got, waiters-leaving)
	}
	if most, passed := g.most.Load(), g.passed.Load(); most != 32 || passed != waiters-leaving {
		t.Errorf("at most %d entry writes at once and %d written, want 32 and %d", most, passed, waiters-leaving)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != waiters-leaving {
		t.Errorf("%d requests queued, want %d", s.QueuedRequests, waiters-leaving)
	}
}

// A queued request whose client stopped re-sending it (it promised poll_ms)
// is dropped when its turn comes, and the slot goes to the next request;
// one whose client keeps re-sending, or that promised nothing, is granted.
func TestAbandonedQueuedRequestIsSkipped(t *testing.T) {
	t.Parallel()
	n, nc, events, acquire := rejectingPool(t)
	for _, bad := range []int64{-1, lease.MaxPollMs + 1, 1 << 62} {
		if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "poll-bad", Holder: "h", Slots: 1, PollMs: bad}); r.Status != lease.StatusError || r.Error.Code != lease.CodeBadRequest || !strings.Contains(r.Error.Message, "poll_ms") {
			t.Fatalf("poll_ms %d: %+v, want bad_request", bad, r)
		}
	}
	holder := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "holder", Holder: "h", Slots: 1})
	if holder.Status != lease.StatusGranted {
		t.Fatalf("holder: %+v", holder)
	}
	send := func(id string, pollMs int64) *nats.Subscription {
		return sendAcquire(t, nc, lease.AcquireRequest{RequestID: id, Holder: "h", Slots: 1, PollMs: pollMs})
	}
	silent := send("silent", 100)   // promises a re-send every 100ms, never sends again
	polling := send("polling", 100) // keeps its promise
	unpromised := send("no-promise", 0)
	wantQueued(t, "silent", silent, 1)
	wantQueued(t, "polling", polling, 2)
	wantQueued(t, "no-promise", unpromised, 3)
	// Past 3 x 100ms + 1s with no re-send of "silent"; "polling" re-sends.
	deadline := time.Now().Add(1600 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		body, _ := json.Marshal(lease.AcquireRequest{RequestID: "polling", Holder: "h", Slots: 1, PollMs: 100})
		if err := nc.PublishRequest(acquire, polling.Subject, body); err != nil {
			t.Fatal(err)
		}
	}
	if r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "holder", Token: holder.Lease.Token}); r.Status != lease.StatusReleased {
		t.Fatalf("release: %+v", r)
	}
	// "silent" hears it was dropped; "polling" gets the slot.
	for {
		r := nextReply(t, silent)
		if r.Status == lease.StatusQueued {
			continue
		}
		if r.Status != lease.StatusError || r.Error.Code != lease.CodeUnavailable || !strings.Contains(r.Error.Message, "abandoned") {
			t.Fatalf("silent: %+v, want unavailable (abandoned)", r)
		}
		break
	}
	var granted lease.Reply
	for granted = nextReply(t, polling); granted.Status == lease.StatusQueued; granted = nextReply(t, polling) {
	}
	if granted.Status != lease.StatusGranted || granted.Lease.ID != "polling" {
		t.Fatalf("polling: %+v, want its grant", granted)
	}
	rejected := harness.ReadEvents(events)
	for {
		ev, _, err := rejected.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("no rejected event for silent: %v", err)
		}
		if ev.RequestID == "poll-bad" {
			continue
		}
		if ev.RequestID != "silent" || ev.Code != lease.CodeUnavailable || !strings.Contains(ev.Message, "abandoned") {
			t.Fatalf("rejected event: %+v, want one for silent", ev)
		}
		break
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 1 {
		t.Fatalf("stats %+v, want 1 in use and no-promise still queued", s)
	}
	// "no-promise" made no promise: granted in its turn however quiet.
	if r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "polling", Token: granted.Lease.Token}); r.Status != lease.StatusReleased {
		t.Fatalf("release: %+v", r)
	}
	if r := nextReply(t, unpromised); r.Status != lease.StatusGranted {
		t.Fatalf("no-promise: %+v, want its grant", r)
	}
	// "silent" re-sent now is a new request, at the tail of an empty queue.
	if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "silent", Holder: "h", Slots: 1, PollMs: 100}); r.Status != lease.StatusQueued || r.Position != 1 {
		t.Fatalf("silent again: %+v, want queued at 1", r)
	}
}

// A client polling more rarely than poll_ms may promise makes no promise
// rather than sending a poll_ms the manager refuses.
func TestClientPollIntervalBeyondBound(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 30*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(48*time.Hour))
	l, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatalf("acquire with a 48h poll interval: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A wait past MaxWaitMs is bad_request naming wait_ms. Before, a wait from
// 7.5e12 ms on overflowed the deadline into the past: the request was
// queued and expired at once ("waited 0s").
func TestWaitMsPastTheBoundIsRefused(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 30*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	acquire := lease.Subject("lease", node, "p", lease.VerbAcquire)
	holder := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "holder", Holder: "h", Slots: 1})
	if holder.Status != lease.StatusGranted {
		t.Fatalf("holder: %+v", holder)
	}
	for _, bad := range []int64{-1, lease.MaxWaitMs + 1, 7_500_000_000_000, 1<<63 - 1} {
		if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "wait-bad", Holder: "h", Slots: 1, WaitMs: bad}); r.Status != lease.StatusError || r.Error.Code != lease.CodeBadRequest || !strings.Contains(r.Error.Message, "wait_ms") {
			t.Fatalf("wait_ms %d: %+v, want bad_request naming wait_ms", bad, r)
		}
	}
	// The longest wait is queued behind the holder, and waits.
	if r := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "wait-max", Holder: "h", Slots: 1, WaitMs: lease.MaxWaitMs}); r.Status != lease.StatusQueued {
		t.Fatalf("wait_ms %d: %+v, want queued", int64(lease.MaxWaitMs), r)
	}
}

// The client refuses a wait past MaxWaitMs itself, naming it, rather than
// sending a request the manager would refuse.
func TestClientRefusesWaitPastTheBound(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 30*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	client := harness.Client(t, srv.URL, node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.Acquire(ctx, "p", 1, lease.WithWait(31*24*time.Hour))
	if !errors.Is(err, lease.ErrBadRequest) || !strings.Contains(err.Error(), "30 days") {
		t.Fatalf("Acquire with a 31-day wait: %v, want bad_request naming the bound", err)
	}
	l, err := client.Acquire(ctx, "p", 1, lease.WithWait(lease.MaxWaitMs*time.Millisecond))
	if err != nil {
		t.Fatalf("Acquire with the longest wait: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The rejected event of a request dropped as abandoned carries the pool's
// figures after its slots were given back: it is the last event of the
// change, and a watcher must not see the slot in use for good.
func TestAbandonedRequestEventShowsSlotsFreed(t *testing.T) {
	t.Parallel()
	n, nc, events, acquire := rejectingPool(t)
	holder := harness.Request(t, nc, acquire, lease.AcquireRequest{RequestID: "holder", Holder: "h", Slots: 1})
	if holder.Status != lease.StatusGranted {
		t.Fatalf("holder: %+v", holder)
	}
	silent := sendAcquire(t, nc, lease.AcquireRequest{RequestID: "silent", Holder: "h", Slots: 1, PollMs: 100})
	wantQueued(t, "silent", silent, 1)
	time.Sleep(1600 * time.Millisecond) // past 3 x 100ms + 1s without a re-send
	if r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "holder", Token: holder.Lease.Token}); r.Status != lease.StatusReleased {
		t.Fatalf("release: %+v", r)
	}
	ev, _, err := harness.ReadEvents(events).Next(5 * time.Second)
	if err != nil {
		t.Fatalf("no rejected event for silent: %v", err)
	}
	if ev.RequestID != "silent" || !strings.Contains(ev.Message, "abandoned") {
		t.Fatalf("rejected event %+v, want silent's", ev)
	}
	if ev.Stats.InUse != 0 || ev.Stats.QueuedRequests != 0 {
		t.Errorf("rejected event stats %+v, want the pool empty after the drop", ev.Stats)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 0 {
		t.Errorf("pool stats %+v, want nothing in use", s)
	}
}

// rejectingPool starts a node with one pool "p" of one slot and returns it,
// a client connection, a subscription to p's rejected events and p's
// acquire subject.
func rejectingPool(t *testing.T) (*harness.Node, *nats.Conn, *nats.Subscription, string) {
	t.Helper()
	srv, n := startNode(t, 30*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	events, err := nc.SubscribeSync(lease.EventFilter("lease", node, "p", lease.EventRejected))
	if err != nil {
		t.Fatal(err)
	}
	return n, nc, events, lease.Subject("lease", node, "p", lease.VerbAcquire)
}

// A restored queue entry that the pool now refuses (its queue limit was
// lowered while no manager served) is answered, not only logged: its
// client, which does not poll during the test, hears queue_full at once,
// and the entry is deleted.
func TestRestoredEntryRefusedIsAnswered(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}}
	first := harness.StartManager(t, srv.URL, cfg)
	ctx := context.Background()
	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(time.Minute), lease.WithRequestTimeout(time.Minute))
	if _, err := c.Acquire(ctx, "p", 1); err != nil {
		t.Fatal(err)
	}
	var errcs []<-chan error
	for range 3 {
		_, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
		errcs = append(errcs, errc)
	}
	harness.Eventually(t, 5*time.Second, "queue entries stored", func() bool { return storedQueueEntries(t, first) == 3 })
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Pools = []manager.PoolConfig{{Name: "p", Capacity: 1, Options: pools.Options{MaxQueue: 1}}}
	second := harness.StartManager(t, srv.URL, cfg)
	for i, errc := range errcs[1:] {
		select {
		case err := <-errc:
			var le *lease.Error
			if !errors.As(err, &le) || le.Code != lease.CodeQueueFull {
				t.Fatalf("waiter %d: %v, want queue_full", i+1, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d: no answer to its refused queue entry", i+1)
		}
	}
	if s := harness.PoolStats(t, second.Manager, "p"); s.QueuedRequests != 1 {
		t.Fatalf("after restart: %+v, want 1 queued", s)
	}
	harness.Eventually(t, 5*time.Second, "refused entries deleted", func() bool { return storedQueueEntries(t, second) == 1 })
}
