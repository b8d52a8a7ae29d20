package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// freezeSuiteSeeds reads FREEZE_SEEDS or SERVER_FAULT_SEEDS: a count of
// fresh seeds, or a comma-separated list of seeds.
func freezeSuiteSeeds(t *testing.T, name string) []uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	if !strings.Contains(v, ",") {
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 1000 {
			seeds := make([]uint64, n)
			for i := range seeds {
				seeds[i] = rand.Uint64N(1_000_000)
			}
			return seeds
		}
	}
	var seeds []uint64
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a count or a comma-separated list of seeds", name, v)
		}
		seeds = append(seeds, n)
	}
	return seeds
}

// TestFreezeSuite is the randomized fault suite on real processes: three
// nats-server processes (NATS_REPLICAS=3, the disconnect advisories
// exported to the clients' account), one node with two leasemgr processes
// with fast release (gpu=2, LEASE_TTL=8s, LEADER_TTL=2s, DISCONNECT_EVENTS)
// and three executors looping `executor run` with short holds. Seeded
// faults freeze (SIGSTOP, then SIGCONT) a manager or a NATS server for 1-5s,
// or restart a manager (SIGTERM, started again 0.5-3s later); with
// SERVER_FAULT_SEEDS they also crash NATS servers (SIGKILL) and restart
// them. The auditor checks capacity in both views, records against holds,
// who stored grants, and lost leases: a freeze or a restart excuses none
// (nothing can free a lease meanwhile, issue 30); a crashed NATS server
// excuses the leases lost while it was out (docs/guarantees.md).
//
// In the normal run: one fresh seed of freezes, FREEZE_DURATION (15s) long.
// FREEZE_SEEDS=n (or a list) and SERVER_FAULT_SEEDS=n choose more.
func TestFreezeSuite(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	if testing.Short() {
		t.Skip("runs real processes for about 30s")
	}
	dur := 15 * time.Second
	if v := os.Getenv("FREEZE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("FREEZE_DURATION=%q: want a positive duration", v)
		}
		dur = d
	}
	type run struct {
		seed  uint64
		kills bool
	}
	var runs []run
	for _, s := range freezeSuiteSeeds(t, "FREEZE_SEEDS") {
		runs = append(runs, run{s, false})
	}
	for _, s := range freezeSuiteSeeds(t, "SERVER_FAULT_SEEDS") {
		runs = append(runs, run{s, true})
	}
	if len(runs) == 0 {
		runs = []run{{rand.Uint64N(1_000_000), false}}
	}
	bin := buildBinaries(t)
	natsBin := buildNATSServer(t)
	for _, r := range runs {
		t.Run(fmt.Sprintf("seed=%d,kills=%v", r.seed, r.kills), func(t *testing.T) {
			freezeSuiteRun(t, bin, natsBin, r.seed, r.kills, dur)
		})
	}
}

// fault is one injected fault, for the log and the auditor's excuses.
type fault struct {
	what       string
	server     int // -1 for a manager
	start, end time.Time
}

