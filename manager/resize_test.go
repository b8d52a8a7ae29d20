package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/test/harness"
)

func resize(t *testing.T, c *lease.Client, req lease.ResizeRequest) ([]lease.PoolStats, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Resize(ctx, req)
}

func TestResizeGrowShrinkAndReject(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 2})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)

	// Grow: the waiter fits now.
	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 3}}); err != nil {
		t.Fatal(err)
	}
	w := mustGrant(t, got, errc)

	// Shrink below in use: nothing new is granted until holders release enough.
	stats, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if stats[0].Capacity != 1 || stats[0].InUse != 3 || stats[0].Available != 0 {
		t.Fatalf("after shrink: %+v", stats[0])
	}
	got2, errc2, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	harness.Eventually(t, 5*time.Second, "two released", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 1 })
	select {
	case l := <-got2:
		t.Fatalf("granted above the shrunk capacity: %+v", l.Record())
	default:
	}
	_ = w.Release(ctx)
	l2 := mustGrant(t, got2, errc2)

	// Shrink below a waiter's size: it is refused, since it could never fit.
	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 3}}); err != nil {
		t.Fatal(err)
	}
	_, errc3, _ := harness.QueuedAcquire(t, c, ctx, "p", 3)
	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 2}}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc3; !errors.Is(err, lease.ErrExceedsCapacity) {
		t.Fatalf("too-large waiter after shrink: %v", err)
	}
	_ = l2.Release(ctx)
}

func TestResizeAddRemoveAndPersist(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}, {Name: "q", Capacity: 1}}}
	n := harness.StartManager(t, srv.URL, cfg)
	nc := harness.Connect(t, srv.URL)
	events, err := nc.SubscribeSync(lease.EventFilter("lease", node, "", lease.EventResized))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription before the first event
		t.Fatal(err)
	}
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()

	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"gpu": 2}}); err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(ctx, "gpu", 2)
	if err != nil {
		t.Fatalf("acquire on the added pool: %v", err)
	}
	// Removing a pool with holders is refused without force.
	if _, err := resize(t, c, lease.ResizeRequest{Remove: []string{"gpu"}}); !errors.Is(err, lease.ErrPoolBusy) {
		t.Fatalf("remove busy pool: %v", err)
	}
	// An idle configured pool can go.
	if _, err := resize(t, c, lease.ResizeRequest{Remove: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "q", 1); !errors.Is(err, lease.ErrUnknownPool) || !strings.Contains(err.Error(), `pool "q" was removed from node`) {
		t.Fatalf("acquire on a removed pool: %v, want unknown_pool saying it was removed", err)
	}
	for _, want := range []string{"added with capacity 2", "removed"} {
		msg, err := events.NextMsg(5 * time.Second)
		if err != nil || !strings.Contains(string(msg.Data), want) {
			t.Fatalf("resized event %q: %v %s", want, err, msg.Data)
		}
	}

	// The changes survive a restart and apply over the configured pools.
	_ = n.Manager.Close()
	n2 := harness.StartManager(t, srv.URL, cfg)
	if s := n2.Manager.Stats(); len(s) != 2 || s[0].Name != "gpu" || s[0].Capacity != 2 || s[0].InUse != 2 || s[1].Name != "p" {
		t.Fatalf("pools after restart: %+v", s)
	}
	if _, err := c.Acquire(ctx, "q", 1); !errors.Is(err, lease.ErrUnknownPool) || !strings.Contains(err.Error(), `pool "q" was removed from node`) {
		t.Fatalf("acquire on a pool removed before a restart: %v, want unknown_pool saying it was removed", err)
	}

	// Forced removal revokes the lease: its holder learns it lost it.
	if _, err := resize(t, c, lease.ResizeRequest{Remove: []string{"gpu"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), lease.ErrLeaseLost) || !strings.Contains(held.Err().Error(), `pool "gpu" was removed from node`) {
			t.Fatalf("Err = %v, want the lease lost because its pool was removed", held.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("holder of a force-removed pool not told")
	}

	// Reset: back to the configured pools.
	stats, err := resize(t, c, lease.ResizeRequest{Reset: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Name != "p" || stats[1].Name != "q" {
		t.Fatalf("after reset: %+v", stats)
	}
}

// A pool added at runtime queues at most rules.DefaultMaxQueue requests,
// as a configured pool without POOL_MAX_QUEUE does (docs/configuration.md
// once said unbounded), and a configured pool removed and added back keeps
// its configured bound; both survive a restart, which makes them again
// from the stored delta.
func TestResizeAddedPoolsQueueBound(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1, Options: pools.Options{MaxQueue: 1}}}}
	n := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"added": 1}, Remove: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := resize(t, c, lease.ResizeRequest{Set: map[string]int64{"p": 1}}); err != nil {
		t.Fatal(err)
	}
	bounds := func(m *manager.Manager, when string) {
		t.Helper()
		if s := harness.PoolStats(t, m, "added"); s.MaxQueue != rules.DefaultMaxQueue || s.Policy != "" { // "": fifo
			t.Errorf("%s: the added pool: %+v, want a FIFO queue of at most %d", when, s, rules.DefaultMaxQueue)
		}
		if s := harness.PoolStats(t, m, "p"); s.MaxQueue != 1 {
			t.Errorf("%s: the configured pool added back: %+v, want its configured max queue 1", when, s)
		}
	}
	bounds(n.Manager, "after the resize")

	// The bound the stats show is the one the pool holds to.
	if _, err := c.Acquire(ctx, "p", 1); err != nil { // held to the end, so the next one waits
		t.Fatal(err)
	}
	_, _, _ = harness.QueuedAcquire(t, c, ctx, "p", 1)
	if _, err := c.Acquire(ctx, "p", 1); !errors.Is(err, lease.ErrQueueFull) {
		t.Fatalf("a second waiter on the pool added back with max queue 1: %v, want queue_full", err)
	}

	_ = n.Manager.Close()
	n2 := harness.StartManager(t, srv.URL, cfg)
	bounds(n2.Manager, "after a restart")
}

func TestResizeBadRequests(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	subj := lease.ResizeSubject("lease", node)
	cases := []struct {
		name string
		body any
		code lease.Code
	}{
		{"malformed", "{", lease.CodeBadRequest},
		{"nothing", lease.ResizeRequest{}, lease.CodeBadRequest},
		{"zero capacity", lease.ResizeRequest{Set: map[string]int64{"p": 0}}, lease.CodeBadRequest},
		{"capacity over the maximum", lease.ResizeRequest{Set: map[string]int64{"p": pools.MaxCapacity + 1}}, lease.CodeBadRequest},
		{"int64 max capacity", lease.ResizeRequest{Set: map[string]int64{"q": 1<<63 - 1}}, lease.CodeBadRequest},
		{"bad name", lease.ResizeRequest{Set: map[string]int64{"a.b": 1}}, lease.CodeBadRequest},
		{"set and remove", lease.ResizeRequest{Set: map[string]int64{"p": 2}, Remove: []string{"p"}}, lease.CodeBadRequest},
		{"remove unknown", lease.ResizeRequest{Remove: []string{"nope"}}, lease.CodeUnknownPool},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := harness.Request(t, nc, subj, tc.body)
			if r.Error == nil || r.Error.Code != tc.code {
				t.Fatalf("reply %+v, want %s", r, tc.code)
			}
		})
	}
}
