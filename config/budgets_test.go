package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
)

func TestPoolBudgets(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1", EnvPoolCapacities: "llm=8", EnvClusterPools: "shared=5",
		EnvPoolRates: "calls=60/m", EnvPoolBudgets: "llm=100000/m,shared=5000/h,calls=1000/s,tokens=1099511627776/h", EnvPoolPolicies: "tokens=priority"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Pool{
		{Name: "calls", Capacity: MaxCapacity, Rate: pools.Rate{Slots: 60, Per: time.Minute}, Burst: 1, Budget: pools.Rate{Slots: 1000, Per: time.Second}},
		{Name: "default", Capacity: 4},
		{Name: "llm", Capacity: 8, Budget: pools.Rate{Slots: 100000, Per: time.Minute}},
		// Named only in POOL_BUDGETS: a node pool with a budget and no
		// concurrency limit, which the queue policies may name.
		{Name: "tokens", Capacity: MaxCapacity, Budget: pools.Rate{Slots: 1 << 40, Per: time.Hour}, Policy: "priority"},
	}
	if !reflect.DeepEqual(c.Pools, want) {
		t.Fatalf("pools\n %+v\nwant\n %+v", c.Pools, want)
	}
	wantCluster := []Pool{{Name: "shared", Capacity: 5, Budget: pools.Rate{Slots: 5000, Per: time.Hour}}}
	if !reflect.DeepEqual(c.ClusterPools, wantCluster) {
		t.Fatalf("cluster pools %+v, want %+v", c.ClusterPools, wantCluster)
	}
}

func TestPoolBudgetErrors(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"llm=100000", `POOL_BUDGETS: entry "llm=100000": budget "100000": want N/s, N/m or N/h, e.g. 100000/m`},
		{"llm=5/d", `POOL_BUDGETS: entry "llm=5/d": budget "5/d": unit "d" is not s, m or h`},
		{"llm=0/m", `POOL_BUDGETS: entry "llm=0/m": budget must be a positive integer`},
		{"llm=1099511627777/m", `POOL_BUDGETS: entry "llm=1099511627777/m": budget must be at most 1099511627776`},
		{"llm=-3/m", `POOL_BUDGETS: entry "llm=-3/m": budget must be a positive integer`},
		{"a.b=1/s", `POOL_BUDGETS: entry "a.b=1/s": invalid name "a.b"`},
		{"llm=1/s,llm=2/s", `POOL_BUDGETS: entry "llm=2/s": duplicate name "llm"`},
	} {
		_, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1", EnvPoolBudgets: tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.value, err, tc.want)
		}
	}
}
