package cluster

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// The scale run: one process simulating many lease-manager nodes and many
// executors on the 3-node cluster. It is heavy, so it runs only when asked,
// without -race:
//
//	go test ./test/cluster -run TestScale -scale -v                 (or SCALE=1)
//	go test ./test/cluster -run TestScale -scale -scale.nodes 50 -scale.executors 1000 -scale.duration 30s -v
//
// docs/benchmarks-cluster.md has the figures and the command.
var (
	scaleFlag      = flag.Bool("scale", false, "run the scale test (also SCALE=1)")
	scaleNodes     = flag.Int("scale.nodes", 50, "scale: lease-manager nodes")
	scaleExecs     = flag.Int("scale.executors", 1000, "scale: executors")
	scaleDuration  = flag.Duration("scale.duration", 30*time.Second, "scale: how long executors work")
	scaleMgrConns  = flag.Int("scale.manager-conns", 5, "scale: NATS connections the managers share")
	scaleExecConns = flag.Int("scale.executor-conns", 10, "scale: NATS connections the executors share")
	scaleMaxHold   = flag.Duration("scale.hold", 400*time.Millisecond, "scale: each hold lasts a random time up to this")
	scaleAudit     = flag.Bool("scale.audit", true, "scale: run the auditor over the run")
)

// The pools of every node and how many of each node's executors use them.
var scalePools = []struct {
	manager.PoolConfig
	share int // executors per 20
}{
	{manager.PoolConfig{Name: "gpu", Capacity: 2}, 4},
	{manager.PoolConfig{Name: "cpu", Capacity: 8}, 8},
	{manager.PoolConfig{Name: "io", Capacity: 16}, 4},
	{manager.PoolConfig{Name: "mem", Capacity: 4}, 4},
}

