package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// TestEmbeddedFaultSuite is the fault suite of the README's default layout
// (issue 30): one leasemgr process with its embedded NATS server and fast
// release, the default LEASE_TTL (15s) and grace, gpu=2, and three
// executors looping `executor run` with holds of 0.3-6s. Seeded faults,
// one at a time, 1-3s apart: leasemgr frozen (SIGSTOP, then SIGCONT) for
// 1-5s, restarted (SIGTERM, started again on the same store 0.5-5s later)
// or crashed (SIGKILL, started again 0.5-2s later). Nothing can free a slot
// while leasemgr is frozen or down, so no lease may be lost, and the
// auditor checks capacity in both views.
//
// One fresh seed of EMBEDDED_DURATION (20s); EMBEDDED_SEEDS=n (or a list)
// runs more.
func TestEmbeddedFaultSuite(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("runs real processes for about 40s")
	}
	dur := 20 * time.Second
	if v := os.Getenv("EMBEDDED_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("EMBEDDED_DURATION=%q: want a positive duration", v)
		}
		dur = d
	}
	seeds := freezeSuiteSeeds(t, "EMBEDDED_SEEDS")
	if len(seeds) == 0 {
		seeds = []uint64{rand.Uint64N(1_000_000)}
	}
	bin := buildBinaries(t)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { embeddedSuiteRun(t, bin, seed, dur) })
	}
}

func embeddedSuiteRun(t *testing.T, bin string, seed uint64, dur time.Duration) {
	t.Logf("seed %d (rerun: EMBEDDED_SEEDS=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0xe3bed))
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()
	const node = "emb"
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", rangePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", rangePort(t))
	authDir := filepath.Join(dir, "auth")
	common := []string{"NODE_ID=" + node, "NATS_LISTEN=" + listen, "NATS_AUTH_DIR=" + authDir}
	var mgr *process
	startMgr := func() {
		mgr = startProcess(t, "leasemgr", bin, "leasemgr", append([]string{
			"POOL_CAPACITIES=gpu=2", "NATS_STORE_DIR=" + filepath.Join(dir, "js"), "HTTP_ADDR=" + httpAddr, "LOG_LEVEL=debug",
		}, common...))
	}
	startMgr()
	harness.Eventually(t, 30*time.Second, "leasemgr to serve", func() bool { return readyz(httpAddr) == 200 })
	aud, err := StartAuditor(ctx, "nats://"+listen, natsconn.Auth{NKeySeed: config.AuthFile(authDir, config.RoleManager),
		InboxPrefix: config.RoleManager.InboxPrefix()}, lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer aud.Stop()
	defer func() {
		if t.Failed() || os.Getenv("FREEZE_LOG") != "" {
			t.Logf("leasemgr log (last 8000 bytes):\n%s", tail(mgr.errOut.String(), 8000))
		}
	}()

	var (
		mu       sync.Mutex
		finished []*freezeWorker
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for e := range 3 {
		holdRng := rand.New(rand.NewPCG(seed+uint64(e)+1, 11))
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				hold := time.Duration(300+holdRng.IntN(5700)) * time.Millisecond
				p, err := launch(t, fmt.Sprintf("e%d#%d", e, n), bin, "executor", common,
					"run", "--pool", "gpu", "--wait", "30s", "--kill-grace", "200ms", "--env", "STOP="+filepath.Join(os.TempDir(), "slotlease-no-stop"),
					"--env", "HOLD_MS="+strconv.FormatInt(hold.Milliseconds(), 10), "--", "sh", "-c", workerScript)
				if err != nil {
					t.Error(err)
					return
				}
				<-p.done
				mu.Lock()
				finished = append(finished, &freezeWorker{process: p, label: p.name})
				mu.Unlock()
				if code, _ := p.exited(); code == 75 { // no lease: leasemgr is down; do not spin
					time.Sleep(300 * time.Millisecond)
				}
			}
		})
	}

	var faults []string
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		start := time.Now()
		switch rng.IntN(3) {
		case 0:
			d := time.Duration(1000+rng.IntN(4001)) * time.Millisecond
			mgr.signal(t, syscall.SIGSTOP)
			time.Sleep(d)
			mgr.signal(t, syscall.SIGCONT)
			faults = append(faults, fmt.Sprintf("froze leasemgr for %v", d))
		default:
			// A clean restart (SIGTERM) with 0.5-5s down, or a crash
			// (SIGKILL: no notice, and the new one waits for the old
			// leadership key to expire, up to LEADER_TTL) with 0.5-2s.
			sig, down := syscall.SIGTERM, time.Duration(500+rng.IntN(4501))*time.Millisecond
			if rng.IntN(2) == 0 {
				sig, down = syscall.SIGKILL, time.Duration(500+rng.IntN(1501))*time.Millisecond
			}
			mgr.signal(t, sig)
			<-mgr.done
			stopped := time.Since(start)
			time.Sleep(down)
			startMgr()
			harness.Eventually(t, 30*time.Second, "leasemgr to serve again", func() bool { return readyz(httpAddr) == 200 })
			faults = append(faults, fmt.Sprintf("restarted leasemgr after %v: stopped in %v, down %v, serving %v after the signal",
				sig, stopped.Round(time.Millisecond), down, time.Since(start).Round(time.Millisecond)))
		}
		t.Log(faults[len(faults)-1])
	}
	close(stop)
	waitDone := make(chan struct{})
	go func() { wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("executors did not finish within 2 minutes of the last fault")
	}
	// Everything written so far reaches the auditor before it stops: its
	// watches catch up with the streams' last sequence (CatchUp).
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	if err := aud.CatchUp(cctx); err != nil {
		t.Fatal(err)
	}
	ccancel()
	aud.Stop()

	var holds []Hold
	noLease := 0
	for _, w := range finished {
		h, ran, err := w.hold(node)
		switch {
		case err != nil:
			t.Error(err)
		case ran:
			holds = append(holds, h)
		default:
			noLease++
		}
	}
	leases, leaders, events := aud.Observations()
	rep := Audit(AuditInput{
		Capacity: map[string]map[string]int64{node: {"gpu": 2}}, LeaseTTL: 15 * time.Second,
		Leases: leases, Leaders: leaders, Events: events, Holds: holds, RunEnd: time.Now(),
		HangGrace: 2 * time.Second, StrictKill: true, StrictOrphans: true, StrictStalls: true,
	})
	t.Logf("%d faults; %d holds (%d without a lease), %d lost (excused: %v); most held at once %v; records seen for %d holds",
		len(faults), len(holds), noLease, rep.Lost, rep.LostExcused, rep.MaxHeldInUse, rep.HoldsCovered)
	if len(holds) == 0 {
		t.Error("no executor held a lease: the run checked nothing")
	}
	if rep.Lost > 0 {
		t.Errorf("%d leases lost: work stopped while nothing could free its slot", rep.Lost)
	}
	for _, v := range rep.Violations {
		t.Error(v)
	}
}
