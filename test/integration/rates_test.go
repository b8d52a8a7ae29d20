package integration

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Start rates as a user meets them: POOL_RATES and POOL_RATE_BURST, what
// leasemgr pools shows, executors spread out by the rate, a try-acquire
// told when to come back, a request over the burst refused, and a rate
// changed at runtime.
func TestRateLimitsAsAUserRunsThem(t *testing.T) {
	t.Parallel()
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
	watch := start(t, env, "leasemgr", "watch", "--pool", "api")
	eventually(t, 10*time.Second, "watch to start", func() bool { return strings.Contains(watch.Output(), "watching") })
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
	// leasemgr watch shows the bucket's level with every event.
	eventually(t, 10*time.Second, "watch to show the grants with the bucket's level", func() bool {
		return regexp.MustCompile(`granted .*\[in_use=\d/2 queued=\d tokens=0/2\]`).MatchString(watch.Output())
	})

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
	eventually(t, 10*time.Second, "watch to show what the resizes changed", func() bool {
		o := watch.Output()
		return strings.Contains(o, "resized   rt/api rate 120/m burst 2 -> 600/m burst 10") && strings.Contains(o, "rate 600/m burst 10 -> off")
	})
}

// A cluster pool with a start rate, as a user runs it: two candidates list
// CLUSTER_POOLS=api=20 with POOL_RATES=api=120/m and a burst of 20; a third
// that lists another rate is reported. Executors keep asking; the serving
// manager is SIGKILLed mid-run. The granted events (each stamped after its
// grant took its tokens) show at most 20 + 2t starts in any t from the
// start, and at most 2t in the t after the kill: the new manager's bucket
// started empty, so the takeover let no burst through.
func TestClusterRateAcrossATakeover(t *testing.T) {
	t.Parallel()
	host, hostHTTP := managerEnv(t, "host", "gpu=1", "6s")
	startManager(t, host, hostHTTP)
	rate := []string{"POOL_RATES=api=120/m", "POOL_RATE_BURST=api=20"}
	t0 := time.Now()
	envA, _ := joinNode(t, host, "ca", "gpu=1")
	envA = append(append(envA, "CLUSTER_POOLS=api=20", "LEADER_TTL=1s"), rate...)
	procA := start(t, envA, "leasemgr")
	envB, httpB := joinNode(t, host, "cb", "gpu=1")
	envB = append(append(envB, "CLUSTER_POOLS=api=20", "LEADER_TTL=1s"), rate...)
	procB := startManager(t, envB, httpB)
	procs := map[string]*proc{"ca": procA, "cb": procB}
	envs := map[string][]string{"ca": envA, "cb": envB}
	serving := waitServed(t, envB)
	other := map[string]string{"ca": "cb", "cb": "ca"}[serving]

	// A candidate with another rate is reported.
	envC, httpC := joinNode(t, host, "cc", "gpu=1")
	envC = append(envC, "CLUSTER_POOLS=api=20", "LEADER_TTL=1s", "POOL_RATES=api=60/m")
	procC := startManager(t, envC, httpC)
	const want = "warning: cluster pool api: capacity 20, rate 120/m burst 20 on ca, cb; capacity 20, rate 60/m burst 1 on cc"
	eventually(t, time.Minute, "/readyz to report the other rate", func() bool {
		_, body := readyz(t, httpB)
		return strings.Contains(body, want)
	})
	_ = procC.cmd.Process.Signal(syscall.SIGTERM)
	procC.Wait(t, 20*time.Second)

	watch := start(t, envs[other], "leasemgr", "watch", "--node", "cluster", "--kind", "granted", "--json")
	eventually(t, time.Minute, "watch to subscribe", func() bool { return strings.Contains(watch.Output(), "watching") })
	var killed time.Time
	runsAfter := 0 // runs started after the kill: each granted by the new leader
	// Waves until 8 s after the kill, counted in waves, not from t0: on a
	// loaded machine three waves took 40 s, and a run that ended at a time
	// from the start had no wave after the kill to judge. 40 waves only
	// stop a stuck run.
	for wave := 0; wave < 40; wave++ {
		var runs []*proc
		if !killed.IsZero() {
			runsAfter += 8
		}
		for range 8 {
			runs = append(runs, start(t, envs[other], "executor", "run", "--node", "cluster", "--pool", "api", "--", "true"))
		}
		for _, p := range runs {
			if code := p.Wait(t, 60*time.Second); code != 0 {
				t.Fatalf("executor run: exit %d:\n%s", code, p.Output())
			}
		}
		if killed.IsZero() && wave == 2 {
			killed = time.Now()
			_ = procs[serving].cmd.Process.Kill()
		}
		if !killed.IsZero() && time.Since(killed) > 8*time.Second {
			break
		}
	}
	if killed.IsZero() {
		t.Fatal("the serving manager was never killed")
	}
	grants := func() []time.Time {
		var starts []time.Time
		out := watch.Output()
		lines := strings.Split(out, "\n")
		if !strings.HasSuffix(out, "\n") {
			lines = lines[:len(lines)-1] // still being written
		}
		for _, line := range lines {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var ev struct {
				Time time.Time `json:"time"`
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("watch --json line %q: %v", line, err)
			}
			starts = append(starts, ev.Time)
		}
		return starts
	}
	// A grant's event may follow its reply: wait until the watch shows
	// the grant of every run started after the kill.
	eventually(t, time.Minute, "the watch to show every grant after the kill", func() bool {
		n := 0
		for _, at := range grants() {
			if !at.Before(killed) {
				n++
			}
		}
		return n >= runsAfter
	})
	starts := grants()
	slices.SortFunc(starts, time.Time.Compare)
	var before, after int
	for _, at := range starts {
		from0 := at.Sub(t0).Seconds()
		if at.Before(killed) {
			before++
			if n := before; float64(n) > 20+2*from0 {
				t.Errorf("%d starts by t=%.2fs from the start: over 20 + 2t", n, from0)
			}
			continue
		}
		after++
		if d := at.Sub(killed).Seconds(); float64(after) > 2*d {
			t.Errorf("%d starts %.2fs after the kill: over 2t, a burst after the takeover", after, d)
		}
	}
	t.Logf("%d starts before the kill, %d in the %v after it (120/m, burst 20)", before, after, time.Since(killed).Round(time.Millisecond))
	if before < 20 || after < 4 {
		t.Fatalf("too few starts to judge: %d before the kill, %d after", before, after)
	}
}
