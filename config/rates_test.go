package config

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
)

func TestPoolRates(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1", EnvPoolCapacities: "api=10", EnvClusterPools: "shared=5",
		EnvPoolRates: "api=60/m,embed=5/s,shared=100/h,tpm=90000/m", EnvPoolRateBurst: "api=5,shared=3", EnvPoolPolicies: "embed=fair"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Pool{
		{Name: "api", Capacity: 10, Rate: pools.Rate{Slots: 60, Per: time.Minute}, Burst: 5},
		{Name: "default", Capacity: 4},
		// Named only in POOL_RATES: a node pool with a rate and no
		// concurrency limit, which the queue policies may name.
		{Name: "embed", Capacity: MaxCapacity, Rate: pools.Rate{Slots: 5, Per: time.Second}, Burst: 5, Policy: "fair"},
		{Name: "tpm", Capacity: MaxCapacity, Rate: pools.Rate{Slots: 90000, Per: time.Minute}, Burst: 1500},
	}
	if !reflect.DeepEqual(c.Pools, want) {
		t.Fatalf("pools\n %+v\nwant\n %+v", c.Pools, want)
	}
	wantCluster := []Pool{{Name: "shared", Capacity: 5, Rate: pools.Rate{Slots: 100, Per: time.Hour}, Burst: 3}}
	if !reflect.DeepEqual(c.ClusterPools, wantCluster) {
		t.Fatalf("cluster pools %+v, want %+v", c.ClusterPools, wantCluster)
	}
}

func TestPoolRateErrors(t *testing.T) {
	base := map[string]string{EnvNodeID: "n1", EnvPoolCapacities: "api=2", EnvPoolRates: "api=60/m"}
	cases := []struct {
		name, variable, value, want string
	}{
		{"no unit", EnvPoolRates, "api=60", `POOL_RATES: entry "api=60": rate "60": want N/s, N/m or N/h, e.g. 60/m`},
		{"long unit", EnvPoolRates, "api=60/min", `POOL_RATES: entry "api=60/min": rate "60/min": unit "min" is not s, m or h`},
		{"zero", EnvPoolRates, "api=0/s", `POOL_RATES: entry "api=0/s": rate must be a positive integer`},
		{"too many", EnvPoolRates, "api=1099511627777/s", `rate must be at most 1099511627776`},
		{"fraction", EnvPoolRates, "api=0.5/s", `POOL_RATES: entry "api=0.5/s"`},
		{"bad name", EnvPoolRates, "a.b=1/s", `POOL_RATES: entry "a.b=1/s": invalid name "a.b"`},
		{"duplicate", EnvPoolRates, "api=1/s,api=2/s", `duplicate name "api"`},
		{"spaces", EnvPoolRates, "api=1/s, x=2/s", `POOL_RATES: entry " x=2/s": must not contain spaces`},
		{"burst without rate", EnvPoolRateBurst, "default=3", `POOL_RATE_BURST: entry "default=3": pool "default" has no rate (give it one in POOL_RATES first)`},
		{"burst of unknown pool", EnvPoolRateBurst, "nope=3", `POOL_RATE_BURST: entry "nope=3": pool "nope" has no rate`},
		{"zero burst", EnvPoolRateBurst, "api=0", `POOL_RATE_BURST: entry "api=0": burst must be a positive integer`},
		{"burst with a sign", EnvPoolRateBurst, "api=+3", `burst must not have a '+' sign`},
		{"burst too large for the rate", EnvPoolRateBurst, "api=1099511627776", `POOL_RATE_BURST: entry "api=1099511627776": burst 1099511627776 at a rate of 60/m: too large`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := maps.Clone(base)
			m[tc.variable] = tc.value
			_, err := LoadManagerFrom(m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
