package integration

import (
	"strings"
	"testing"
)

// executor submit refuses a job that could never run (issue 31: a job for a
// pool no node has was accepted and waited forever; one asking for more
// slots than the pool holds died after its attempts), naming what is
// wrong; --no-pool-check queues it anyway.
func TestSubmitRefusesJobsThatCanNeverRun(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "chk", "gpu=1", "15s")
	env = append(env, "POOL_RATES=api=60/m", "POOL_RATE_BURST=api=2")
	startManager(t, env, httpAddr)
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"unknown pool", []string{"--pool", "nosuch"}, `pool "nosuch": no lease manager has it (pools: api, default, gpu)`},
		{"more slots than the pool holds", []string{"--pool", "gpu", "--slots", "3"}, `pool "gpu": 3 slot(s), but no node grants more than 1 at once`},
		{"more slots than the rate's burst", []string{"--pool", "api", "--slots", "3"}, `pool "api": 3 slot(s), but no node grants more than 2 at once`},
		{"unknown further pool", []string{"--pool", "gpu", "--also-pool", "tpu"}, `pool "tpu": no lease manager has it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runExecutor(t, env, append(append([]string{"submit"}, tc.args...), "--", "true")...)
			if code != 2 || !strings.Contains(out, tc.says) {
				t.Fatalf("exit %d, want 2 saying %q:\n%s", code, tc.says, out)
			}
		})
	}
	if code, out := runExecutor(t, env, "submit", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("a job that can run: exit %d\n%s", code, out)
	}
	if code, out := runExecutor(t, env, "submit", "--pool", "later", "--no-pool-check", "--", "true"); code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("--no-pool-check for a pool that does not exist yet: exit %d\n%s", code, out)
	}
}
