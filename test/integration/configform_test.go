package integration

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"
)

// The real leasemgr refuses every leniency issue 14 found, at start-up:
// exit 2, one message naming the variable and what is wrong, and nothing
// started — the embedded server's store directory is never created. An
// unresolvable HTTP_ADDR used to fail with exit 1 after the embedded
// server had started.
func TestConfigFormRefusedBeforeStarting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		set  string // VAR=value, over a good manager environment
		says string
	}{
		{"HTTP_ADDR=no-such-host.invalid:8080", `HTTP_ADDR: "no-such-host.invalid:8080": host no-such-host.invalid does not resolve`},
		{"LEASE_TTL=2562047h", `LEASE_TTL: "2562047h": must be at most 24h`},
		{"NODE_ID=EVENTS", `NODE_ID: "EVENTS": is reserved, in any case`},
		{"POOL_CAPACITIES=gpu=+1", `POOL_CAPACITIES: entry "gpu=+1": capacity must not have a '+' sign`},
		{"POOL_CAPACITIES=gpu=01", `POOL_CAPACITIES: entry "gpu=01": capacity must not have leading zeros`},
		{"POOL_CAPACITIES=gpu=1, io=2", `POOL_CAPACITIES: entry " io=2": must not contain spaces`},
		{"POOL_CAPACITIES=gpu=9223372036854775807", `POOL_CAPACITIES: entry "gpu=9223372036854775807": capacity must be at most 1099511627776`},
		{"EXECUTOR_MAX_CONCURRENCY=+4", `EXECUTOR_MAX_CONCURRENCY: "+4": value must not have a '+' sign`},
		{"NATS_REPLICAS= 1", `NATS_REPLICAS: " 1": must not have spaces around it`},
		{"POOL_RATES=gpu=60/min", `POOL_RATES: entry "gpu=60/min": rate "60/min": unit "min" is not s, m or h`},
		{"POOL_RATE_BURST=gpu=5", `POOL_RATE_BURST: entry "gpu=5": pool "gpu" has no rate (give it one in POOL_RATES first)`},
		{"POOL_SHADOW=gpu,tpu", `POOL_SHADOW: entry "tpu": no pool "tpu" (name it in POOL_CAPACITIES, CLUSTER_POOLS or POOL_RATES first)`},
	} {
		t.Run(tt.set, func(t *testing.T) {
			env, _ := managerEnv(t, "form", "gpu=1", "15s")
			env = append(env, tt.set) // the last value of a variable wins
			p := start(t, env, "leasemgr")
			code := p.Wait(t, 30*time.Second)
			out := p.Output()
			if code != 2 || !strings.Contains(out, tt.says) {
				t.Fatalf("exit %d, want 2 saying %q:\n%s", code, tt.says, out)
			}
			name, _, _ := strings.Cut(tt.set, "=")
			if n := strings.Count("\n"+out, "\n"+name+": "); n != 1 {
				t.Errorf("%d errors for one bad variable, want 1:\n%s", n, out)
			}
			if _, err := os.Stat(envValue(env, "NATS_STORE_DIR")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the embedded server's store exists (%v): it started before the configuration was refused", err)
			}
		})
	}
}
