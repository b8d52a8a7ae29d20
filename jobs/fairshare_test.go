package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// Two tenants at weight 3:1 on a fair pool, every job of a submitted before
// any of b: over the first 100 jobs started, each tenant's share is within
// 10% of its weight's (a 75, b 25). In submission order b would start
// none of them. (It measured 200 until the suite's time mattered: the
// scheduler is deterministic, and 100 jobs take half the 2 minutes.)
func TestTenantSharesThroughTheQueue(t *testing.T) {
	t.Parallel()
	const measured, perA, perB = 100, 85, 30
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 4, Options: pools.Options{
			Policy: pools.PolicyFair, Weights: map[string]int{"a": 3, "b": 1}}}}})
	q := openQueue(t, srv.URL)
	for _, tc := range []struct {
		tenant string
		n      int
	}{{"a", perA}, {"b", perB}} {
		for range tc.n {
			s := spec("p", "true")
			s.Tenant = tc.tenant
			submit(t, q, s)
		}
	}

	// The order of grants, from the manager's events.
	var mu sync.Mutex
	var order []string
	nc := harness.Connect(t, srv.URL)
	_, err := nc.Subscribe(lease.EventFilter(lease.DefaultPrefix, "n1", "p", ""), func(m *nats.Msg) {
		evs, _ := lease.DecodeEvents(m.Data)
		for _, ev := range evs {
			if ev.Kind == lease.EventGranted {
				mu.Lock()
				order = append(order, ev.Tenant)
				mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	// Bounds only a stuck queue reaches (2 minutes failed on two cores at
	// load average 10-20).
	harness.Eventually(t, 5*time.Minute, "100 jobs started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= measured
	})
	mu.Lock()
	count := map[string]int{}
	for _, tenant := range order[:measured] {
		count[tenant]++
	}
	mu.Unlock()
	t.Logf("first %d jobs started: a %d, b %d", measured, count["a"], count["b"])
	for tenant, want := range map[string]float64{"a": 0.75 * measured, "b": 0.25 * measured} {
		if got := float64(count[tenant]); got < 0.9*want || got > 1.1*want {
			t.Errorf("tenant %s started %v of the first %d jobs, want %v ± 10%%", tenant, got, measured, want)
		}
	}
	// And the rest drains: nothing is left behind by the turns.
	harness.Eventually(t, 5*time.Minute, "every job run", func() bool {
		n, _ := stored(t, q, "p")
		return n == 0
	})
}

// A tenant's consumer deleted behind the executor's back (the server
// deletes idle ones after 15 minutes) is made again: the tenant's next job
// still runs.
func TestTenantConsumerComesBack(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	job := func() string {
		s := spec("p", "true")
		s.Tenant = "acme"
		return submit(t, q, s)
	}
	waitState(t, q, job(), jobs.StateSucceeded, 20*time.Second)
	js, err := jetstream.New(harness.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	name := q.Names().Consumer("p", jobs.Normal, jobs.TenantKey("acme"))
	if err := js.DeleteConsumer(context.Background(), q.Names().Stream, name); err != nil {
		t.Fatalf("deleting consumer %s: %v", name, err)
	}
	waitState(t, q, job(), jobs.StateSucceeded, 20*time.Second)
}
