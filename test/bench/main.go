// Command bench measures the slot-lease manager against the floor it stands
// on (bare NATS request/reply and JetStream KV writes), against two naive
// lease services written here on nats.go and JetStream KV, and measures the
// in-memory pools against golang.org/x/sync/semaphore and under deep queues.
//
// Everything runs in this one process, one scenario after another, each on
// a fresh embedded nats-server, so ratios between rows are meaningful on a
// small, noisy machine. The figures are reported, never asserted: the
// program exits 0 whatever they are.
//
//	go run ./test/bench                   # 3s per scenario
//	go run ./test/bench -short            # 300ms per scenario, fewer variants
//	go run ./test/bench -scenario '^lease/' -cpuprofile cpu.out
//	go run ./test/bench -diag -scenario '^(lease|diag)/'   # where the cycle's time goes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		os.Exit(2)
	}
}

// result is one row of the table.
type result struct {
	Name    string
	Clients int
	Ops     int64
	Elapsed time.Duration
	CPU     time.Duration // user+system CPU of the whole process while it ran
	Lat     *hist         // per-op latency; nil when ops are too short to time one by one
	Acq     *hist         // lease rows: acquire latency alone
	Errors  int64
	Msgs    int64 // messages the server took in and delivered during the run; 0 if not counted
	Note    string
	Ratio   string // filled in by ratios()
	ratio   float64
	ratioTo string

	// Set by the waiters scenarios for the targets: live heap added per
	// queued waiter, of the whole process (ReadMemStats) and, for the
	// manager, of the allocations made by the product's packages.
	BytesPerWaiter        float64
	ManagerBytesPerWaiter float64
}

// cpuPerOp is the process's CPU time per operation: the server's, the
// manager's and the clients' together.
func (r *result) cpuPerOp() time.Duration {
	if r.Ops <= 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Ops)
}

func (r *result) opsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// nsPerOp is wall time per operation across all clients, as go test -bench
// reports it for RunParallel.
func (r *result) nsPerOp() float64 {
	if r.Ops == 0 {
		return 0
	}
	return float64(r.Elapsed.Nanoseconds()) / float64(r.Ops)
}

// config is what every scenario is given.
type config struct {
	duration time.Duration
	short    bool
	progress io.Writer
}

type scenario struct {
	name string
	run  func(ctx context.Context, cfg config) (*result, error)
}

