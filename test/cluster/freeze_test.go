package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// The timings of issue 20's sequence.
const (
	freezeLeaseTTL  = 8 * time.Second
	freezeLeaderTTL = 2 * time.Second
	freezeFor       = 4500 * time.Millisecond
	// freezeBEnds is when, after the freeze began, holder B finishes: after
	// the standby has taken over (about LEADER_TTL), before SIGCONT.
	freezeBEnds = 3300 * time.Millisecond
)

// workerScript prints its lease, then "alive <unix ns>" every 50ms until
// HOLD_MS passed or the file STOP exists. Its alive lines are the holder's
// view of the lease: when the work really ran.
const workerScript = `echo "lease $LEASE_ID $LEASE_TOKEN"
end=$(( $(date +%s%N) + HOLD_MS * 1000000 ))
while now=$(date +%s%N); [ "$now" -lt "$end" ] && [ ! -e "$STOP" ]; do echo "alive $now"; sleep 0.05; done`

// freezeWorker is one `executor run` whose worker records when it is alive.
type freezeWorker struct {
	*process
	label string
	stop  string // the file that ends the worker
}

func startWorker(t *testing.T, bin, url, node, label string, hold time.Duration) *freezeWorker {
	t.Helper()
	// The worker, confined with ids of its own, must see the file:
	// t.TempDir is private, so open the way to it.
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := launchWorker(t, bin, url, node, label, hold, filepath.Join(dir, "stop"))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// launchWorker is startWorker for goroutines other than the test's.
func launchWorker(t *testing.T, bin, url, node, label string, hold time.Duration, stop string) (*freezeWorker, error) {
	p, err := launch(t, label, bin, "executor", []string{"NODE_ID=" + node, "NATS_URL=" + url},
		"run", "--pool", "gpu", "--wait", "30s", "--kill-grace", "200ms", "--env", "STOP="+stop, "--env", "HOLD_MS="+strconv.FormatInt(hold.Milliseconds(), 10),
		"--", "sh", "-c", workerScript)
	if err != nil {
		return nil, err
	}
	return &freezeWorker{process: p, label: label, stop: stop}, nil
}

func (w *freezeWorker) finish(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(w.stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (w *freezeWorker) granted() bool { return strings.Contains(w.errOut.String(), " granted: ") }
func (w *freezeWorker) queued() bool  { return strings.Contains(w.errOut.String(), "position ") }

// hold turns the worker's output into the auditor's view of its lease. ran
// is false if the worker never ran (no lease); err names an exit that is
// neither a finished nor a lost lease nor no lease.
func (w *freezeWorker) hold(node string) (h Hold, ran bool, err error) {
	code, _ := w.exited()
	h = Hold{Executor: w.label, Node: node, Pool: "gpu", Slots: 1, Outcome: HoldReleased}
	sc := bufio.NewScanner(strings.NewReader(w.out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "lease":
			h.LeaseID = f[1]
			h.Token, _ = strconv.ParseUint(f[2], 10, 64)
		case len(f) == 2 && f[0] == "alive":
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return h, false, fmt.Errorf("%s printed %q", w.label, sc.Text())
			}
			if h.Start.IsZero() {
				h.Start = time.Unix(0, ns)
			}
			h.End = time.Unix(0, ns)
		}
	}
	ran = !h.Start.IsZero() && h.Token != 0
	switch {
	case code == 0 && ran:
	case code == 76 && ran: // ExitLeaseLost: the executor stopped the work at Done
		h.Outcome, h.Err = HoldLost, strings.TrimSpace(w.errOut.String())
	case code == 75 && !ran: // ExitNoLease
	default:
		return h, false, fmt.Errorf("%s exited with %d (worker ran: %v):\n%s%s", w.label, code, ran, w.out.String(), w.errOut.String())
	}
	return h, ran, nil
}

// TestManagerFreezeNoOvergrant is issue 20's sequence, run deterministically:
// a 3-server cluster (NATS_REPLICAS=3), node with an active and a standby
// leasemgr process (gpu=2, LEASE_TTL=8s, LEADER_TTL=2s), workers under
// `executor run`: A and B hold, C and D queue; the active manager is frozen
// (SIGSTOP) for 4.5s; B ends after the standby took over, so the new leader
// grants C; then SIGCONT. The auditor must see at most two workers alive at
// any moment, and no lease lost. FREEZE_REPEAT=n runs the sequence n times;
// FREEZE_LOG=1 prints the managers' logs.
func TestManagerFreezeNoOvergrant(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("runs real processes for about 20s")
	}
	repeat := 1
	if s := os.Getenv("FREEZE_REPEAT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FREEZE_REPEAT=%q: want a positive integer", s)
		}
		repeat = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(repeat)*time.Minute+time.Minute)
	defer cancel()
	bin := buildBinaries(t)
	// Anonymous: the binaries here run without credentials, as on the
	// real nats-server processes of the freeze suite (natsprocs_test.go);
	// the account layout is the fault suite's (suite.go).
	cl, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Shutdown()
	url := cl.URL()
	if err := Provision(ctx, url, cl.Auth(config.RoleManager), Settings{Replicas: 3, LeaseTTL: freezeLeaseTTL, LeaderTTL: freezeLeaderTTL}); err != nil {
		t.Fatal(err)
	}
	aud, err := StartAuditor(ctx, url, cl.Auth(config.RoleManager), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer aud.Stop()

	capacity := map[string]map[string]int64{}
	var holds []Hold
	for i := range repeat {
		node := fmt.Sprintf("frz%d", i)
		capacity[node] = map[string]int64{"gpu": 2}
		holds = append(holds, freezeSequence(t, bin, url, node)...)
	}
	// Everything written so far reaches the auditor before it stops: its
	// watches catch up with the streams' last sequence.
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	if err := aud.CatchUp(cctx); err != nil {
		t.Fatal(err)
	}
	ccancel()
	aud.Stop()
	leases, leaders, events := aud.Observations()
	rep := Audit(AuditInput{
		Capacity: capacity, LeaseTTL: freezeLeaseTTL, LeaderTTL: freezeLeaderTTL, Leases: leases, Leaders: leaders, Events: events,
		Holds: holds, RunEnd: time.Now(), HangGrace: 2 * time.Second, StrictKill: true, StrictOrphans: true, StrictStalls: true,
	})
	overgrants := map[string]bool{}
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "over-grant") {
			overgrants[strings.Fields(v)[3]] = true // the node.pool
		}
	}
	t.Logf("%d of %d sequences over-granted; %d holds, %d lost; most held at once: %v", len(overgrants), repeat, rep.Holds, rep.Lost, rep.MaxHeldInUse)
	for _, v := range rep.Violations {
		t.Error(v)
	}
}

