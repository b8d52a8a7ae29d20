package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// managerEnv is the environment of one leasemgr on its own embedded server.
func managerEnv(t *testing.T, node, pools, ttl string) (env []string, httpAddr string) {
	t.Helper()
	httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return []string{
		"NODE_ID=" + node,
		"POOL_CAPACITIES=" + pools,
		"LEASE_TTL=" + ttl,
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", freePort(t)),
		"NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "js"),
		"HTTP_ADDR=" + httpAddr,
		"HOME=" + testHome(t),
	}, httpAddr
}

func startManager(t *testing.T, env []string, httpAddr string) *proc {
	t.Helper()
	m := start(t, env, "leasemgr")
	eventually(t, 20*time.Second, "leasemgr to be ready", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return m
}

// httpPools is the node's pools by name, as GET /v1/pools shows them.
func httpPools(t *testing.T, httpAddr string) map[string]lease.PoolStats {
	t.Helper()
	out := map[string]lease.PoolStats{}
	for _, s := range httpNodePools(t, httpAddr).Pools {
		out[s.Name] = s
	}
	return out
}

// httpNodePools is GET /v1/pools, strictly decoded: {"node", "pools"}.
func httpNodePools(t *testing.T, httpAddr string) lease.NodePools {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var np lease.NodePools
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&np); err != nil {
		t.Fatalf("GET /v1/pools: %v", err)
	}
	return np
}

// The README's walk-through: gpu=1, two executors at once, the second waits
// for the first, and watch shows the events.
func TestWalkthrough(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "laptop", "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	watch := start(t, env, "leasemgr", "watch")
	eventually(t, 10*time.Second, "watch to subscribe", func() bool { return strings.Contains(watch.Output(), "watching") })

	dir := sharedDir(t)
	// Each run holds its slot until the test has seen the second queued
	// (the file "go"), at most a minute: a fixed second let a loaded
	// machine end the first run before the second executor had asked.
	script := `echo "$LEASE_POOL $LEASE_SLOTS $LEASE_NODE $LEASE_TOKEN" > "$OUT/$NAME.env"; date +%s.%N > "$OUT/$NAME.start"; i=0; while [ ! -e "$OUT/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; date +%s.%N > "$OUT/$NAME.end"`
	first := start(t, env, "executor", "run", "--pool", "gpu", "--writable", dir, "--env", "OUT="+dir, "--env", "NAME=first", "--", "sh", "-c", script)
	eventually(t, 10*time.Second, "first executor to hold the slot", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })
	second := start(t, env, "executor", "run", "--pool", "gpu", "--writable", dir, "--env", "OUT="+dir, "--env", "NAME=second", "--", "sh", "-c", script)
	// The manager tells a waiter it is queued once it has waited a moment
	// (manager.Config.QueueEntryDelay): the second says so before the
	// first lets go.
	eventually(t, time.Minute, "the second executor to report its place in the queue", func() bool {
		return strings.Contains(second.Output(), "position 1 in queue")
	})
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := first.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("first executor exit %d", code)
	}
	if code := second.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("second executor exit %d", code)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if read("second.start") < read("first.end") {
		t.Fatalf("second ran before the first finished: started %s, first ended %s", read("second.start"), read("first.end"))
	}
	if !regexp.MustCompile(`^gpu 1 laptop [0-9]+$`).MatchString(read("first.env")) {
		t.Fatalf("lease environment of the worker: %q", read("first.env"))
	}
	eventually(t, 10*time.Second, "watch to show the whole story", func() bool {
		out := watch.Output()
		return strings.Count(out, "granted") == 2 && strings.Count(out, "released") == 2 &&
			strings.Contains(out, "queued") && strings.Contains(out, "position=1")
	})

	pools := start(t, env, "leasemgr", "pools")
	if code := pools.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("leasemgr pools exit %d", code)
	}
	if !regexp.MustCompile(`laptop\s+gpu\s+1\s+0\s+1\s+0`).MatchString(pools.Output()) ||
		!regexp.MustCompile(`laptop\s+default\s+4\s+0\s+4\s+0`).MatchString(pools.Output()) {
		t.Fatalf("leasemgr pools:\n%s", pools.Output())
	}
	pj := start(t, env, "leasemgr", "pools", "--json")
	pj.Wait(t, 10*time.Second)
	var parsed lease.NodePools
	if err := json.Unmarshal([]byte(pj.Output()), &parsed); err != nil || parsed.Node != "laptop" || len(parsed.Pools) != 2 {
		t.Fatalf("leasemgr pools --json: %v\n%s", err, pj.Output())
	}
	// One shape, one content: the CLI and the HTTP API agree.
	if web := httpNodePools(t, httpAddr); !reflect.DeepEqual(web, parsed) {
		t.Fatalf("GET /v1/pools %+v, leasemgr pools --json %+v", web, parsed)
	}

	// SIGTERM stops the manager cleanly.
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d after SIGTERM", code)
	}
}