// run parses args, runs the selected scenarios in order and prints the
// table and the targets to out. Progress goes to progress.
func run(ctx context.Context, args []string, out, progress io.Writer) ([]*result, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(progress)
	duration := fs.Duration("duration", 3*time.Second, "how long each scenario runs")
	short := fs.Bool("short", false, "300ms per scenario (unless -duration is given) and fewer variants")
	filter := fs.String("scenario", "", "run only the scenarios whose name matches this regular expression")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the scenarios to this file")
	list := fs.Bool("list", false, "list the scenarios and exit")
	diag := fs.Bool("diag", false, "also run the diagnostic scenarios that take the lease cycle apart")
	rounds := fs.Int("rounds", 1, "run the selected scenarios this many times over, one round after another, and take each figure's median")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	if *short && !durationSet {
		*duration = 300 * time.Millisecond
	}
	if *duration <= 0 {
		return nil, fmt.Errorf("-duration %v must be positive", *duration)
	}
	if *rounds < 1 || *rounds > maxRounds {
		return nil, fmt.Errorf("-rounds %d must be from 1 to %d", *rounds, maxRounds)
	}
	re, err := regexp.Compile(*filter)
	if err != nil {
		return nil, fmt.Errorf("-scenario: %w", err)
	}
	var selected []scenario
	all := scenarios(*short)
	if *diag {
		all = append(all, diagScenarios()...)
	}
	for _, s := range all {
		if re.MatchString(s.name) {
			selected = append(selected, s)
		}
	}
	if *list {
		for _, s := range selected {
			fmt.Fprintln(out, s.name)
		}
		return nil, nil
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("no scenario matches %q (see -list)", *filter)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}

	cfg := config{duration: *duration, short: *short, progress: progress}
	each := fmt.Sprintf("%v per scenario", *duration)
	if *rounds > 1 {
		each += fmt.Sprintf(", %d rounds", *rounds)
	}
	fmt.Fprintf(out, "slotlease bench: %s, GOMAXPROCS=%d, NumCPU=%d, %s/%s, %s\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, each)
	byRound, err := runRounds(ctx, cfg, selected, *rounds)
	if err != nil {
		return nil, err
	}
	for _, rs := range byRound {
		ratios(rs)
	}
	results := medianRows(byRound)
	printTable(out, results)
	printTargets(out, byRound)
	return results, nil
}

// scenarios lists every scenario in the order they run.
func scenarios(short bool) []scenario {
	var s []scenario
	add := func(name string, f func(ctx context.Context, cfg config) (*result, error)) {
		s = append(s, scenario{name, f})
	}
	pick := func(full, shortSet []int) []int {
		if short {
			return shortSet
		}
		return full
	}

	// 1. The floor.
	for _, c := range []int{1, 64} {
		add(fmt.Sprintf("floor/reqrep/c=%d", c), func(ctx context.Context, cfg config) (*result, error) { return floorReqRep(ctx, cfg, c) })
	}
	for _, c := range []int{1, 64} {
		add(fmt.Sprintf("floor/kv-create-delete/c=%d", c), func(ctx context.Context, cfg config) (*result, error) { return floorKVCreateDelete(ctx, cfg, c) })
	}
	for _, c := range pick([]int{1, 16}, []int{1}) {
		add(fmt.Sprintf("floor/kv-put-async/c=%d", c), func(ctx context.Context, cfg config) (*result, error) { return floorKVPutAsync(ctx, cfg, c) })
	}

	// 2. Naive lease services.
	type cc struct{ clients, capacity int }
	serial := []cc{{1, 4}, {64, 4}, {64, 64}}
	fifo := []cc{{16, 4}, {16, 64}, {64, 4}, {64, 64}}
	lease := []cc{{1, 4}, {1, 64}, {16, 4}, {16, 64}, {64, 4}, {64, 64}}
	if short {
		serial = []cc{{1, 4}}
		fifo = []cc{{64, 4}}
		lease = []cc{{1, 4}, {64, 4}}
	}
	for _, v := range serial {
		add(fmt.Sprintf("naive-serial/c=%d/cap=%d", v.clients, v.capacity), func(ctx context.Context, cfg config) (*result, error) {
			return naiveLease(ctx, cfg, false, v.clients, v.capacity)
		})
	}
	for _, v := range fifo {
		add(fmt.Sprintf("naive-fifo/c=%d/cap=%d", v.clients, v.capacity), func(ctx context.Context, cfg config) (*result, error) {
			return naiveLease(ctx, cfg, true, v.clients, v.capacity)
		})
	}

	// 3. The product's lease cycle, in one account and in the embedded
	// server's accounts layout (requests cross a service import).
	for _, v := range lease {
		add(fmt.Sprintf("lease/c=%d/cap=%d", v.clients, v.capacity), func(ctx context.Context, cfg config) (*result, error) {
			return leaseCycle(ctx, cfg, v.clients, v.capacity)
		})
	}
	for _, v := range []cc{{1, 4}, {64, 4}} {
		add(fmt.Sprintf("lease-accounts/c=%d/cap=%d", v.clients, v.capacity), func(ctx context.Context, cfg config) (*result, error) {
			return leaseCycleWith(ctx, cfg, v.clients, v.capacity, managerParts{accounts: true})
		})
	}

	// 4. pools against semaphore.
	for _, v := range []struct {
		name                 string
		goroutines, capacity int
	}{{"uncontended", 1, 1}, {"contended-2g/cap=1", 2, 1}, {"contended-2g/cap=4", 2, 4}} {
		for _, impl := range []string{"pools", "semaphore"} {
			add(fmt.Sprintf("sem/%s/%s", v.name, impl), func(ctx context.Context, cfg config) (*result, error) {
				return semBench(cfg, impl, v.goroutines, int64(v.capacity))
			})
		}
	}

	// 5. Deep queues.
	for _, n := range []int{1_000, 10_000, 100_000} {
		add(fmt.Sprintf("waiters/pool/n=%s", kilo(n)), func(ctx context.Context, cfg config) (*result, error) { return poolWaiters(cfg, n) })
	}
	for _, n := range pick([]int{1_000, 10_000, 100_000}, []int{1_000, 10_000}) {
		add(fmt.Sprintf("waiters/manager/n=%s", kilo(n)), func(ctx context.Context, cfg config) (*result, error) { return managerWaiters(ctx, cfg, n) })
	}
	return s
}

// diagScenarios take the lease cycle apart: the same cycle without events,
// with every write acknowledged instead of seen on the watch, from raw
// wire clients (no lease.Client), and with a store that costs nothing (the
// ceiling any store design could reach).
func diagScenarios() []scenario {
	var s []scenario
	for _, v := range []struct{ clients, capacity int }{{1, 4}, {64, 4}, {64, 64}} {
		s = append(s, scenario{fmt.Sprintf("diag/lease-memstore/c=%d/cap=%d", v.clients, v.capacity), func(ctx context.Context, cfg config) (*result, error) {
			return leaseCycleMemStore(ctx, cfg, v.clients, v.capacity)
		}})
	}
	for _, c := range []int{1, 64} {
		s = append(s,
			scenario{fmt.Sprintf("diag/lease-acked/c=%d/cap=4", c), func(ctx context.Context, cfg config) (*result, error) {
				return leaseCycleAcked(ctx, cfg, c, 4)
			}},
			scenario{fmt.Sprintf("diag/lease-nop-events/c=%d/cap=4", c), func(ctx context.Context, cfg config) (*result, error) {
				return leaseCycleNopEvents(ctx, cfg, c, 4)
			}},
			scenario{fmt.Sprintf("diag/lease-raw-client/c=%d/cap=4", c), func(ctx context.Context, cfg config) (*result, error) {
				return rawLeaseCycle(ctx, cfg, c, 4)
			}})
	}
	return s
}

func kilo(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func find(results []*result, name string) *result {
	for _, r := range results {
		if r.Name == name && r.Ops > 0 {
			return r
		}
	}
	return nil
}

// ratios fills the ratio column: each product row against its baseline.
func ratios(results []*result) {
	for _, r := range results {
		var base *result
		var what string
		higherIsBetter := true
		// The ceiling rows compare with the same baseline as the lease rows.
		cycle := strings.TrimPrefix(strings.TrimPrefix(r.Name, "diag/lease-memstore/"), "lease/")
		switch {
		case cycle != r.Name && strings.HasPrefix(cycle, "c=1/"):
			base, what = find(results, "naive-serial/c=1/cap=4"), "naive-serial"
		case cycle != r.Name:
			base, what = find(results, "naive-fifo/"+cycle), "naive-fifo"
		case strings.HasPrefix(r.Name, "sem/") && strings.HasSuffix(r.Name, "/pools"):
			base, what = find(results, strings.TrimSuffix(r.Name, "/pools")+"/semaphore"), "semaphore ns/op"
			higherIsBetter = false
		case strings.HasPrefix(r.Name, "waiters/"):
			i := strings.LastIndex(r.Name, "n=")
			base, what = find(results, r.Name[:i]+"n=1k"), "grant time at 1k"
			higherIsBetter = false
		}
		if base == nil || r.Ops == 0 || base == r {
			continue
		}
		r.ratio, r.ratioTo = r.nsPerOp()/base.nsPerOp(), what
		if higherIsBetter {
			r.ratio = r.opsPerSec() / base.opsPerSec()
		}
		r.Ratio = fmt.Sprintf("%.2fx %s", r.ratio, what)
	}
}

func printTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tclients\tops\tops/s\tp50\tp99\tacq p50\tacq p99\tratio\tnote")
	for _, r := range results {
		note := r.Note
		if r.Msgs > 0 && r.Ops > 0 {
			note = strings.TrimSpace(fmt.Sprintf("%.1f msgs/op; %s cpu/op; %s", float64(r.Msgs)/float64(r.Ops), fmtDur(r.cpuPerOp()), note))
			note = strings.TrimSuffix(note, ";")
		}
		if r.Errors > 0 {
			note = strings.TrimSpace(note + fmt.Sprintf(" errors=%d", r.Errors))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Name, r.Clients, r.Ops, fmtRate(r.opsPerSec()),
			fmtLat(r.Lat, 0.50), fmtLat(r.Lat, 0.99), fmtLat(r.Acq, 0.50), fmtLat(r.Acq, 0.99),
			orDash(r.Ratio), orDash(note))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtLat(h *hist, q float64) string {
	if h == nil || h.n == 0 {
		return "-"
	}
	return fmtDur(h.quantile(q))
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.0fus", float64(d)/1e3)
	default:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
}
