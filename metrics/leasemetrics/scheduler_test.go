package leasemetrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/metrics/leasemetrics"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// schedFamilies are the per-share families of the fair scheduler.
var schedFamilies = []string{"lease_scheduler_selections_total", "lease_scheduler_deferrals_total", "lease_scheduler_deficit"}

// A fair pool's shares past MaxSchedulerKeys, the least busy, are folded
// into the _other series, whose counters make up the pool's totals; other
// pools have no scheduler series.
func TestSchedulerSeriesFoldPastTheBound(t *testing.T) {
	m := setup(t)
	n := leasemetrics.MaxSchedulerKeys + 2
	sc := &pools.SchedulerStats{Strategy: "deficit_round_robin", Quantum: 1, StarvationPromotions: 3}
	for i := range n {
		k := pools.KeyStats{Tenant: "t", Key: fmt.Sprintf("k%02d", i), InUse: int64(i), Selected: 1, Deferred: 2, Deficit: 1}
		if i == n-1 {
			k.Key = "" // the busiest: the tenant's requests without a key
		}
		sc.Keys = append(sc.Keys, k)
		sc.Selected += 1
		sc.Deferred += 2
	}
	sc.Selected += 10 // shares since forgotten
	m.SetPoolSource("n1", func() []lease.PoolStats {
		return []lease.PoolStats{{Name: "f", Stats: pools.Stats{Capacity: 1000, Policy: pools.PolicyFair}, Scheduler: sc},
			{Name: "g", Stats: pools.Stats{Capacity: 1}}}
	})
	fams := scrape(t)
	for _, name := range schedFamilies {
		if got := len(familySeries(fams, name, "f")); got != leasemetrics.MaxSchedulerKeys+1 {
			t.Errorf("%s has %d series of pool f, want %d keys and _other", name, got, leasemetrics.MaxSchedulerKeys)
		}
		if got := len(familySeries(fams, name, "g")); got != 0 {
			t.Errorf("%s has %d series of the fifo pool g", name, got)
		}
	}
	for _, key := range []string{"", "k50", "k02"} { // the busiest
		if got := value(t, fams, "lease_scheduler_selections_total", "node", "n1", "pool", "f", "tenant", "t", "key", key); got != 1 {
			t.Errorf("selections of key %q = %v, want 1", key, got)
		}
	}
	for _, key := range []string{"k00", "k01"} { // the least busy: folded
		if s := series(fams, "lease_scheduler_selections_total", "node", "n1", "pool", "f", "tenant", "t", "key", key); s != nil {
			t.Errorf("key %s, past the bound, has its own series", key)
		}
	}
	other := []string{"node", "n1", "pool", "f", "tenant", leasemetrics.OtherKey, "key", leasemetrics.OtherKey}
	if got := value(t, fams, "lease_scheduler_selections_total", other...); got != 2+10 {
		t.Errorf("_other selections = %v, want the 2 folded and the 10 forgotten", got)
	}
	if got := value(t, fams, "lease_scheduler_deferrals_total", other...); got != 4 {
		t.Errorf("_other deferrals = %v, want 4", got)
	}
	if got := value(t, fams, "lease_scheduler_deficit", other...); got != 2 {
		t.Errorf("_other deficit = %v, want 2", got)
	}
	if got := value(t, fams, "lease_scheduler_starvation_promotions_total", "node", "n1", "pool", "f"); got != 3 {
		t.Errorf("starvation promotions = %v, want 3", got)
	}
}

// familySeries is the series of family name for pool.
func familySeries(fams map[string]*dto.MetricFamily, name, pool string) []*dto.Metric {
	var out []*dto.Metric
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "pool" && l.GetValue() == pool {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// A real manager's fair pool: each key's grants are its selections; a key
// that goes idle is forgotten and its count moves to _other.
func TestSchedulerSeriesFromARealManager(t *testing.T) {
	m := setup(t)
	srv := harness.StartServer(t)
	node := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "f", Capacity: 1, Options: pools.Options{Policy: pools.PolicyFair}}}})
	m.SetPoolSource("n1", node.Manager.Stats)
	c := harness.Client(t, srv.URL, "n1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := c.Acquire(ctx, "f", 1, lease.WithKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "f", 1, lease.WithKey("b"))
	key := func(k string) []string { return []string{"node", "n1", "pool", "f", "tenant", "", "key", k} }
	fams := scrape(t)
	if v := value(t, fams, "lease_scheduler_selections_total", key("a")...); v != 1 {
		t.Errorf("a's selections = %v, want 1", v)
	}
	if v := value(t, fams, "lease_scheduler_deficit", key("b")...); v != 1 {
		t.Errorf("b's deficit while it waits its turn = %v, want its quantum, 1", v)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case err := <-errc:
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "a forgotten, its selection in _other", func() bool {
		return series(scrape(t), "lease_scheduler_selections_total", key("a")...) == nil
	})
	fams = scrape(t)
	if v := value(t, fams, "lease_scheduler_selections_total", key("b")...); v != 1 {
		t.Errorf("b's selections = %v, want 1", v)
	}
	if v := value(t, fams, "lease_scheduler_selections_total", "node", "n1", "pool", "f", "tenant", leasemetrics.OtherKey, "key", leasemetrics.OtherKey); v != 1 {
		t.Errorf("_other selections = %v, want a's 1", v)
	}
}
