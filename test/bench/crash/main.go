// Command crash measures crash-to-regrant: how long after a holder of a
// slot is SIGKILLed the slot is granted to the next waiter, for each kind of
// holder (`executor run`, a job under `executor serve`, a Go program holding
// its lease through lease.Client), with fast release on (the default) and
// off (the TTL path), all from one run against the real binaries and an
// embedded leasemgr with the default LEASE_TTL of 15s.
//
//	go run ./test/bench/crash                  # 50 kills per kind and mode (about 5 minutes)
//	go run ./test/bench/crash -kills 10 -kinds run,go
//
// Fast-release kills run one at a time on an idle machine. TTL-path kills
// run 50 at a time (one pool each), since each takes a whole TTL. The
// figures are printed, never asserted: docs/benchmarks.md keeps them.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

const (
	node = "crashbench"
	// holdEnv makes this program a Go holder: it holds one slot of the
	// pool it names until it is killed.
	holdEnv = "CRASHBENCH_HOLD"
)

func main() {
	if pool := os.Getenv(holdEnv); pool != "" {
		hold(pool)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(2)
	}
}

type options struct {
	kills int
	kinds []string
	modes []mode
	bin   string
	tmp   string
	addr  string
}

// mode is fast release on or off, and the extra leasemgr settings for it.
type mode struct {
	name string
	env  []string
	wave int // kills at once
}

var modes = []mode{
	{name: "fast release", wave: 1},
	{name: "TTL path (fast release off)", env: []string{"DISCONNECT_EVENTS=off"}, wave: 50},
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("crash", flag.ContinueOnError)
	var o options
	kinds := fs.String("kinds", "run,serve,go", "holder kinds: run, serve, go")
	fs.IntVar(&o.kills, "kills", 50, "kills per kind and mode")
	only := fs.String("mode", "", "only this mode: fast or ttl")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.kinds = strings.Split(*kinds, ",")
	for _, k := range o.kinds {
		if holders[k] == nil {
			return fmt.Errorf("unknown kind %q (run, serve, go)", k)
		}
	}
	o.modes = modes
	switch *only {
	case "fast":
		o.modes = modes[:1]
	case "ttl":
		o.modes = modes[1:]
	case "":
	default:
		return fmt.Errorf("unknown mode %q (fast, ttl)", *only)
	}
	tmp, err := os.MkdirTemp("", "crashbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o.tmp, o.bin = tmp, filepath.Join(tmp, "bin")
	build := exec.CommandContext(ctx, "go", "build", "-o", o.bin+"/", "./cmd/leasemgr", "./cmd/executor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the binaries (run from the repository root): %w", err)
	}
	o.addr, err = freeAddr()
	if err != nil {
		return err
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "holder\tmode\tkills\tp50\tp99\tmax\tlost\t")
	for _, md := range o.modes {
		for _, kind := range o.kinds {
			lat, lost, err := measure(ctx, o, md, kind)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", kind, md.name, err)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t\n", kind, md.name, len(lat), pct(lat, 50), pct(lat, 99), pct(lat, 100), lost)
		}
	}
	return tw.Flush()
}

// pct is the p-th percentile (nearest rank) of d, in milliseconds.
func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return fmt.Sprintf("%.0f ms", float64(s[max(i, 0)].Microseconds())/1000)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// env is the environment of every process of one mode: one embedded
// leasemgr, its store and credentials in the bench's temp dir.
func (o options) env(md mode) []string {
	var pools []string
	for i := range 50 {
		pools = append(pools, fmt.Sprintf("p%d=1", i))
	}
	return append(append(os.Environ(),
		"NODE_ID="+node, "NATS_LISTEN="+o.addr, "HTTP_ADDR=",
		"NATS_STORE_DIR="+filepath.Join(o.tmp, "store", strings.Fields(md.name)[0]),
		"NATS_AUTH_DIR="+filepath.Join(o.tmp, "auth"),
		"POOL_CAPACITIES="+strings.Join(pools, ","), "LOG_LEVEL=warn"), md.env...)
}

// measure starts a leasemgr for md and kills o.kills holders of kind.
func measure(ctx context.Context, o options, md mode, kind string) ([]time.Duration, int, error) {
	env := o.env(md)
	mgr := exec.Command(filepath.Join(o.bin, "leasemgr"))
	mgr.Env, mgr.Stderr = env, os.Stderr
	if err := mgr.Start(); err != nil {
		return nil, 0, err
	}
	defer func() {
		_ = mgr.Process.Signal(syscall.SIGTERM)
		_ = mgr.Wait()
	}()
	c, nc, err := connect(ctx, o)
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	var lat []time.Duration
	lost := 0
	for done := 0; done < o.kills; {
		n := min(md.wave, o.kills-done, 50)
		got, l, err := wave(ctx, c, o, env, kind, n)
		if err != nil {
			return nil, 0, err
		}
		lat, lost, done = append(lat, got...), lost+l, done+n
	}
	return lat, lost, nil
}

