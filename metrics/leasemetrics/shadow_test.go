package leasemetrics_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// A shadow pool has every lease_shadow_total series, at its count or 0;
// another pool only those it counted, and no unknown label value.
func TestShadowSeries(t *testing.T) {
	m := setup(t)
	m.SetPoolSource("n1", func() []lease.PoolStats {
		return []lease.PoolStats{
			{Name: "gpu", Stats: pools.Stats{Capacity: 1, InUse: 3, Shadow: true},
				ShadowCounts: lease.ShadowCounts{pools.ShadowCapacity: {pools.ShadowQueued: 2}}},
			{Name: "was", Stats: pools.Stats{Capacity: 1},
				ShadowCounts: lease.ShadowCounts{pools.ShadowRate: {pools.ShadowWouldWait: 5}, "budget_of_later": {pools.ShadowQueued: 1}}},
			{Name: "plain", Stats: pools.Stats{Capacity: 1}},
		}
	})
	fams := scrape(t)
	for _, r := range pools.ShadowReasons {
		for _, a := range pools.ShadowActions {
			want := 0.0
			if r == pools.ShadowCapacity && a == pools.ShadowQueued {
				want = 2
			}
			if got := value(t, fams, "lease_shadow_total", "node", "n1", "pool", "gpu", "reason", string(r), "action", string(a)); got != want {
				t.Errorf("gpu %s/%s = %v, want %v", r, a, got, want)
			}
		}
	}
	if got := value(t, fams, "lease_shadow_total", "node", "n1", "pool", "was", "reason", "rate", "action", "would_wait"); got != 5 {
		t.Errorf("a former shadow pool's count = %v, want 5", got)
	}
	if s := series(fams, "lease_shadow_total", "node", "n1", "pool", "was", "reason", "capacity", "action", "queued"); s != nil {
		t.Errorf("a former shadow pool has a series it never counted: %v", s)
	}
	if n := countSeries(fams, "lease_shadow_total", "pool", "was"); n != 1 {
		t.Errorf("a former shadow pool has %d series, want 1 (none for an unknown reason)", n)
	}
	if n := countSeries(fams, "lease_shadow_total", "pool", "plain"); n != 0 {
		t.Errorf("a pool never in shadow mode has %d series", n)
	}
	if n := countSeries(fams, "lease_shadow_total", "pool", "gpu"); n != len(pools.ShadowReasons)*len(pools.ShadowActions) {
		t.Errorf("a shadow pool has %d series", n)
	}
}

// countSeries counts the series of family name whose labels include
// label=value.
func countSeries(fams map[string]*dto.MetricFamily, name, label, value string) int {
	n := 0
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == label && l.GetValue() == value {
					n++
				}
			}
		}
	}
	return n
}
