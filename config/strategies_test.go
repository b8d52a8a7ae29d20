package config

import (
	"strings"
	"testing"
)

// Queue strategies: lifo, a fail-fast pool (POOL_MAX_QUEUE=<pool>=0) and
// POOL_ON_FULL, parsed onto the pools they name.
func TestQueueStrategies(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{
		EnvPoolCapacities: "gpu=2,io=8,api=4", EnvClusterPools: "shared=3",
		EnvPoolPolicies: "gpu=lifo,shared=lifo", EnvPoolMaxQueue: "gpu=3,io=0,shared=5",
		EnvPoolOnFull: "gpu=drop_oldest,api=refuse,shared=drop_oldest",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Pool{
		"default": {Name: "default", Capacity: 4},
		"api":     {Name: "api", Capacity: 4},
		"gpu":     {Name: "gpu", Capacity: 2, Policy: "lifo", MaxQueue: 3, OnFull: "drop_oldest"},
		"io":      {Name: "io", Capacity: 8, FailFast: true},
		"shared":  {Name: "shared", Capacity: 3, Policy: "lifo", MaxQueue: 5, OnFull: "drop_oldest"},
	}
	for _, p := range append(c.Pools, c.ClusterPools...) {
		if p != want[p.Name] {
			t.Errorf("pool %+v, want %+v", p, want[p.Name])
		}
	}
	// drop_oldest with the default queue bound is a ring buffer of the
	// default's length.
	if _, err := LoadManagerFrom(map[string]string{EnvPoolOnFull: "default=drop_oldest"}); err != nil {
		t.Errorf("drop_oldest with the default max queue: %v", err)
	}
}

func TestQueueStrategyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"unknown on full", map[string]string{EnvPoolOnFull: "default=drop_newest"},
			`POOL_ON_FULL: entry "default=drop_newest": unknown on-full behaviour "drop_newest" (want refuse or drop_oldest)`},
		{"on full of no pool", map[string]string{EnvPoolOnFull: "gpu=drop_oldest"},
			`POOL_ON_FULL: entry "gpu=drop_oldest": no pool "gpu"`},
		{"on full without =", map[string]string{EnvPoolOnFull: "drop_oldest"},
			`POOL_ON_FULL: entry "drop_oldest": missing "="`},
		{"on full with a space", map[string]string{EnvPoolOnFull: "default=refuse, default=drop_oldest"},
			`POOL_ON_FULL: entry " default=drop_oldest": must not contain spaces`},
		{"on full twice", map[string]string{EnvPoolOnFull: "default=refuse,default=drop_oldest"},
			`POOL_ON_FULL: entry "default=drop_oldest": duplicate name "default"`},
		{"drop_oldest without a queue", map[string]string{EnvPoolCapacities: "gpu=1", EnvPoolMaxQueue: "gpu=0", EnvPoolOnFull: "gpu=drop_oldest"},
			`POOL_ON_FULL: entry "gpu=drop_oldest": pool "gpu" has no queue (POOL_MAX_QUEUE=gpu=0): there is no oldest waiter to drop`},
		{"max queue 00", map[string]string{EnvPoolMaxQueue: "default=00"},
			`POOL_MAX_QUEUE: entry "default=00": max queue must not have leading zeros`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadManagerFrom(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			checkVarError(t, err, strings.SplitN(tc.want, ":", 2)[0])
		})
	}
}
