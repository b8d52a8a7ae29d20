package manager_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// A fair pool's stats carry its configured weights, within one budget per
// reply: a long TENANT_WEIGHTS over many fair pools cannot make the reply
// too large to send.
func TestStatsCarryWeightsWithinABudget(t *testing.T) {
	t.Parallel()
	weights := map[string]int{}
	for i := range 2000 {
		weights[fmt.Sprintf("tenant-%04d", i)] = 1 + i%5
	}
	fair := pools.Options{Policy: pools.PolicyFair, Weights: weights, DefaultWeight: 2}
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{
		{Name: "a", Capacity: 1, Options: fair}, {Name: "b", Capacity: 1, Options: fair},
		{Name: "c", Capacity: 1, Options: fair}, {Name: "plain", Capacity: 1},
	}})
	stats, err := harness.Client(t, srv.URL, "n1").Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, s := range stats {
		got[s.Name] = len(s.Weights)
		if s.Policy == pools.PolicyFair && s.DefaultWeight != 2 {
			t.Errorf("pool %s: default weight %d, want 2", s.Name, s.DefaultWeight)
		}
	}
	if got["a"] != 2000 || got["b"] != 2000 || got["c"] != 0 || got["plain"] != 0 {
		t.Fatalf("weights per pool %v: want a and b with 2000, c past the %d budget, plain none", got, lease.MaxStatsWeights)
	}
}