func TestExecutorExitCodes(t *testing.T) {
	t.Parallel()
	// A short lease TTL, so that "lease lost" comes soon; LEASE_TTL must be
	// longer than LEADER_TTL (config refuses it otherwise).
	env, httpAddr := managerEnv(t, "codes", "gpu=1", "2s")
	env = append(env, "LEADER_TTL=1s")
	m := startManager(t, env, httpAddr)

	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"command's own code", []string{"run", "--pool", "gpu", "--", "sh", "-c", "exit 7"}, 7, ""},
		{"unknown pool", []string{"run", "--pool", "nope", "--", "true"}, 75, "unknown_pool"},
		{"slots above capacity", []string{"run", "--pool", "gpu", "--slots", "2", "--", "true"}, 75, "exceeds_capacity"},
		{"zero slots", []string{"run", "--pool", "gpu", "--slots", "0", "--", "true"}, 2, "--slots 0"},
		{"no command", []string{"run", "--pool", "gpu"}, 2, "no command"},
		{"missing binary", []string{"run", "--pool", "gpu", "--", "/no/such/binary"}, 1, "no/such/binary"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, env, "executor", tc.args...)
			if code := p.Wait(t, 20*time.Second); code != tc.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tc.code, p.Output())
			}
			if !strings.Contains(p.Output(), tc.says) {
				t.Fatalf("output does not say %q:\n%s", tc.says, p.Output())
			}
		})
	}

	t.Run("wait expired", func(t *testing.T) {
		holder := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "3")
		eventually(t, 10*time.Second, "slot held", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })
		p := start(t, env, "executor", "run", "--pool", "gpu", "--wait", "300ms", "--", "true")
		if code := p.Wait(t, 10*time.Second); code != 75 || !strings.Contains(p.Output(), "wait_expired") {
			t.Fatalf("exit %d, want 75 with wait_expired:\n%s", code, p.Output())
		}
		holder.Wait(t, 10*time.Second)
	})

	t.Run("lease lost", func(t *testing.T) {
		p := start(t, env, "executor", "run", "--pool", "gpu", "--kill-grace", "200ms", "--", "sleep", "30")
		// The executor must have heard of its grant: killing the manager
		// right after it stored the grant could lose the reply itself.
		eventually(t, 10*time.Second, "the executor holds its lease", func() bool { return strings.Contains(p.Output(), "granted") })
		// Without its manager the lease cannot be renewed: the executor
		// must stop the command at its deadline and say so.
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		m.Wait(t, 10*time.Second)
		if code := p.Wait(t, 10*time.Second); code != 76 || !strings.Contains(p.Output(), "lost") {
			t.Fatalf("exit %d, want 76 with lease lost:\n%s", code, p.Output())
		}
	})
}

func TestBadConfigurationStopsBeforeStarting(t *testing.T) {
	t.Parallel()
	env, _ := managerEnv(t, "bad", "gpu=0", "15s")
	p := start(t, env, "leasemgr")
	if code := p.Wait(t, 10*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if want := `POOL_CAPACITIES: entry "gpu=0": capacity must be a positive integer`; !strings.Contains(p.Output(), want) {
		t.Fatalf("output does not say %q:\n%s", want, p.Output())
	}
	env2, _ := managerEnv(t, "bad", "gpu=1", "500ms")
	p2 := start(t, env2, "leasemgr")
	if code := p2.Wait(t, 10*time.Second); code != 2 || !strings.Contains(p2.Output(), "LEASE_TTL") {
		t.Fatalf("exit %d, want 2 naming LEASE_TTL:\n%s", code, p2.Output())
	}
	// A lease TTL no running work can outlive a takeover with (README:
	// keep LEASE_TTL >= 2 x LEADER_TTL + 4s) is refused, naming both.
	env3, _ := managerEnv(t, "bad", "gpu=1", "4s")
	p3 := start(t, append(env3, "LEADER_TTL=5s"), "leasemgr")
	if code := p3.Wait(t, 10*time.Second); code != 2 || !strings.Contains(p3.Output(), `LEASE_TTL: "4s": LEASE_TTL (4s) must be longer than LEADER_TTL (5s)`) {
		t.Fatalf("exit %d, want 2 naming LEASE_TTL and LEADER_TTL:\n%s", code, p3.Output())
	}
}

// A lease TTL between LEADER_TTL and the rule's 2 x LEADER_TTL + 4s works,
// as tests with fast expiry want, with a warning at start.
func TestShortLeaseTTLWarns(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "short", "gpu=1", "3s")
	m := startManager(t, append(env, "LEADER_TTL=1s"), httpAddr)
	if out := m.Output(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "LEASE_TTL=3s is below 2 x LEADER_TTL + 4s = 6s") {
		t.Fatalf("no warning of the TTL rule at start:\n%s", out)
	}
}

// An executor killed with SIGKILL while holding slots: they go to the next
// waiter within TTL + 2s, because nobody renews the lease any more.
func TestKilledExecutorSlotsGoToNextWaiter(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: "crash", TTL: ttl, Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 2}}})
	env := []string{"NATS_URL=" + srv.URL, "NODE_ID=crash"}
	marker := fmt.Sprintf("slotlease-killed-%d", time.Now().UnixNano())
	ex := start(t, env, "executor", "run", "--pool", "gpu", "--slots", "2", "--", "sh", "-c", "sleep 30; echo "+marker)
	inUse := func() int64 { return n.Manager.Stats()[0].InUse } // the only pool
	eventually(t, 10*time.Second, "executor holds 2 slots", func() bool { return inUse() == 2 })

	c := harness.Client(t, srv.URL, "crash")
	got := make(chan *lease.Lease, 1)
	errc := make(chan error, 1)
	queued := make(chan struct{}, 4)
	go func() {
		l, err := c.Acquire(context.Background(), "gpu", 1, lease.OnQueued(func(int) { queued <- struct{}{} }))
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not queued")
	}
	killed := time.Now()
	if err := ex.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if d := time.Since(killed); d > ttl+2*time.Second {
			t.Fatalf("next waiter granted %v after the kill, want within TTL+2s", d)
		}
		_ = l.Release(context.Background())
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(ttl + 2*time.Second):
		t.Fatalf("slots of the killed executor not granted to the waiter within TTL+2s (in_use %d)", inUse())
	}
}
