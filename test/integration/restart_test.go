package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// Issue 30: work outlives its lease manager. leasemgr in the default
// layout (its embedded NATS server, fast release on, LEASE_TTL 15s) is
// restarted or frozen under running `executor run`s and `executor serve`
// jobs, and no running command is stopped.

// untilStopped is a command that notes its start in $DIR/start.$NAME,
// runs until $DIR/stop exists, notes its end in $DIR/end.$NAME and exits 0.
const untilStopped = `date +%s%N > "$DIR/start.$NAME"; while [ ! -e "$DIR/stop" ]; do sleep 0.05; done; date +%s%N > "$DIR/end.$NAME"`

// stamp reads a time a worker wrote with date +%s%N.
func stamp(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return time.Unix(0, ns)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// httpLeases is GET /v1/leases.
func httpLeases(t *testing.T, httpAddr string) []lease.Record {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/leases")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var recs []lease.Record
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&recs) != nil {
		return nil
	}
	return recs
}

// boundTo returns the servers the node's leases are bound to.
func boundTo(t *testing.T, httpAddr string) map[string]int {
	out := map[string]int{}
	for _, r := range httpLeases(t, httpAddr) {
		out[r.ConnServer]++
	}
	return out
}

// ready reports whether leasemgr's /readyz answers 200.
func ready(httpAddr string) bool {
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stopManager sends leasemgr SIGTERM and waits for it to exit 0.
func stopManager(t *testing.T, m *proc) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d on SIGTERM:\n%s", code, m.Output())
	}
}

// restartGap is how long leasemgr stays down in TestRestartKeepsRunningWork
// (RESTART_GAP overrides it; up to about 10s keeps the work with the
// default LEASE_TTL, docs/guarantees.md).
func restartGap(t *testing.T) time.Duration {
	if v := os.Getenv("RESTART_GAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RESTART_GAP: %v", err)
		}
		return d
	}
	return 3 * time.Second
}

// Restarting leasemgr (SIGTERM, then the same binary again on the same
// store) under four running `executor run`s, a queued fifth and two jobs
// under `executor serve` stops none of them: the holders renew at the stop
// notice and ride the restart out, their leases are restored and move to
// the new server's connections, the waiter keeps its place and starts only
// once a holder has ended, and the jobs succeed.
func TestRestartKeepsRunningWork(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "restart", "gpu=4,cpu=2", "15s")
	mgr := startManager(t, env, httpAddr)
	dir := sharedDir(t)
	run := func(name string) *proc {
		return start(t, env, "executor", "run", "--pool", "gpu", "--writable", dir, "--env", "DIR="+dir, "--env", "NAME="+name, "--", "sh", "-c", untilStopped)
	}
	var holders []*proc
	for i := range 4 {
		holders = append(holders, run(fmt.Sprintf("h%d", i)))
	}
	eventually(t, 30*time.Second, "four commands to run", func() bool {
		for i := range 4 {
			if !exists(filepath.Join(dir, fmt.Sprintf("start.h%d", i))) {
				return false
			}
		}
		return true
	})
	waiter := run("waiter")
	eventually(t, 10*time.Second, "the fifth to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })
	var ids []string
	for i := range 2 {
		code, out := runExecutor(t, env, "submit", "--pool", "cpu", "--max-attempts", "1", "--writable", dir, "--env", "DIR="+dir, "--env", fmt.Sprintf("NAME=j%d", i), "--", "sh", "-c", untilStopped)
		if code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, out)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	serve := start(t, env, "executor", "serve", "--pools", "cpu")
	eventually(t, 30*time.Second, "the two jobs to run", func() bool {
		return exists(filepath.Join(dir, "start.j0")) && exists(filepath.Join(dir, "start.j1"))
	})
	before := boundTo(t, httpAddr)
	if len(before) != 1 {
		t.Fatalf("the six leases are bound to servers %v, want one", before)
	}

	stopManager(t, mgr)
	gap := restartGap(t)
	time.Sleep(gap) // leasemgr is down this long: the fault itself
	restarted := time.Now()
	mgr = startManager(t, env, httpAddr)
	t.Logf("leasemgr down %v, serving again %v after its start", gap, time.Since(restarted).Round(time.Millisecond))
	if !strings.Contains(servingLine(t, mgr), "leases_restored=6") {
		t.Fatalf("the restarted manager did not restore the six leases:\n%s", mgr.Output())
	}
	eventually(t, 10*time.Second, "the leases to move to the new server's connections", func() bool {
		after := boundTo(t, httpAddr)
		for s := range after {
			if before[s] > 0 {
				return false
			}
		}
		return len(after) == 1 && after[""] == 0
	})
	if st := httpPools(t, httpAddr)["gpu"]; st.InUse != 4 || st.QueuedRequests != 1 {
		t.Fatalf("after the restart gpu has %d in use and %d queued, want 4 and 1 (the waiter kept its place)", st.InUse, st.QueuedRequests)
	}
	for i, h := range holders {
		select {
		case <-h.done:
			t.Fatalf("holder %d ended during the restart:\n%s", i, h.Output())
		default:
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for i, h := range holders {
		if code := h.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("holder %d exit %d over a restart of leasemgr:\n%s", i, code, h.Output())
		}
	}
	if code := waiter.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("waiter exit %d:\n%s", code, waiter.Output())
	}
	first := stamp(t, filepath.Join(dir, "end.h0"))
	for i := 1; i < 4; i++ {
		if e := stamp(t, filepath.Join(dir, fmt.Sprintf("end.h%d", i))); e.Before(first) {
			first = e
		}
	}
	if ws := stamp(t, filepath.Join(dir, "start.waiter")); ws.Before(first) {
		t.Fatalf("the waiter started at %v, before any holder ended (first at %v): a slot was granted twice", ws, first)
	}
	q := jobQueue(t, env)
	for _, id := range ids {
		eventually(t, 30*time.Second, "job "+id+" to succeed", func() bool { return record(q, id).State == jobs.StateSucceeded })
	}
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := serve.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, serve.Output())
	}
}

