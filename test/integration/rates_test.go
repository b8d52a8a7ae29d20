package integration

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Start rates as a user meets them: POOL_RATES and POOL_RATE_BURST, what
// leasemgr pools shows, executors spread out by the rate, a try-acquire
// told when to come back, a request over the burst refused, and a rate
// changed at runtime.
func TestRateLimitsAsAUserRunsThem(t *testing.T) {
	env, httpAddr := managerEnv(t, "rt", "api=2", "15s")
	env = append(env, "POOL_RATES=api=120/m,embed=5/s,slow=1/h", "POOL_RATE_BURST=api=2")
	startManager(t, env, httpAddr)

	code, out := runLeasemgr(t, env, "pools")
	for _, re := range []string{`rt\s+api\s+2\s+0\s+2\s+0\s+0\s+fifo rate=120/m burst=2 tokens=`, `rt\s+embed\s+unlimited\s+0\s+-\s+0\s+0\s+fifo rate=5/s burst=5 tokens=`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("leasemgr pools: exit %d, lacks %s:\n%s", code, re, out)
		}
	}

	// Five runs at 120/m (2/s): the two of a full bucket at once, then the
	// others half a second apart, whatever the capacity allows.
	began := time.Now()
	var runs []*proc
	for range 5 {
		runs = append(runs, start(t, env, "executor", "run", "--pool", "api", "--", "true"))
	}
	for _, p := range runs {
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Errorf("executor run: exit %d:\n%s", code, p.Output())
		}
	}
	if took := time.Since(began); took < 1400*time.Millisecond {
		t.Errorf("5 runs on a 120/m pool took %v: faster than the rate", took)
	}

	// A bucket that is empty (1/h, just started): a try-acquire is told
	// when to retry.
	code, out = runExecutor(t, env, "run", "--pool", "slow", "--no-wait", "--", "true")
	if code != 75 || !strings.Contains(out, "would_wait") || !strings.Contains(out, `1 slots not started at once in pool "slow": its rate 1/h has 0 of 1 tokens in the bucket`) || !regexp.MustCompile(`retry after (59m|1h)`).MatchString(out) {
		t.Fatalf("--no-wait on an empty bucket: exit %d:\n%s", code, out)
	}
	code, out = runExecutor(t, env, "run", "--pool", "embed", "--slots", "6", "--", "true")
	if code == 0 || !strings.Contains(out, "exceeds_capacity") || !strings.Contains(out, `pool "embed" starts at most 5 at once (rate 5/s, burst 5)`) {
		t.Fatalf("6 slots on a burst of 5: exit %d:\n%s", code, out)
	}

	// Changed at runtime, shown at once, and refused with a clear error
	// when malformed.
	code, out = runLeasemgr(t, env, "resize", "--rate", "api=600/m", "--burst", "api=10")
	if code != 0 || !regexp.MustCompile(`rt\s+api\s+2\s.*rate=600/m burst=10 tokens=`).MatchString(out) {
		t.Fatalf("resize --rate: exit %d:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"resize", "--rate", "api=60/min"}, 2, `--rate "api=60/min": rate "60/min": unit "min" is not s, m or h`},
		{[]string{"resize", "--burst", "api=0"}, 2, `--burst "api=0": want a burst from 1 to`},
		{[]string{"resize", "--rate", "api=off", "--burst", "api=3"}, 2, `pool "api"'s rate is turned off`},
		{[]string{"resize", "--burst", "default=3"}, 1, `bad_request: rates: pool "default" has no rate whose burst to change`},
	} {
		if code, out := runLeasemgr(t, env, tc.args...); code != tc.code || !strings.Contains(out, tc.says) {
			t.Errorf("%v: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.says, out)
		}
	}
	code, out = runLeasemgr(t, env, "resize", "--rate", "api=off")
	if code != 0 || strings.Contains(out, "rate=600/m") {
		t.Fatalf("resize --rate api=off: exit %d:\n%s", code, out)
	}
}
