package integration

import (
	"io"
	"net/http"
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

// Cluster pools as a user runs them: two leasemgr list CLUSTER_POOLS=api=1
// beside their own gpu=1 (a third node, without cluster pools, runs the
// NATS server). One serves api; `leasemgr pools` on either node shows it
// apart from the node's pools. A third candidate listing api=2 is reported
// (its /readyz and `leasemgr pools`), and the report goes when it stops.
// SIGKILLing the serving manager while an executor holds api costs that
// executor nothing: the other candidate takes over with the lease, and
// never grants api twice.
func TestClusterPoolsServedAndTakenOver(t *testing.T) {
	host, hostHTTP := managerEnv(t, "host", "gpu=1", "6s")
	startManager(t, host, hostHTTP)
	envA, _, procA := clusterNode(t, host, "ca", "gpu=1", "api=1")
	envB, httpB, procB := clusterNode(t, host, "cb", "gpu=1", "api=1")
	procs := map[string]*proc{"ca": procA, "cb": procB}
	envs := map[string][]string{"ca": envA, "cb": envB}

	var serving string
	eventually(t, 20*time.Second, "a candidate to serve the cluster pools", func() bool {
		serving = servedBy(t, envB)
		return serving == "ca" || serving == "cb"
	})
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