// Freezing leasemgr (SIGSTOP: its embedded server and its manager stall,
// every connection stays open) for 3s stops no running work: nobody can
// free a slot meanwhile, and the holders' deadlines are the TTL's.
func TestStalledManagerStopsNoWork(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "stall", "gpu=2,cpu=1", "15s")
	mgr := startManager(t, env, httpAddr)
	dir := sharedDir(t)
	var holders []*proc
	for i := range 2 {
		holders = append(holders, start(t, env, "executor", "run", "--pool", "gpu", "--writable", dir, "--env", "DIR="+dir, "--env", fmt.Sprintf("NAME=h%d", i), "--", "sh", "-c", untilStopped))
	}
	code, out := runExecutor(t, env, "submit", "--pool", "cpu", "--max-attempts", "1", "--writable", dir, "--env", "DIR="+dir, "--env", "NAME=j", "--", "sh", "-c", untilStopped)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out)
	serve := start(t, env, "executor", "serve", "--pools", "cpu")
	eventually(t, 30*time.Second, "the commands and the job to run", func() bool {
		return exists(filepath.Join(dir, "start.h0")) && exists(filepath.Join(dir, "start.h1")) && exists(filepath.Join(dir, "start.j"))
	})
	if err := mgr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the stall itself
	if err := mgr.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "leasemgr to serve again", func() bool { return ready(httpAddr) })
	if st := httpPools(t, httpAddr)["gpu"]; st.InUse != 2 {
		t.Fatalf("after the stall gpu has %d in use, want the 2 held", st.InUse)
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for i, h := range holders {
		if code := h.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("holder %d exit %d over a 3s stall of leasemgr:\n%s", i, code, h.Output())
		}
	}
	q := jobQueue(t, env)
	eventually(t, 30*time.Second, "the job to succeed", func() bool { return record(q, id).State == jobs.StateSucceeded })
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.Wait(t, 30*time.Second)
}

// A crash of leasemgr (SIGKILL: no stop notice, its embedded server dies
// with it) started again 2s later stops no running work either: the
// executors of the default layout talk straight to that server, so a drop
// of their connection can only be its doing, which frees nothing
// (lease.WithServerOnlyDrops), and their leases outlive the crash on their
// TTL. The new manager waits for the old leadership key to expire, then
// restores the leases.
func TestCrashedManagerKeepsRunningWork(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "crash", "gpu=2,cpu=1", "15s")
	mgr := startManager(t, env, httpAddr)
	dir := sharedDir(t)
	var holders []*proc
	for i := range 2 {
		holders = append(holders, start(t, env, "executor", "run", "--pool", "gpu", "--writable", dir, "--env", "DIR="+dir, "--env", fmt.Sprintf("NAME=h%d", i), "--", "sh", "-c", untilStopped))
	}
	code, out := runExecutor(t, env, "submit", "--pool", "cpu", "--max-attempts", "1", "--writable", dir, "--env", "DIR="+dir, "--env", "NAME=j", "--", "sh", "-c", untilStopped)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out)
	serve := start(t, env, "executor", "serve", "--pools", "cpu")
	eventually(t, 30*time.Second, "the commands and the job to run", func() bool {
		return exists(filepath.Join(dir, "start.h0")) && exists(filepath.Join(dir, "start.h1")) && exists(filepath.Join(dir, "start.j"))
	})
	if err := mgr.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	mgr.Wait(t, 10*time.Second)
	time.Sleep(2 * time.Second) // leasemgr is down this long: the fault itself
	mgr = startManager(t, env, httpAddr)
	if !strings.Contains(servingLine(t, mgr), "leases_restored=3") {
		t.Fatalf("the restarted manager did not restore the three leases:\n%s", mgr.Output())
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for i, h := range holders {
		if code := h.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("holder %d exit %d over a crash of leasemgr:\n%s", i, code, h.Output())
		}
	}
	q := jobQueue(t, env)
	eventually(t, 30*time.Second, "the job to succeed", func() bool { return record(q, id).State == jobs.StateSucceeded })
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.Wait(t, 30*time.Second)
}

// servingLine waits for the manager's "lease manager serving" line, which
// it may write just after it is ready (startManager), and returns its
// output.
func servingLine(t *testing.T, mgr *proc) string {
	t.Helper()
	eventually(t, 30*time.Second, "the manager's serving line", func() bool { return strings.Contains(mgr.Output(), "leases_restored=") })
	return mgr.Output()
}
