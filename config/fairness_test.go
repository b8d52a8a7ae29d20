package config

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestFairnessVariables(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{
		EnvPoolCapacities: "gpu=4,io=8", EnvClusterPools: "shared=6", EnvPoolPolicies: "gpu=fair,shared=fair",
		EnvPoolKeyLimits: "gpu=2,shared=1", EnvPoolFairQuantum: "gpu=3", EnvPoolStarvationAge: "gpu=90s",
	})
	if err != nil {
		t.Fatal(err)
	}
	gpu, io, shared := c.poolNamed("gpu"), c.poolNamed("io"), c.poolNamed("shared")
	if gpu == nil || gpu.KeyLimit != 2 || gpu.Quantum != 3 || gpu.StarvationAge != 90*time.Second {
		t.Errorf("gpu = %+v", gpu)
	}
	if io == nil || io.KeyLimit != 0 || io.Quantum != 0 || io.StarvationAge != 0 {
		t.Errorf("io = %+v", io)
	}
	if shared == nil || shared.KeyLimit != 1 {
		t.Errorf("cluster pool shared = %+v", shared)
	}
}

func TestFairnessVariableErrors(t *testing.T) {
	base := map[string]string{EnvPoolCapacities: "gpu=2,fair=2,prio=2", EnvPoolPolicies: "fair=fair,prio=priority"}
	cases := []struct {
		name, variable, value, want string
	}{
		{"limit on fifo", EnvPoolKeyLimits, "gpu=1", `POOL_KEY_LIMITS: entry "gpu=1": pool "gpu" is fifo, not fair: a per-key limit needs POOL_POLICIES=gpu=fair`},
		{"limit on priority", EnvPoolKeyLimits, "prio=1", `POOL_KEY_LIMITS: entry "prio=1": pool "prio" is priority, not fair`},
		{"limit unknown pool", EnvPoolKeyLimits, "tpu=1", `POOL_KEY_LIMITS: entry "tpu=1": no pool "tpu"`},
		{"limit zero", EnvPoolKeyLimits, "fair=0", `POOL_KEY_LIMITS: entry "fair=0": key limit must be a positive integer`},
		{"limit over the maximum", EnvPoolKeyLimits, "fair=1099511627777", `key limit must be at most 1099511627776`},
		{"limit not a number", EnvPoolKeyLimits, "fair=two", `POOL_KEY_LIMITS: entry "fair=two"`},
		{"limit missing =", EnvPoolKeyLimits, "fair", `POOL_KEY_LIMITS: entry "fair": missing "="`},
		{"limit twice", EnvPoolKeyLimits, "fair=1,fair=2", `duplicate name "fair"`},
		{"limit with a space", EnvPoolKeyLimits, "fair=1, gpu=1", `POOL_KEY_LIMITS: entry " gpu=1": must not contain spaces`},
		{"quantum on fifo", EnvPoolFairQuantum, "gpu=2", `POOL_FAIR_QUANTUM: entry "gpu=2": pool "gpu" is fifo, not fair: a quantum needs POOL_POLICIES=gpu=fair`},
		{"quantum zero", EnvPoolFairQuantum, "fair=0", `POOL_FAIR_QUANTUM: entry "fair=0": quantum must be a positive integer`},
		{"quantum over the maximum", EnvPoolFairQuantum, "fair=1000001", `quantum must be at most 1000000`},
		{"age on priority", EnvPoolStarvationAge, "prio=1s", `POOL_STARVATION_AGE: entry "prio=1s": pool "prio" is priority, not fair: a starvation age needs POOL_POLICIES=prio=fair`},
		{"age not a duration", EnvPoolStarvationAge, "fair=10", `POOL_STARVATION_AGE: entry "fair=10": starvation age "10" must be a positive duration of at most 24h`},
		{"age negative", EnvPoolStarvationAge, "fair=-1s", `must be a positive duration`},
		{"age zero", EnvPoolStarvationAge, "fair=0s", `must be a positive duration`},
		{"age over the maximum", EnvPoolStarvationAge, "fair=25h", `must be a positive duration of at most 24h`},
	}
	for _, tc := range cases {
		m := maps.Clone(base)
		m[tc.variable] = tc.value
		if _, err := LoadManagerFrom(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %s=%s: err = %v, want it to contain %q", tc.name, tc.variable, tc.value, err, tc.want)
		}
	}
}