func TestScale(t *testing.T) {
	if !*scaleFlag && os.Getenv("SCALE") == "" {
		t.Skip("heavy: run with -scale or SCALE=1 (without -race)")
	}
	nNodes, nExecs, duration := *scaleNodes, *scaleExecs, *scaleDuration
	if v := os.Getenv("SCALE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		duration = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+5*time.Minute)
	defer cancel()
	st := Settings{LeaseTTL: 5 * time.Second, StoreTimeout: 5 * time.Second, Logger: harness.Logger()}
	cl := provisionedCluster(ctx, t, &st)
	var aud *Auditor
	if *scaleAudit {
		var err error
		if aud, err = StartAuditor(ctx, cl.URL(), cl.Auth(config.RoleManager), st.Prefix); err != nil {
			t.Fatal(err)
		}
		defer aud.Stop()
	}

	// Managers: nNodes of them on a few shared connections.
	var poolCfg []manager.PoolConfig
	for _, p := range scalePools {
		poolCfg = append(poolCfg, p.PoolConfig)
	}
	conns := func(n int, name string, role config.Role) []*nats.Conn {
		var out []*nats.Conn
		for i := range n {
			nc, err := natsconn.Connect("nats://"+cl.ClientAddr(i%cl.Size()), cl.Auth(role), fmt.Sprintf("%s-%d", name, i),
				nats.IgnoreDiscoveredServers(), nats.ReconnectBufSize(64<<20))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			out = append(out, nc)
		}
		return out
	}
	mconns := conns(*scaleMgrConns, "managers", config.RoleManager)
	var managers []*manager.Manager
	nodes := make([]string, nNodes)
	for i := range nNodes {
		nodes[i] = fmt.Sprintf("node%03d", i+1)
		nc := mconns[i%len(mconns)]
		stores, err := OpenStores(ctx, nc, st)
		if err != nil {
			t.Fatal(err)
		}
		m, err := manager.New(manager.Config{Node: nodes[i], Prefix: st.Prefix, Pools: poolCfg, TTL: st.LeaseTTL,
			Conn: nc, Store: stores.Leases, PoolStore: stores.Pools, Events: jetstream.NewEvents(nc, st.Prefix, st.Logger),
			Logger: st.Logger, StoreTimeout: st.StoreTimeout})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		managers = append(managers, m)
	}
	defer func() {
		for _, m := range managers {
			_ = m.Close()
		}
	}()

	// Executors: nExecs lease clients on a few shared connections.
	econns := conns(*scaleExecConns, "executors", config.RoleExecutor)
	type sample struct {
		latency time.Duration
		queued  bool
	}
	var (
		mu       sync.Mutex
		samples  []sample
		rec      = &Recorder{}
		grants   atomic.Int64
		failures = map[string]int{}
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var shares []int
	for pi, p := range scalePools {
		for range p.share {
			shares = append(shares, pi)
		}
	}
	for i := range nExecs {
		node := nodes[i%nNodes]
		pool := scalePools[shares[(i/nNodes)%len(shares)]]
		nc := econns[i%len(econns)]
		c, err := lease.NewClient(nc, node, lease.WithHolder(fmt.Sprintf("x%04d", i)), lease.WithPrefix(st.Prefix),
			lease.WithRequestTimeout(2*time.Second), lease.WithPollInterval(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		wg.Go(func() {
			for seq := 0; runCtx.Err() == nil; seq++ {
				slots := 1 + rng.Int64N(min(2, pool.Capacity))
				var queued atomic.Bool
				id := fmt.Sprintf("x%04d-%d", i, seq)
				call := &Call{Executor: c.Holder(), Node: node, Pool: pool.Name, RequestID: id, Start: time.Now(), Bound: 20 * time.Second}
				rec.startCall(call)
				actx, cancel := context.WithTimeout(runCtx, call.Bound)
				l, err := c.Acquire(actx, pool.Name, slots, lease.WithRequestID(id), lease.WithWait(call.Bound),
					lease.OnQueued(func(int) { queued.Store(true) }))
				cancel()
				if err != nil {
					o := outcomeOf(runCtx, err)
					rec.endCall(call, o)
					if runCtx.Err() == nil {
						mu.Lock()
						failures[o]++
						mu.Unlock()
					}
					continue
				}
				took := time.Since(call.Start)
				h := &Hold{Executor: c.Holder(), Node: node, Pool: pool.Name, Slots: l.Slots(), LeaseID: l.ID(), Token: l.Token(), Start: time.Now()}
				rec.endCall(call, "granted")
				rec.addHold(h)
				grants.Add(1)
				mu.Lock()
				samples = append(samples, sample{took, queued.Load()})
				mu.Unlock()
				select {
				case <-time.After(time.Duration(rng.Int64N(int64(*scaleMaxHold) + 1))):
					rec.endHold(h, time.Now(), HoldReleased, nil)
				case <-runCtx.Done():
					rec.endHold(h, time.Now(), HoldReleased, nil)
				case <-l.Done():
					rec.endHold(h, time.Now(), HoldLost, l.Err())
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = l.Release(rctx)
				rcancel()
			}
		})
	}

	// Measure the steady state: skip the first seconds of warm-up.
	warm := min(5*time.Second, duration/6)
	time.Sleep(warm)
	mu.Lock()
	samples = samples[:0]
	mu.Unlock()
	g0 := grants.Load()
	ru0 := rusage()
	t0 := time.Now()
	var peakHeap, peakSys uint64
	var ms runtime.MemStats
	ticker := time.NewTicker(time.Second)
	for time.Since(t0) < duration {
		<-ticker.C
		runtime.ReadMemStats(&ms)
		peakHeap, peakSys = max(peakHeap, ms.HeapAlloc), max(peakSys, ms.Sys)
	}
	ticker.Stop()
	wall := time.Since(t0)
	ru1 := rusage()
	g1 := grants.Load()
	mu.Lock()
	got := slices.Clone(samples)
	fails := fmt.Sprint(failures)
	mu.Unlock()
	rss := vmRSS()
	stop()
	wg.Wait()
	runEnd := time.Now()

	lat := func(filter func(sample) bool) (n int, p50, p99, pmax time.Duration) {
		var ds []time.Duration
		for _, s := range got {
			if filter(s) {
				ds = append(ds, s.latency)
			}
		}
		if len(ds) == 0 {
			return 0, 0, 0, 0
		}
		slices.Sort(ds)
		return len(ds), ds[len(ds)*50/100], ds[len(ds)*99/100], ds[len(ds)-1]
	}
	cpu := (ru1.user - ru0.user) + (ru1.sys - ru0.sys)
	var b strings.Builder
	fmt.Fprintf(&b, "scale: %d nodes x %d pools (%d managers on %d connections), %d executors on %d connections, lease TTL %v, holds 0-%v, %v measured after %v warm-up, GOMAXPROCS %d\n",
		nNodes, len(scalePools), nNodes, len(mconns), nExecs, len(econns), st.LeaseTTL, *scaleMaxHold, wall.Round(time.Millisecond), warm, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "throughput: %d grants in %v = %.0f grants/s (each also released)\n", g1-g0, wall.Round(time.Millisecond), float64(g1-g0)/wall.Seconds())
	for _, row := range []struct {
		name string
		f    func(sample) bool
	}{
		{"all grants", func(sample) bool { return true }},
		{"granted at once (never queued)", func(s sample) bool { return !s.queued }},
		{"queued first", func(s sample) bool { return s.queued }},
	} {
		n, p50, p99, pmax := lat(row.f)
		fmt.Fprintf(&b, "grant latency, %s: n=%d p50 %v p99 %v max %v\n", row.name, n, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), pmax.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "CPU: user %v + sys %v = %.2f cores busy on average (of %d)\n", (ru1.user - ru0.user).Round(time.Millisecond), (ru1.sys - ru0.sys).Round(time.Millisecond), cpu.Seconds()/wall.Seconds(), runtime.NumCPU())
	fmt.Fprintf(&b, "memory: RSS %d MiB at the end (peak RSS %d MiB), Go heap peak %d MiB, Go sys peak %d MiB\n", rss>>20, ru1.maxRSS>>20, peakHeap>>20, peakSys>>20)
	fmt.Fprintf(&b, "acquire failures while running: %s", fails)
	t.Log(b.String())

	if aud != nil {
		// Let the last releases land, then audit the whole run.
		harness.Eventually(t, 30*time.Second, "every record released", func() bool {
			l, q := aud.Live()
			return len(l)+len(q) == 0
		})
		aud.Stop()
		leases, leaders, events := aud.Observations()
		holds, calls, nf := rec.Snapshot()
		capacity := map[string]map[string]int64{}
		for _, n := range nodes {
			capacity[n] = map[string]int64{}
			for _, p := range scalePools {
				capacity[n][p.Name] = p.Capacity
			}
		}
		rep := Audit(AuditInput{Capacity: capacity, LeaseTTL: st.LeaseTTL, Leases: leases, Leaders: leaders, Events: events,
			Holds: holds, Calls: calls, NetFaults: nf, RunEnd: runEnd, HangGrace: 5 * time.Second})
		t.Logf("audit: %d holds (record seen for %d), %d KV grants, %d granted events (%d verified), lost %d, acquires %v",
			rep.Holds, rep.HoldsCovered, rep.KVLeases, rep.GrantedEvents, rep.EventsVerified, rep.Lost, rep.Outcomes)
		for _, v := range rep.Violations {
			t.Errorf("audit: %s", v)
		}
	}
}

type usage struct {
	user, sys time.Duration
	maxRSS    int64 // bytes
}

func rusage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{
		user:   time.Duration(ru.Utime.Nano()),
		sys:    time.Duration(ru.Stime.Nano()),
		maxRSS: ru.Maxrss << 10, // KiB on Linux
	}
}

// vmRSS reads the resident set size from /proc/self/status (Linux).
func vmRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
