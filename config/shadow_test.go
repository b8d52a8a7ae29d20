package config

import (
	"maps"
	"strings"
	"testing"
)

func TestPoolShadow(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{
		EnvPoolCapacities: "gpu=1,io=8", EnvClusterPools: "shared=2", EnvPoolRates: "api=5/s",
		EnvPoolShadow: "gpu,shared,api,default",
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"gpu": true, "shared": true, "api": true, "default": true, "io": false} {
		if p := c.poolNamed(name); p == nil || p.Shadow != want {
			t.Errorf("pool %s = %+v, want Shadow %v", name, p, want)
		}
	}
}

func TestPoolShadowErrors(t *testing.T) {
	base := map[string]string{EnvPoolCapacities: "gpu=2"}
	for _, tc := range []struct{ name, value, want string }{
		{"unknown pool", "gpu,tpu", `POOL_SHADOW: entry "tpu": no pool "tpu" (name it in POOL_CAPACITIES, CLUSTER_POOLS or POOL_RATES first)`},
		{"twice", "gpu,gpu", `POOL_SHADOW: entry "gpu": duplicate name "gpu"`},
		{"not a name", "gpu=1", `POOL_SHADOW: entry "gpu=1": invalid name "gpu=1"`},
		{"empty entry", "gpu,", `POOL_SHADOW: entry ""`},
		{"space", "gpu, default", `POOL_SHADOW: entry " default": must not contain spaces`},
	} {
		m := maps.Clone(base)
		m[EnvPoolShadow] = tc.value
		if _, err := LoadManagerFrom(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: POOL_SHADOW=%s: err = %v, want it to contain %q", tc.name, tc.value, err, tc.want)
		}
	}
}