func freezeSuiteRun(t *testing.T, bin, natsBin string, seed uint64, kills bool, dur time.Duration) {
	t.Logf("seed %d (rerun: FREEZE_SEEDS=%d or SERVER_FAULT_SEEDS=%d)", seed, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()
	nats := startNATSProcsAdvising(t, natsBin, 3)
	url := nats.URL()
	nats.provision(ctx, Settings{Replicas: 3, LeaseTTL: freezeLeaseTTL, LeaderTTL: freezeLeaderTTL})
	aud, err := StartAuditor(ctx, url, natsconn.Auth{}, lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer aud.Stop()

	const node = "rnd"
	mgrs := make([]*process, 2)
	addrs := make([]string, 2)
	startMgr := func(i int) {
		mgrs[i] = startProcess(t, fmt.Sprintf("leasemgr %d", i), bin, "leasemgr", []string{
			"NODE_ID=" + node, "NATS_URL=" + url, "NATS_REPLICAS=3", "POOL_CAPACITIES=gpu=2",
			"LEASE_TTL=" + freezeLeaseTTL.String(), "LEADER_TTL=" + freezeLeaderTTL.String(),
			"DISCONNECT_EVENTS=" + jetstream.AnonymousDisconnectSubject,
			"EVENT_RETENTION=1h", "HTTP_ADDR=" + addrs[i], "LOG_LEVEL=debug",
		})
	}
	for i := range mgrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", rangePort(t))
		startMgr(i)
	}
	harness.Eventually(t, 30*time.Second, "a leasemgr to serve", func() bool { return readyz(addrs[0]) == 200 || readyz(addrs[1]) == 200 })
	defer func() {
		if t.Failed() || os.Getenv("FREEZE_LOG") != "" {
			for _, m := range mgrs {
				t.Logf("%s log:\n%s", m.name, m.errOut.String())
			}
		}
	}()

	// Executors: each loops `executor run` with a hold of 0.3-2.5s.
	var (
		mu       sync.Mutex
		finished []*freezeWorker
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for e := range 3 {
		holdRng := rand.New(rand.NewPCG(seed+uint64(e)+1, 7))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				hold := time.Duration(300+holdRng.IntN(2200)) * time.Millisecond
				w, err := launchWorker(t, bin, url, node, fmt.Sprintf("e%d#%d", e, n), hold, filepath.Join(os.TempDir(), "slotlease-no-stop"))
				if err != nil {
					t.Error(err)
					return
				}
				<-w.done
				mu.Lock()
				finished = append(finished, w)
				mu.Unlock()
			}
		}()
	}

	// Faults, one at a time, 1-3s apart.
	var faults []fault
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		d := time.Duration(1000+rng.IntN(4001)) * time.Millisecond // 1-5s
		var f fault
		var p *process
		switch k := rng.IntN(10); {
		case k < 2:
			// A restart, as an upgrade does it: SIGTERM, then the
			// (same) binary again on the same settings.
			i := rng.IntN(2)
			if readyz(addrs[1-i]) == 200 && rng.IntN(3) > 0 {
				i = 1 - i // the active one, two times in three
			}
			f = fault{what: fmt.Sprintf("restart leasemgr %d", i), server: -1, start: time.Now()}
			if readyz(addrs[i]) == 200 {
				f.what += " (active)"
			}
			mgrs[i].signal(t, syscall.SIGTERM)
			<-mgrs[i].done
			down := time.Duration(500+rng.IntN(2501)) * time.Millisecond
			time.Sleep(down)
			startMgr(i)
			f.end = time.Now()
			faults = append(faults, f)
			t.Logf("%s, down %v", f.what, f.end.Sub(f.start).Round(time.Millisecond))
			continue
		case kills && k < 4:
			i := rng.IntN(3)
			f = fault{what: fmt.Sprintf("SIGKILL nats n%d", i), server: i, start: time.Now()}
			nats.kill(i)
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
			nats.start(i)
			// Counted until the restarted server can have caught up.
			f.end = time.Now().Add(5 * time.Second)
			faults = append(faults, f)
			t.Logf("%s for %v", f.what, f.end.Add(-5*time.Second).Sub(f.start).Round(time.Millisecond))
			continue
		case k < 7:
			i := rng.IntN(2)
			if readyz(addrs[i]) == 200 || rng.IntN(3) == 0 {
				p = mgrs[i]
			} else {
				p = mgrs[1-i]
			}
			f = fault{what: "freeze " + p.name, server: -1}
		default:
			i := rng.IntN(3)
			p = nats.procs[i]
			f = fault{what: fmt.Sprintf("freeze nats n%d", i), server: i}
		}
		other := ""
		if p == mgrs[0] && readyz(addrs[0]) == 200 {
			other = addrs[1]
		} else if p == mgrs[1] && readyz(addrs[1]) == 200 {
			other = addrs[0]
		}
		if other != "" {
			f.what += " (active)"
		}
		f.start = time.Now()
		p.signal(t, syscall.SIGSTOP)
		took := time.Duration(-1)
		if other != "" {
			took = pollReady(other, f.start, d)
		} else {
			time.Sleep(d)
		}
		p.signal(t, syscall.SIGCONT)
		f.end = time.Now()
		faults = append(faults, f)
		switch {
		case other == "":
			t.Logf("%s for %v", f.what, f.end.Sub(f.start).Round(time.Millisecond))
		case took < 0:
			t.Logf("%s for %v; the standby did not serve during the freeze", f.what, f.end.Sub(f.start).Round(time.Millisecond))
		default:
			t.Logf("%s for %v; the standby served %v after it began", f.what, f.end.Sub(f.start).Round(time.Millisecond), took.Round(time.Millisecond))
		}
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
	var servers []ServerFault
	for _, f := range faults {
		// A crashed server may cost leases; a frozen one cannot free any.
		if f.server >= 0 && strings.HasPrefix(f.what, "SIGKILL") {
			servers = append(servers, ServerFault{Server: f.server, Start: f.start, End: f.end.Add(time.Second)})
		}
	}
	leases, leaders, events := aud.Observations()
	rep := Audit(AuditInput{
		Capacity: map[string]map[string]int64{node: {"gpu": 2}}, LeaseTTL: freezeLeaseTTL, LeaderTTL: freezeLeaderTTL,
		Leases: leases, Leaders: leaders, Events: events, Holds: holds, Servers: servers, RunEnd: time.Now(),
		HangGrace: 2 * time.Second, StrictOrphans: true, StrictStalls: true,
	})
	t.Logf("%d faults; %d holds (%d without a lease), %d lost (excused: %v); most held at once %v; records seen for %d holds",
		len(faults), len(holds), noLease, rep.Lost, rep.LostExcused, rep.MaxHeldInUse, rep.HoldsCovered)
	if len(holds) == 0 {
		t.Error("no executor held a lease: the run checked nothing")
	}
	for _, v := range rep.Violations {
		t.Error(v)
	}
}
