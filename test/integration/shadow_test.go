package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// untilOwnStop is untilStopped with a stop file of each command's own.
const untilOwnStop = `date +%s%N > "$DIR/start.$NAME"; while [ ! -e "$DIR/stop.$NAME" ]; do sleep 0.05; done`

// Issue 42, shadow mode, as an operator tries it with the real binaries:
// a shadow pool of capacity 1 runs three `executor run`s at once and
// counts the two its capacity would have queued (pools view, events,
// metric); a shadow pool with only a rate and a fail-fast shadow pool count
// their reasons; a plain pool beside them still queues and refuses. The
// over-capacity leases and the counts ride out a restart of leasemgr, and
// a restart without POOL_SHADOW keeps the leases and makes newcomers wait
// until the pool is under its capacity, as a resize down does.
func TestShadowPoolsGrantAndCount(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "shadow", "gpu=1,ff=1,plain=1", "15s")
	env = append(env, "POOL_RATES=api=1/h", "POOL_MAX_QUEUE=ff=0", "POOL_SHADOW=gpu,api,ff")
	mgr := startManager(t, env, httpAddr)
	watch := start(t, env, "leasemgr", "watch", "--json", "--since", "1h", "--pool", "gpu", "--kind", "granted")
	dir := sharedDir(t)
	hold := func(pool, name string) *proc {
		return start(t, env, "executor", "run", "--pool", pool, "--writable", dir, "--env", "DIR="+dir, "--env", "NAME="+name, "--", "sh", "-c", untilOwnStop)
	}
	running := func(names ...string) func() bool {
		return func() bool {
			for _, n := range names {
				if !exists(filepath.Join(dir, "start."+n)) {
					return false
				}
			}
			return true
		}
	}

	// Three at once on a shadow pool of 1: all run (they never stop on
	// their own, so none could have waited for another).
	holders := []*proc{hold("gpu", "g0"), hold("gpu", "g1"), hold("gpu", "g2")}
	eventually(t, 60*time.Second, "three commands on gpu (capacity 1) to run at once", running("g0", "g1", "g2"))
	// Beside them a plain pool of 1 queues and refuses as ever.
	plainHolder := hold("plain", "p0")
	eventually(t, 30*time.Second, "the plain pool's holder", running("p0"))
	if code, out := runExecutor(t, env, "run", "--pool", "plain", "--no-wait", "--", "true"); code != 75 {
		t.Fatalf("executor run --no-wait on the busy plain pool: exit %d, want 75:\n%s", code, out)
	}
	// A fail-fast shadow pool runs what it would have refused (would_wait).
	ffHolder := hold("ff", "f0")
	eventually(t, 30*time.Second, "the fail-fast pool's holder", running("f0"))
	if code, out := runExecutor(t, env, "run", "--pool", "ff", "--", "true"); code != 0 {
		t.Fatalf("executor run on the busy fail-fast shadow pool: exit %d, want 0:\n%s", code, out)
	}
	// A shadow pool of 1 start an hour, its bucket empty at the start:
	// both runs start at once, the rate counted twice.
	for range 2 {
		if code, out := runExecutor(t, env, "run", "--pool", "api", "--", "true"); code != 0 {
			t.Fatalf("executor run on the shadow rate pool: exit %d, want 0:\n%s", code, out)
		}
	}

	type count struct {
		pool   string
		reason pools.ShadowReason
		action pools.ShadowAction
		n      uint64
	}
	want := []count{{"gpu", pools.ShadowCapacity, pools.ShadowQueued, 2}, {"ff", pools.ShadowCapacity, pools.ShadowWouldWait, 1}, {"api", pools.ShadowRate, pools.ShadowQueued, 2}}
	counted := func(ps map[string]lease.PoolStats) error {
		for _, c := range want {
			if got := ps[c.pool].ShadowCounts.Of(c.reason, c.action); got != c.n {
				return fmt.Errorf("pool %s: %s/%s counted %d, want %d (all: %v)", c.pool, c.reason, c.action, got, c.n, ps[c.pool].ShadowCounts)
			}
			if !ps[c.pool].Shadow {
				return fmt.Errorf("pool %s does not say it is in shadow mode", c.pool)
			}
		}
		if p := ps["plain"]; p.Shadow || p.ShadowCounts != nil || p.InUse != 1 {
			return fmt.Errorf("the plain pool: %+v, want no shadow, 1 in use", p)
		}
		return nil
	}
	eventually(t, 30*time.Second, "the shadow counts in /v1/pools", func() bool { return counted(httpPools(t, httpAddr)) == nil })
	if gpu := httpPools(t, httpAddr)["gpu"]; gpu.InUse != 3 || gpu.Capacity != 1 || gpu.QueuedRequests != 0 {
		t.Fatalf("gpu: %d in use of %d, %d queued; want 3 of 1, none queued", gpu.InUse, gpu.Capacity, gpu.QueuedRequests)
	}
	checkMetrics := func(when string) {
		t.Helper()
		for _, c := range want {
			if got := metricValue(t, httpAddr, "lease_shadow_total", "node", "shadow", "pool", c.pool, "reason", string(c.reason), "action", string(c.action)); got != float64(c.n) {
				t.Errorf("%s: lease_shadow_total{pool=%s,reason=%s,action=%s} = %v, want %d", when, c.pool, c.reason, c.action, got, c.n)
			}
		}
		if got := metricValue(t, httpAddr, "lease_shadow_total", "pool", "gpu", "reason", "rate", "action", "queued"); got != 0 {
			t.Errorf("%s: a shadow pool's uncounted series = %v, want 0", when, got)
		}
		if got := metricValue(t, httpAddr, "lease_shadow_total", "pool", "plain"); got != -1 {
			t.Errorf("%s: the plain pool has a lease_shadow_total series", when)
		}
	}
	checkMetrics("before the restart")
	checkPoolsText := func(when string) {
		t.Helper()
		code, out := runLeasemgr(t, env, "pools")
		for _, re := range []string{
			`(?m)^shadow\s+gpu\s+1\s+3\s+0\s+0\s+0\s+SHADOW fifo\s*$`,
			`(?m)^shadow\s+plain\s+1\s+1\s+0\s+0\s+0\s+fifo\s*$`,
			`(?m)^NODE\s+POOL\s+WOULD HAVE \(SHADOW\)\s+QUEUED\s+WOULD_WAIT\s+QUEUE_FULL\s+DROPPED\s*$`,
			`(?m)^shadow\s+gpu\s+capacity\s+2\s+0\s+0\s+0\s*$`,
			`(?m)^shadow\s+ff\s+capacity\s+0\s+1\s+0\s+0\s*$`,
			`(?m)^shadow\s+api\s+rate\s+2\s+0\s+0\s+0\s*$`,
			`node shadow pool gpu: shadow mode \(POOL_SHADOW\): its limits are counted, not enforced; in use may exceed capacity`,
		} {
			if code != 0 || !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("%s: leasemgr pools: exit %d, want a line matching %s:\n%s", when, code, re, out)
			}
		}
		if regexp.MustCompile(`(?m)^shadow\s+plain\s+\S+\s+\d`).MatchString(strings.SplitN(out, "WOULD HAVE", 2)[1]) {
			t.Errorf("%s: leasemgr pools: the plain pool has shadow counts:\n%s", when, out)
		}
	}
	checkPoolsText("before the restart")
	// The events: two of gpu's three grants say what the capacity would
	// have done.
	eventually(t, 30*time.Second, "the granted events of gpu", func() bool { return strings.Count(watch.Output(), `"kind":"granted"`) >= 3 })
	var shadowed int
	for _, line := range strings.Split(strings.TrimSpace(watch.Output()), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue // "replaying ... then following"
		}
		var ev lease.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("leasemgr watch --json: %q: %v", line, err)
		}
		if !ev.Stats.Shadow {
			t.Errorf("a granted event of gpu without stats.shadow: %s", line)
		}
		if ev.Shadow != "" {
			shadowed++
			if ev.Shadow != pools.ShadowCapacity || ev.ShadowAction != pools.ShadowQueued {
				t.Errorf("granted event: shadow %q/%q, want capacity/queued: %s", ev.Shadow, ev.ShadowAction, line)
			}
		}
	}
	if shadowed != 2 {
		t.Errorf("%d of gpu's granted events carry a shadow reason, want 2:\n%s", shadowed, watch.Output())
	}

	// A restart keeps the over-capacity leases and the counts.
	stopManager(t, mgr)
	mgr = startManager(t, env, httpAddr)
	if !strings.Contains(servingLine(t, mgr), "leases_restored=5") {
		t.Fatalf("the restarted manager did not restore the five leases (3 gpu, plain, ff):\n%s", mgr.Output())
	}
	if gpu := httpPools(t, httpAddr)["gpu"]; gpu.InUse != 3 || !gpu.Shadow {
		t.Fatalf("after the restart gpu has %d in use (shadow %v), want 3 in shadow mode", gpu.InUse, gpu.Shadow)
	}
	if err := counted(httpPools(t, httpAddr)); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	checkMetrics("after the restart")
	checkPoolsText("after the restart")

	// A restart without shadow mode: the leases stay, a newcomer waits
	// until the pool is under its capacity, and the counts stay.
	stopManager(t, mgr)
	off := append(append([]string(nil), env...), "POOL_SHADOW=")
	mgr = startManager(t, off, httpAddr)
	if !strings.Contains(servingLine(t, mgr), "leases_restored=5") {
		t.Fatalf("the manager restarted without shadow mode did not restore the five leases:\n%s", mgr.Output())
	}
	if code, out := runExecutor(t, off, "run", "--pool", "gpu", "--no-wait", "--", "true"); code != 75 {
		t.Fatalf("executor run --no-wait on gpu (3 of 1 held, shadow off): exit %d, want 75:\n%s", code, out)
	}
	waiter := hold("gpu", "w")
	eventually(t, 30*time.Second, "the newcomer to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })
	gpu := httpPools(t, httpAddr)["gpu"]
	if gpu.Shadow || gpu.InUse != 3 || gpu.ShadowCounts.Of(pools.ShadowCapacity, pools.ShadowQueued) != 2 {
		t.Fatalf("gpu after a restart without shadow mode: %+v; want no shadow, 3 in use, the counts kept", gpu)
	}
	for i, name := range []string{"g0", "g1"} {
		if err := os.WriteFile(filepath.Join(dir, "stop."+name), nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if code := holders[i].Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("holder %s exit %d over two restarts of leasemgr:\n%s", name, code, holders[i].Output())
		}
		eventually(t, 30*time.Second, "its slot to be given back", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == int64(2-i) })
		if exists(filepath.Join(dir, "start.w")) || queuedIn(t, httpAddr, "gpu") != 1 {
			t.Fatalf("the newcomer started with %d of 1 slots still held", 2-i)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop.g2"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the newcomer to start once gpu is under its capacity", running("w"))
	for _, name := range []string{"w", "p0", "f0"} {
		if err := os.WriteFile(filepath.Join(dir, "stop."+name), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []*proc{holders[2], waiter, plainHolder, ffHolder} {
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("command %d exit %d:\n%s", i, code, p.Output())
		}
	}
}
