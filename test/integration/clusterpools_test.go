package integration

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readyz returns GET /readyz's status and body.
func readyz(t *testing.T, httpAddr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// clusterNode starts a leasemgr joining first's NATS with CLUSTER_POOLS.
func clusterNode(t *testing.T, first []string, node, pools, clusterPools string) (env []string, httpAddr string, p *proc) {
	t.Helper()
	env, httpAddr = joinNode(t, first, node, pools)
	env = append(env, "CLUSTER_POOLS="+clusterPools, "LEADER_TTL=1s")
	return env, httpAddr, startManager(t, env, httpAddr)
}

// servedBy returns the node `leasemgr pools` says serves the cluster pools.
func servedBy(t *testing.T, env []string) string {
	t.Helper()
	p := start(t, env, "leasemgr", "pools")
	if code := p.Wait(t, 30*time.Second); code != 0 {
		return ""
	}
	_, after, ok := strings.Cut(p.Output(), "served by the manager of node ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
}

// waitServed waits until candidate ca or cb serves the cluster pools, as
// `leasemgr pools` run with env says, and returns which.
func waitServed(t *testing.T, env []string) string {
	t.Helper()
	var serving string
	eventually(t, 20*time.Second, "a candidate to serve the cluster pools", func() bool {
		serving = servedBy(t, env)
		return serving == "ca" || serving == "cb"
	})
	return serving
}

// Cluster pools as a user runs them: two leasemgr list CLUSTER_POOLS=api=1
// beside their own gpu=1 (a third node, without cluster pools, runs the
// NATS server). One serves api; `leasemgr pools` on either node shows it
// apart from the node's pools. A third candidate listing api=2 is reported
// (its /readyz and `leasemgr pools`), and the report goes when it stops.
// SIGKILLing the serving manager while an executor holds api costs that
// executor nothing: the other candidate takes over with the lease, and
// never grants api twice.
func TestClusterPoolsServedAndTakenOver(t *testing.T) {
	t.Parallel()
	host, hostHTTP := managerEnv(t, "host", "gpu=1", "6s")
	startManager(t, host, hostHTTP)
	envA, _, procA := clusterNode(t, host, "ca", "gpu=1", "api=1")
	envB, httpB, procB := clusterNode(t, host, "cb", "gpu=1", "api=1")
	procs := map[string]*proc{"ca": procA, "cb": procB}
	envs := map[string][]string{"ca": envA, "cb": envB}

	serving := waitServed(t, envB)
	p := start(t, envA, "leasemgr", "pools")
	if code := p.Wait(t, 30*time.Second); code != 0 || !strings.Contains(p.Output(), "cluster  api") || strings.Contains(p.Output(), "warning") {
		t.Fatalf("leasemgr pools on ca: exit %d, want node ca's pools and the cluster's api, no warning:\n%s", code, p.Output())
	}

	// A candidate that disagrees is reported, and no longer once it stops.
	envC, httpC := joinNode(t, host, "cc", "gpu=1")
	envC = append(envC, "CLUSTER_POOLS=api=2", "LEADER_TTL=1s")
	procC := startManager(t, envC, httpC)
	const want = "warning: cluster pool api: capacity 1 on ca, cb; capacity 2 on cc"
	for _, addr := range []string{httpB, httpC} {
		eventually(t, 10*time.Second, "/readyz to report the disagreement", func() bool {
			code, body := readyz(t, addr)
			return code == http.StatusOK && strings.Contains(body, want)
		})
	}
	p = start(t, envA, "leasemgr", "pools")
	if p.Wait(t, 30*time.Second); !strings.Contains(p.Output(), want) {
		t.Errorf("leasemgr pools does not report the disagreement:\n%s", p.Output())
	}
	_ = procC.cmd.Process.Signal(syscall.SIGTERM)
	procC.Wait(t, 20*time.Second)
	eventually(t, 10*time.Second, "the disagreement to go with cc", func() bool {
		_, body := readyz(t, httpB)
		return !strings.Contains(body, "warning")
	})

	// The takeover: an executor holds api, the serving manager dies.
	other := map[string]string{"ca": "cb", "cb": "ca"}[serving]
	holder := start(t, envs[other], "executor", "run", "--node", "cluster", "--pool", "api", "--", "sleep", "8")
	eventually(t, 20*time.Second, "the holder's grant", func() bool { return strings.Contains(holder.Output(), "granted") })
	_ = procs[serving].cmd.Process.Kill()
	eventually(t, 20*time.Second, "the other candidate to serve", func() bool { return servedBy(t, envs[other]) == other })
	code, out := runExecutor(t, envs[other], "run", "--node", "cluster", "--pool", "api", "--no-wait", "--", "true")
	if code == 0 {
		t.Fatalf("a second api slot was granted after the takeover while the first is held:\n%s", out)
	}
	if code := holder.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the holder lost its api lease in the takeover: exit %d\n%s", code, holder.Output())
	}
}

// runSpan is when a worker ran, as it wrote it down.
type runSpan struct{ start, end float64 }

// spanScript writes the worker's start and end times (seconds) to $1.
const spanScript = `date +%s.%N > "$1.start"; sleep 2; date +%s.%N > "$1.end"`

func readSpan(t *testing.T, path string) runSpan {
	t.Helper()
	var s runSpan
	for _, f := range []struct {
		ext string
		to  *float64
	}{{".start", &s.start}, {".end", &s.end}} {
		b, err := os.ReadFile(path + f.ext)
		if err != nil {
			t.Fatal(err)
		}
		if *f.to, err = strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Several pools in one run, as a user runs it: two nodes on one NATS,
// each gpu=1, sharing api=1. Two `executor run --pool gpu --pool api --
// sleep 2` started at once on the two nodes run one after the other (about
// 4 s in all); with `--pool gpu` alone they run side by side (about 2 s).
// The worker gets every lease in its environment; the second run says
// which pool it waits in and what it holds meanwhile; bad --pool flags are
// usage errors; nothing is held afterwards.
func TestSeveralPoolsInOneRun(t *testing.T) {
	t.Parallel()
	host, hostHTTP := managerEnv(t, "host", "gpu=1", "6s")
	startManager(t, host, hostHTTP)
	env1, http1, _ := clusterNode(t, host, "g1", "gpu=1", "api=1")
	env2, _, _ := clusterNode(t, host, "g2", "gpu=1", "api=1")
	eventually(t, 20*time.Second, "a candidate to serve the cluster pools", func() bool { return servedBy(t, env1) != "" })

	dir := sharedDir(t)
	pair := func(name string, pools ...string) (a, b runSpan, took time.Duration, outB string) {
		t.Helper()
		args := func(tag string) []string {
			out := []string{"run", "--writable", dir}
			for _, p := range pools {
				out = append(out, "--pool", p)
			}
			return append(out, "--", "sh", "-c", spanScript, "sh", filepath.Join(dir, name+tag))
		}
		begin := time.Now()
		pa := start(t, env1, "executor", args("-a")...)
		pb := start(t, env2, "executor", args("-b")...)
		for _, p := range []*proc{pa, pb} {
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("%s: exit %d\n%s", strings.Join(p.cmd.Args, " "), code, p.Output())
			}
		}
		return readSpan(t, filepath.Join(dir, name+"-a")), readSpan(t, filepath.Join(dir, name+"-b")), time.Since(begin), pa.Output() + pb.Output()
	}
	a, b, took, out := pair("both", "gpu", "api")
	if a.start < b.end && b.start < a.end {
		t.Fatalf("two runs held the cluster's only api slot at once: %v and %v", a, b)
	}
	if !strings.Contains(out, "of pool api on node cluster: position 1 in queue (holding gpu on node g") {
		t.Errorf("the waiting run did not say it waits for api holding its gpu:\n%s", out)
	}
	t.Logf("gpu+api on two nodes: %v in all (one after the other)", took.Round(100*time.Millisecond))
	a, b, took, _ = pair("gpu", "gpu")
	if !(a.start < b.end && b.start < a.end) {
		t.Fatalf("two runs of gpu alone on two nodes did not run side by side: %v and %v", a, b)
	}
	t.Logf("gpu alone on two nodes: %v in all (side by side)", took.Round(100*time.Millisecond))

	code, out := runExecutor(t, env1, "run", "--pool", "gpu", "--pool", "api=1", "--", "sh", "-c", "env | grep ^LEASE_ | sort")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{"LEASE_POOLS=gpu,api", "LEASE_POOL=gpu", "LEASE_NODE=g1", "LEASE_GPU_NODE=g1", "LEASE_API_NODE=cluster", "LEASE_API_SLOTS=1", "LEASE_API_TOKEN=", "LEASE_GPU_ID="} {
		if !strings.Contains(out, want) {
			t.Errorf("worker environment lacks %s:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{
		{"--pool", "gpu", "--pool", "gpu"},
		{"--pool", "gpu=0"},
		{"--pool", "a.b"},
		{"--slots", "2", "--pool", "gpu", "--pool", "api"},
		{"--pool", "a-b", "--pool", "a_b"},
	} {
		code, out := runExecutor(t, env1, append(append([]string{"run"}, bad...), "--", "true")...)
		if code != 2 {
			t.Errorf("executor run %v: exit %d, want 2 (usage)\n%s", bad, code, out)
		}
	}
	// All or nothing: the second pool refused, the first is given back.
	for _, second := range []string{"api=5", "nope"} {
		code, out := runExecutor(t, env1, "run", "--pool", "gpu", "--pool", second, "--wait", "2s", "--", "true")
		if code != 75 || !strings.Contains(out, "no lease") {
			t.Errorf("executor run --pool gpu --pool %s: exit %d, want 75 and no lease\n%s", second, code, out)
		}
	}
	np := httpNodePools(t, http1)
	if np.Cluster == nil || len(np.Cluster.Pools) != 1 || np.Cluster.Pools[0].Name != "api" {
		t.Fatalf("/v1/pools of g1 does not show the cluster's api apart: %+v", np)
	}
	// A release is answered before its delete is stored, and the slots
	// come back with the delete: wait for it (a busy machine took longer
	// than the executor's exit).
	eventually(t, time.Minute, "every slot back after every run ended", func() bool {
		np := httpNodePools(t, http1)
		for _, p := range append(np.Pools, np.Cluster.Pools...) {
			if p.InUse != 0 {
				return false
			}
		}
		return true
	})
}

// Losing one lease of a run stops its work and gives the others back: the
// only manager of the cluster pools dies under a run holding node g1's gpu
// and the cluster's api; the run's work is stopped by the api lease's
// deadline, the run exits 76 naming it, and g1's gpu is free at once.
func TestLosingOnePoolStopsTheWork(t *testing.T) {
	t.Parallel()
	host, hostHTTP := managerEnv(t, "host", "gpu=1", "6s")
	startManager(t, host, hostHTTP)
	env1, http1 := joinNode(t, host, "l1", "gpu=1")
	startManager(t, env1, http1)
	_, _, cand := clusterNode(t, host, "l2", "gpu=1", "api=1")
	eventually(t, 20*time.Second, "l2 to serve the cluster pools", func() bool { return servedBy(t, env1) == "l2" })

	shared := sharedDir(t)
	marker := filepath.Join(shared, "still-running")
	run := start(t, env1, "executor", "run", "--pool", "gpu", "--pool", "api", "--writable", shared, "--",
		"sh", "-c", `while true; do date +%s.%N > "$0"; sleep 0.1; done`, marker)
	writers := func(args []string) bool { return slices.Contains(args, marker) }
	eventually(t, 20*time.Second, "the run to hold both and write its marker", func() bool {
		_, err := os.Stat(marker)
		return strings.Count(run.Output(), "granted") == 2 && err == nil && len(liveProcs(writers)) > 0
	})
	_ = cand.cmd.Process.Kill()
	killed := time.Now()
	code := run.Wait(t, 30*time.Second)
	if code != 76 || !strings.Contains(run.Output(), "pool api on node cluster") {
		t.Fatalf("exit %d, want 76 naming the api lease\n%s", code, run.Output())
	}
	t.Logf("the run ended %v after the cluster pools' only manager was killed (LEASE_TTL 6s)", time.Since(killed).Round(100*time.Millisecond))
	// The work is gone with the run: nothing is left to write the marker.
	if pids := liveProcs(writers); len(pids) > 0 {
		t.Errorf("the work still runs after the run ended: processes %v", pids)
	}
	if p := httpPools(t, http1)["gpu"]; p.InUse != 0 {
		t.Errorf("l1's gpu still held after the run ended: %d", p.InUse)
	}
}