// connect waits for the manager and connects as an executor.
func connect(ctx context.Context, o options) (*lease.Client, *nats.Conn, error) {
	auth := natsconn.Auth{NKeySeed: config.AuthFile(filepath.Join(o.tmp, "auth"), config.RoleExecutor), InboxPrefix: config.RoleExecutor.InboxPrefix()}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := natsconn.Connect("nats://"+o.addr, auth, "crashbench")
		if err == nil {
			c, err := lease.NewClient(nc, node, lease.WithHolder("crashbench-waiter"))
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err = c.Stats(sctx)
				cancel()
				if err == nil {
					return c, nc, nil
				}
			}
			nc.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("leasemgr not serving: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holders start a process holding one slot of pool, of each kind.
var holders = map[string]func(bin string, env []string, pool string) *exec.Cmd{
	"run": func(bin string, env []string, pool string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, "executor"), "run", "--pool", pool, "--", "sleep", "600")
	},
	"serve": func(bin string, env []string, pool string) *exec.Cmd {
		sub := exec.Command(filepath.Join(bin, "executor"), "submit", "--pool", pool, "--max-attempts", "1", "--", "sleep", "600")
		sub.Env = env
		if out, err := sub.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "submit: %v: %s\n", err, out)
		}
		return exec.Command(filepath.Join(bin, "executor"), "serve", "--pools", pool)
	},
	"go": func(bin string, env []string, pool string) *exec.Cmd {
		self, _ := os.Executable()
		cmd := exec.Command(self)
		cmd.Env = append(slices.Clone(env), holdEnv+"="+pool)
		return cmd
	},
}

// wave starts n holders (pools p0..p<n-1>), queues a waiter behind each,
// kills every holder and returns the time from each kill to its waiter's
// grant. A waiter not granted within 3 TTLs counts as lost.
func wave(ctx context.Context, c *lease.Client, o options, env []string, kind string, n int) ([]time.Duration, int, error) {
	type slot struct {
		pool   string
		holder *exec.Cmd
		killed time.Time
		got    chan time.Time
	}
	// The last wave's waiters released their slots; wait until the
	// manager has freed them, or a waiter could queue before its holder.
	if err := waitInUse(ctx, c, n, 0); err != nil {
		return nil, 0, err
	}
	slots := make([]*slot, n)
	for i := range slots {
		s := &slot{pool: fmt.Sprintf("p%d", i), got: make(chan time.Time, 1)}
		s.holder = holders[kind](o.bin, env, s.pool)
		if s.holder.Env == nil {
			s.holder.Env = env
		}
		if err := s.holder.Start(); err != nil {
			return nil, 0, err
		}
		slots[i] = s
	}
	defer func() {
		for _, s := range slots {
			_ = s.holder.Process.Kill()
			_ = s.holder.Wait()
		}
	}()
	if err := waitInUse(ctx, c, n, 1); err != nil {
		return nil, 0, fmt.Errorf("%s holders: %w", kind, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*15*time.Second+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, s := range slots {
		queued := make(chan struct{})
		wg.Go(func() {
			l, err := c.Acquire(wctx, s.pool, 1, lease.OnQueued(func(int) {
				select {
				case <-queued:
				default:
					close(queued)
				}
			}))
			if err != nil {
				close(s.got)
				return
			}
			s.got <- time.Now()
			_ = l.Release(context.Background())
		})
		select {
		case <-queued:
		case <-s.got:
			return nil, 0, fmt.Errorf("pool %s: the waiter was granted before the holder was killed", s.pool)
		case <-wctx.Done():
			return nil, 0, wctx.Err()
		}
	}
	for _, s := range slots {
		s.killed = time.Now()
		_ = syscall.Kill(s.holder.Process.Pid, syscall.SIGKILL)
	}
	var lat []time.Duration
	lost := 0
	for _, s := range slots {
		if t, ok := <-s.got; ok {
			lat = append(lat, t.Sub(s.killed))
		} else {
			lost++
		}
	}
	return lat, lost, nil
}

// waitInUse waits until pools p0..p<n-1> each have inUse slots in use.
func waitInUse(ctx context.Context, c *lease.Client, n int, inUse int64) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		stats, err := c.Stats(sctx)
		cancel()
		if err == nil {
			held := 0
			for _, s := range stats {
				var i int
				if _, e := fmt.Sscanf(s.Name, "p%d", &i); e == nil && i < n && s.Stats.InUse == inUse {
					held++
				}
			}
			if held == n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pools not at %d in use after 60s", inUse)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hold is the Go holder: it holds a slot of pool through lease.Client,
// renewing, until it is killed.
func hold(pool string) {
	auth := natsconn.Auth{NKeySeed: config.AuthFile(os.Getenv("NATS_AUTH_DIR"), config.RoleExecutor), InboxPrefix: config.RoleExecutor.InboxPrefix()}
	nc, err := natsconn.Connect("nats://"+os.Getenv("NATS_LISTEN"), auth, "crashbench-holder")
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	c, err := lease.NewClient(nc, node, lease.WithHolder("crashbench-go-holder"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	l, err := c.Acquire(context.Background(), pool, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	<-l.Done()
	fmt.Fprintln(os.Stderr, "holder: lease lost:", l.Err())
	os.Exit(1)
}
