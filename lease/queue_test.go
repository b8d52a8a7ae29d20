package lease_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// queueFive holds the only slot and queues five waiters through clients that
// do not poll during the test, so only the stored queue can bring their
// grants. It returns the holder and a channel of waiter indexes in grant order.
func queueFive(t *testing.T, url string, n *harness.Node) (*lease.Lease, <-chan int, *sync.WaitGroup) {
	t.Helper()
	ctx := context.Background()
	c := harness.Client(t, url, node, lease.WithPollInterval(time.Minute), lease.WithRequestTimeout(time.Minute))
	h, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		got, errc, pos := queuedAcquire(t, c, ctx, "p", 1)
		if pos != i+1 {
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
	// Wait until the five entries are stored.
	harness.Eventually(t, 5*time.Second, "queue entries stored", func() bool {
		return storedQueueEntries(t, n) == 5
	})
	return h, order, &wg
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
		if ch.Op == lease.ChangeCaughtUp {
			break
		}
		var v struct {
			Queued bool `json:"queued"`
		}
		if ch.Op == lease.ChangePut && json.Unmarshal(ch.Value, &v) == nil && v.Queued {
			count++
		}
	}
	return count
}

func checkOrder(t *testing.T, order <-chan int, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("waiters not all granted")
	}
	for want := range 5 {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
}

func TestQueueSurvivesManagerRestartInOrder(t *testing.T) {
	srv := harness.StartServer(t)
	cfg := lease.ManagerConfig{Node: node, TTL: 5 * time.Second, Pools: []lease.PoolConfig{{Name: "p", Capacity: 1}}}
	first := harness.StartManager(t, srv.URL, cfg)
	h, order, wg := queueFive(t, srv.URL, first)
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	if s := poolStats(t, second.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 5 {
		t.Fatalf("after restart: %+v, want 1 in use and 5 queued", s)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, order, wg)
	harness.Eventually(t, 5*time.Second, "queue entries cleaned up", func() bool {
		return storedQueueEntries(t, second) == 0 && poolStats(t, second.Manager, "p").InUse == 0
	})
}

func TestQueueSurvivesTakeoverInOrder(t *testing.T) {
	srv := harness.StartServer(t)
	var overlap atomic.Int32
	a := startCandidate(t, srv.URL, "a", time.Second, &overlap, lease.PoolConfig{Name: "p", Capacity: 1})
	harness.Eventually(t, 5*time.Second, "a leads", a.serving.Load)
	b := startCandidate(t, srv.URL, "b", time.Second, &overlap, lease.PoolConfig{Name: "p", Capacity: 1})
	store := harness.StartManagerStore(t, srv.URL)
	h, order, wg := queueFive(t, srv.URL, &harness.Node{Store: store})
	a.crash()
	harness.Eventually(t, 3*time.Second, "b takes over", b.serving.Load)
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, order, wg)
}
