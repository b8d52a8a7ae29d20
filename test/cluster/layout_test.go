package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/layout"
	"github.com/slotlease/slotlease/test/harness"
)

// The secure cluster as an operator sets it up (issue 39): leasemgr layout
// writes it, three nats-server processes run its confs and refuse an
// anonymous client, a leasemgr per node runs with leasemgr.env (fast
// release on), and an executor that is kill -9'd gives its slot to a
// waiter, of another executor user on another server, by fast release,
// long before its lease could expire. The time is logged (about 0.9 s
// measured on a loaded 2-core machine), not asserted (docs/testing.md):
// what is asserted is that it is far below the TTL path.
func TestLayoutClusterFastRelease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a NATS cluster, two managers and executors as processes")
	}
	bin, natsBin := buildBinaries(t), buildNATSServer(t)
	start := time.Now()
	bases := make([]int, 3) // client, route and monitoring ports: 3 each
	for i := range bases {
		p, err := ports.FreeRun(3)
		if err != nil {
			t.Fatal(err)
		}
		bases[i] = p
	}
	dir := filepath.Join(t.TempDir(), "layout")
	out, err := exec.Command(filepath.Join(bin, "leasemgr"), "layout", "--out", dir, "--executors", "a,b",
		"--client-port", strconv.Itoa(bases[0]), "--cluster-port", strconv.Itoa(bases[1]), "--monitor-port", strconv.Itoa(bases[2])).CombinedOutput()
	if err != nil {
		t.Fatalf("leasemgr layout: %v\n%s", err, out)
	}
	for i := range 3 {
		p := startProcess(t, fmt.Sprintf("nats-%d", i), natsBin, "nats-server", nil, "-c", filepath.Join(dir, "nats", fmt.Sprintf("nats-%d.conf", i)))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("nats-%d log (last 3000 bytes):\n%s", i, tail(p.errOut.String(), 3000))
			}
		})
	}
	for i := range 3 {
		health := fmt.Sprintf("http://127.0.0.1:%d/healthz", bases[2]+i)
		harness.Eventually(t, 2*time.Minute, "nats-"+strconv.Itoa(i)+" is healthy", func() bool { return httpStatus(health) == 200 })
	}
	t.Logf("the cluster is healthy %v after the layout was written", time.Since(start).Round(time.Millisecond))

	env := func(file string, extra ...string) []string {
		t.Helper()
		m, err := layout.ReadEnvFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k, v := range m {
			out = append(out, k+"="+v)
		}
		return append(out, extra...)
	}
	mgrEnv, err := layout.ReadEnvFile(filepath.Join(dir, layout.LeasemgrEnv))
	if err != nil {
		t.Fatal(err)
	}
	url := mgrEnv[config.EnvNATSURL]
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("an anonymous client of %s: %v, want Authorization Violation", url, err)
	}
	server := func(i int) string { return fmt.Sprintf("NATS_URL=nats://127.0.0.1:%d", bases[0]+i) }

	// A lease that only its TTL could free takes at least 2/3 of it
	// after the kill (renewals come every TTL/3).
	const ttl = 30 * time.Second
	// One manager first, then the other, as docs/cluster.md says for a
	// new cluster: creates of the same bucket at once from two managers
	// can go unanswered on a cluster just formed, each until a set-up try
	// times out (10 s).
	for _, node := range []string{"node1", "node2"} {
		addr := fmt.Sprintf("127.0.0.1:%d", rangePort(t))
		p := startProcess(t, node, bin, "leasemgr", env(layout.LeasemgrEnv, "NODE_ID="+node, "POOL_CAPACITIES=gpu=1", "HTTP_ADDR="+addr,
			"LEASE_TTL="+ttl.String()), "run")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s log:\n%s", node, tail(p.errOut.String()+p.out.String(), 4000))
			}
		})
		harness.Eventually(t, 2*time.Minute, node+"'s manager serves", func() bool { return readyz(addr) == 200 })
	}
	t.Logf("both managers serve %v after the layout was written", time.Since(start).Round(time.Millisecond))

	// Executor a holds node1's gpu from nats-1; executor b waits for it
	// from nats-2.
	holder := startProcess(t, "holder", bin, "executor", env(layout.ExecutorEnv("a"), "NODE_ID=node1", server(1)), "run", "--pool", "gpu", "--", "sleep", "600")
	harness.Eventually(t, 2*time.Minute, "the holder is granted", func() bool { return strings.Contains(holder.errOut.String(), " granted: ") })
	waiter := startProcess(t, "waiter", bin, "executor", env(layout.ExecutorEnv("b"), "NODE_ID=node1", server(2)), "run", "--pool", "gpu", "--", "true")
	harness.Eventually(t, 2*time.Minute, "the waiter queues", func() bool { return strings.Contains(waiter.errOut.String(), "position 1 in queue") })

	killed := time.Now()
	holder.signal(t, syscall.SIGKILL)
	var took time.Duration
	harness.Eventually(t, 2*time.Minute, "the waiter is granted", func() bool {
		if !strings.Contains(waiter.errOut.String(), " granted: ") {
			return false
		}
		took = time.Since(killed)
		return true
	})
	t.Logf("kill -9 of the holder -> the waiter granted: %v (LEASE_TTL %v, DISCONNECT_GRACE %v)", took.Round(time.Millisecond), ttl, config.DefaultDisconnectGrace)
	if took > ttl/2 {
		t.Fatalf("granted %v after the kill: the TTL path, not fast release", took)
	}
	select {
	case <-waiter.done:
		if code, _ := waiter.exited(); code != 0 {
			t.Fatalf("the waiter exited %d:\n%s", code, waiter.errOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the waiter did not finish")
	}
}