// freezeSequence runs the sequence once on node and returns the holds.
func freezeSequence(t *testing.T, bin, url, node string) []Hold {
	t.Helper()
	mgrEnv := func(httpAddr string) []string {
		return []string{
			"NODE_ID=" + node, "NATS_URL=" + url, "NATS_REPLICAS=3", "POOL_CAPACITIES=gpu=2",
			"LEASE_TTL=" + freezeLeaseTTL.String(), "LEADER_TTL=" + freezeLeaderTTL.String(),
			"EVENT_RETENTION=1h", "HTTP_ADDR=" + httpAddr, "LOG_LEVEL=debug",
		}
	}
	activeAddr := fmt.Sprintf("127.0.0.1:%d", rangePort(t))
	active := startProcess(t, node+"/active", bin, "leasemgr", mgrEnv(activeAddr))
	harness.Eventually(t, 30*time.Second, "the first leasemgr to serve", func() bool { return readyz(activeAddr) == 200 })
	standbyAddr := fmt.Sprintf("127.0.0.1:%d", rangePort(t))
	standby := startProcess(t, node+"/standby", bin, "leasemgr", mgrEnv(standbyAddr))
	harness.Eventually(t, 30*time.Second, "the second leasemgr to stand by", func() bool { return readyz(standbyAddr) == 503 })
	defer func() {
		if t.Failed() || os.Getenv("FREEZE_LOG") != "" {
			t.Logf("%s log:\n%s", active.name, active.errOut.String())
			t.Logf("%s log:\n%s", standby.name, standby.errOut.String())
		}
	}()

	a := startWorker(t, bin, url, node, node+"/A", 20*time.Second)
	b := startWorker(t, bin, url, node, node+"/B", 20*time.Second)
	harness.Eventually(t, 20*time.Second, "A and B granted", func() bool { return a.granted() && b.granted() })
	c := startWorker(t, bin, url, node, node+"/C", 5*time.Second)
	harness.Eventually(t, 20*time.Second, "C queued", c.queued)
	d := startWorker(t, bin, url, node, node+"/D", 5*time.Second)
	harness.Eventually(t, 20*time.Second, "D queued", d.queued)
	workers := []*freezeWorker{a, b, c, d}

	frozeAt := time.Now()
	active.signal(t, syscall.SIGSTOP)
	takeover := pollReady(standbyAddr, frozeAt, freezeBEnds)
	b.finish(t)
	time.Sleep(freezeFor - freezeBEnds)
	active.signal(t, syscall.SIGCONT)
	t.Logf("%s: froze the active manager %v; the standby served %v after the freeze began", node, time.Since(frozeAt).Round(time.Millisecond), takeover.Round(time.Millisecond))
	// A ends a second later, so D is granted in A's slot, not in C's.
	time.Sleep(time.Second)
	a.finish(t)

	harness.Eventually(t, 45*time.Second, "every executor to exit", func() bool {
		for _, w := range workers {
			if _, ok := w.exited(); !ok {
				return false
			}
		}
		return true
	})
	holds := make([]Hold, 0, len(workers))
	for _, w := range workers {
		h, ran, err := w.hold(node)
		if err == nil && !ran {
			err = fmt.Errorf("%s got no lease:\n%s", w.label, w.errOut.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	for _, m := range []*process{active, standby} {
		m.signal(t, syscall.SIGTERM)
	}
	for _, m := range []*process{active, standby} {
		select {
		case <-m.done:
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not stop within 20s of SIGTERM", m.name)
		}
	}
	return holds
}
