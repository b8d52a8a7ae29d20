package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/sandbox"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// passEnv are the executor's own variables a worker also gets. Everything
// else, NATS credentials above all, stays out of the worker's environment.
var passEnv = []string{"PATH", "LANG", "LC_ALL", "TZ", "TERM", "USER", "LOGNAME"}

type runFlags struct {
	pools       []lease.Want
	slots       int64
	wait        time.Duration
	timeout     time.Duration
	cpu         time.Duration
	memory      byteSize
	maxProcs    int
	maxFiles    int
	keepWorkdir bool
	dir         string
	isolate     bool
	noNetwork   bool
	grace       time.Duration
	env         envFlags
	writable    pathFlags
	node        string
	priority    string
	tenant      string
	key         string
	noWait      bool
	units       int64 // the estimate for pools with a budget; 0 none (usagefile.go)
	group       groupFlags
}

// runSetup defines run's flags; its action parses and checks them into
// runFlags, then runs the command.
func runSetup(cmd *cobra.Command) action {
	f := &runFlags{}
	fs := cmd.Flags()
	var pools poolFlags
	fs.Var(&pools, "pool", "pool to take slots from, NAME or NAME=SLOTS; repeat it to hold several pools at once, all or none (default \"default\")")
	fs.Int64Var(&f.slots, "slots", 1, "number of slots, with a single --pool")
	fs.DurationVar(&f.wait, "wait", 0, "give up if not granted within this time (0: wait as long as it takes)")
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the command after this wall-clock time (0: none)")
	fs.DurationVar(&f.cpu, "cpu", 0, "CPU time limit (0: none)")
	fs.Var(&f.memory, "memory", "memory limit, e.g. 512M or 2G (0: none)")
	fs.IntVar(&f.maxProcs, "max-procs", 0, "process limit (0: none)")
	fs.IntVar(&f.maxFiles, "max-files", 0, "open file limit (0: inherit)")
	fs.BoolVar(&f.keepWorkdir, "keep-workdir", false, "keep the fresh working directory after the run")
	fs.StringVar(&f.dir, "dir", "", "run in this directory instead of a fresh one")
	fs.BoolVar(&f.isolate, "isolate", false, "own PID and mount namespace where the machine allows it")
	fs.BoolVar(&f.noNetwork, "no-network", false, "own network namespace with only loopback")
	fs.DurationVar(&f.grace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping the command (on lease loss at most TTL/20)")
	fs.Var(&f.env, "env", "KEY=VALUE for the command's environment (repeatable)")
	fs.Var(&f.writable, "writable", "a path the command may write besides its working directory, as far as its ids may (repeatable)")
	fs.StringVar(&f.node, "node", "", "node whose lease manager to ask (default NODE_ID)")
	fs.StringVar(&f.priority, "priority", "normal", "high, normal, low or an integer (pools with the priority policy)")
	fs.StringVar(&f.tenant, "tenant", "", "tenant to share slots as (pools with the fair policy)")
	fs.StringVar(&f.key, "key", "", "fairness key: fair pools share slots by key within a tenant, POOL_KEY_LIMITS caps each")
	fs.BoolVar(&f.noWait, "no-wait", false, "fail at once (exit 75, would_wait) instead of queueing")
	fs.Int64Var(&f.units, "units", 0, "estimated usage for pools with a budget (POOL_BUDGETS); the command may write the actual to $LEASE_USAGE_FILE")
	f.group.define(fs)
	words(cmd, "priority", "high", "normal", "low")
	_ = cmd.MarkFlagDirname("dir")
	_ = cmd.MarkFlagDirname("writable")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if err := f.check(pools, fs.Changed("slots"), args); err != nil {
			return ExitUsage, &exitError{code: ExitUsage, err: err}
		}
		return runCommand(ctx, f, args, stdout, stderr)
	}
}

// check checks run's flags and fills in f.pools; cmd is the command to run.
func (f *runFlags) check(pools poolFlags, slotsSet bool, cmd []string) error {
	if len(cmd) == 0 {
		return errors.New("no command: give it after --, e.g. executor run --pool gpu -- sleep 5")
	}
	if f.slots <= 0 {
		return fmt.Errorf("--slots %d: must be a positive integer", f.slots)
	}
	if err := checkUnitsFlag(f.units); err != nil {
		return err
	}
	var err error
	if f.pools, err = pools.resolve(f.slots, slotsSet); err != nil {
		return err
	}
	if _, err := leasePriority(f.priority); err != nil {
		return err
	}
	if err := f.group.check(); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{"--wait": f.wait, "--timeout": f.timeout, "--cpu": f.cpu, "--kill-grace": f.grace} {
		if d < 0 {
			return fmt.Errorf("%s %v: must not be negative", name, d)
		}
	}
	return nil
}

// runCommand runs cmd under the leases f asks for.
func runCommand(ctx context.Context, f *runFlags, cmd []string, stdout, stderr io.Writer) (code int, err error) {
	if err := needsNATSInJob("run"); err != nil {
		return codeOf(err), err
	}
	cfg, err := config.LoadCommonAs(config.RoleExecutor)
	if err != nil {
		return ExitUsage, &exitError{code: ExitUsage, err: fmt.Errorf("configuration:\n%w", err)}
	}
	if f.node == "" {
		f.node = cfg.NodeID
	}
	stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return ExitUsage, err
	}
	defer stopTelemetry() // flush the run's spans before exiting
	first := f.pools[0]
	ctx, span := telemetry.StartSpan(ctx, natstrace.SpanExecutorRun, natstrace.Node(f.node), natstrace.Pool(first.Pool), natstrace.Slots(first.Slots))
	defer func() {
		natstrace.SetAttributes(span, natstrace.ExitCode(code))
		natstrace.End(span, err)
	}()
	hide, err := workerHide(cfg, stderr) // refuses or warns now, before any wait for slots
	if err != nil {
		return codeOf(err), err
	}
	nc, err := natsconn.Connect(cfg.NATSAddress(), natsconn.ConfigAuth(cfg), "executor")
	if err != nil {
		return ExitNoLease, fail(ExitNoLease, "%v (is leasemgr running?)", err)
	}
	defer nc.Close()
	client, err := lease.NewClient(nc, f.node, clientOptions(cfg)...)
	if err != nil {
		return ExitNoLease, fail(ExitNoLease, "%v", err)
	}
	defer client.Close()

	// The client reports the position at every poll: say it when it
	// changed, not every few seconds while nothing did.
	var lastWaiting string
	opts := []lease.AcquireOption{lease.OnQueuedIn(func(q lease.Queued) {
		holding := ""
		if len(q.Holding) > 0 {
			holding = " (holding " + strings.Join(q.Holding, ", ") + ")"
		}
		line := fmt.Sprintf("executor: waiting for %d slot(s) of pool %s on node %s: position %d in queue%s\n", q.Slots, q.Pool, q.Node, q.Position, holding)
		if line != lastWaiting {
			lastWaiting = line
			fmt.Fprint(stderr, line)
		}
	})}
	if f.wait > 0 {
		opts = append(opts, lease.WithWait(f.wait))
	}
	prio, err := leasePriority(f.priority)
	if err != nil {
		return ExitUsage, &exitError{code: ExitUsage, err: err}
	}
	opts = append(opts, lease.WithPriority(prio), lease.WithTenant(f.tenant), lease.WithKey(f.key), lease.WithUnits(f.units))
	opts = append(opts, f.group.options()...)
	if f.noWait {
		opts = append(opts, lease.NoWait())
	}
	set, err := client.AcquireAll(ctx, f.pools, opts...)
	if errors.Is(err, lease.ErrSuperseded) {
		return ExitSuperseded, fail(ExitSuperseded, "no lease: %w", err)
	}
	if err != nil {
		return ExitNoLease, fail(ExitNoLease, "no lease: %w", err)
	}
	leases := set.Leases()
	for _, l := range leases {
		fmt.Fprintf(stderr, "executor: lease %s granted: %d slot(s) of pool %s on node %s, token %d\n", l.ID(), l.Slots(), l.Pool(), l.Node(), l.Token())
	}
	usage, lend, env, err := newRunUsage(f, hide, workerEnv(leases, f.env))
	if err != nil {
		_ = set.Release(context.WithoutCancel(ctx))
		err = notIsolated(err)
		return codeOf(err), err
	}
	defer func() {
		// The caller's context may be done (a signal): release on a fresh,
		// bounded one so the slots come back now rather than at the TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := usage.release(rctx, set, stderr); err != nil {
			fmt.Fprintf(stderr, "executor: %v (it expires on its own)\n", err)
		}
	}()

	// A newer run of the group asking this one to stop stops the command
	// as a cancel does: SIGTERM, --kill-grace, SIGKILL (groupstop.go).
	runCtx, stopped := stopOnRequest(ctx, set)
	defer stopped()
	res, err := sandbox.Run(runCtx, sandbox.Spec{
		Command: cmd, Env: env, Dir: f.dir, KeepWorkdir: f.keepWorkdir,
		Timeout: f.timeout, CPUTime: f.cpu, MemoryBytes: int64(f.memory), MaxProcs: f.maxProcs, MaxOpenFiles: f.maxFiles,
		Isolate: f.isolate, NoNetwork: f.noNetwork, Stdout: stdout, Stderr: stderr, KillGrace: f.grace, LostGrace: set.LossGrace(), Deadline: set.Deadline, CaptureBytes: -1,
		Hide: hide, Writable: writableIfConfined(hide, f.writable.real()), Lend: lend,
	}, set.Done())
	if err != nil {
		err = notIsolated(fmt.Errorf("running %q: %w", cmd[0], err))
		return codeOf(err), err
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stderr, "executor: note: %s\n", n)
	}
	if res.Workdir != "" && f.keepWorkdir {
		fmt.Fprintf(stderr, "executor: working directory kept at %s\n", res.Workdir)
	}
	if stopErr := set.StopErr(); stopErr != nil && res.StoppedBy == sandbox.StoppedCancelled {
		return ExitSuperseded, fail(ExitSuperseded, "%v; the command was stopped", stopErr)
	}
	switch res.StoppedBy {
	case sandbox.StoppedLeaseLost:
		why := set.Err()
		if why == nil {
			// The supervisor stopped it at the lease deadline before this
			// executor knew (it was frozen: SIGSTOP, a stall).
			why = errors.New("the lease deadline passed while this executor could not renew (it was stopped or stalled)")
		}
		return ExitLeaseLost, fail(ExitLeaseLost, "%v; the command was stopped", why)
	case sandbox.StoppedTimeout:
		return ExitTimeout, fail(ExitTimeout, "the command ran past --timeout %v and was stopped", f.timeout)
	case sandbox.StoppedMemory, sandbox.StoppedCPU:
		fmt.Fprintf(stderr, "executor: the command was stopped by its %s limit\n", res.StoppedBy)
	}
	if res.ExitCode >= 0 {
		return res.ExitCode, nil
	}
	if sig, ok := signalNumber(res.Signal); ok {
		return 128 + sig, nil
	}
	return 1, nil
}

// pathFlags collects a repeated path flag (--writable), made absolute
// (and, for executor run, which runs here, with symlinks resolved: the
// sandbox takes a writable path only by its real name).
type pathFlags []string

func (p *pathFlags) String() string { return strings.Join(*p, ",") }
func (p *pathFlags) Type() string   { return "PATH" }

func (p *pathFlags) Set(s string) error {
	abs, err := filepath.Abs(s)
	if err != nil || s == "" {
		return fmt.Errorf("want a path, got %q", s)
	}
	*p = append(*p, abs)
	return nil
}

// real resolves the symlinks of each path that exists.
func (p pathFlags) real() []string {
	out := make([]string, len(p))
	for i, s := range p {
		out[i] = s
		if r, err := filepath.EvalSymlinks(s); err == nil {
			out[i] = r
		}
	}
	return out
}

// writableIfConfined: an unconfined worker writes what the executor's
// user can anyway; sandbox.Spec.Writable is for confined ones.
func writableIfConfined(hide, writable []string) []string {
	if len(hide) == 0 {
		return nil
	}
	return writable
}

// envFlags collects repeated --env KEY=VALUE flags.
type envFlags map[string]string

// String is the flags in KEY=VALUE form, sorted; "" for none, so that
// help shows no default.
func (e *envFlags) String() string {
	kv := make([]string, 0, len(*e))
	for k, v := range *e {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func (e *envFlags) Type() string { return "KEY=VALUE" }

func (e *envFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	if *e == nil {
		*e = envFlags{}
	}
	(*e)[k] = v
	return nil
}

// byteSize parses sizes like 512M, 2G, 1048576.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Type() string   { return "SIZE" }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	num := strings.TrimSpace(s)
	if n := len(num); n > 0 {
		switch strings.ToUpper(num[n-1:]) {
		case "K":
			mult, num = 1<<10, num[:n-1]
		case "M":
			mult, num = 1<<20, num[:n-1]
		case "G":
			mult, num = 1<<30, num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return fmt.Errorf("want a size like 512M or 2G, got %q", s)
	}
	*b = byteSize(v * mult)
	return nil
}

// leasePriority maps --priority to a lease priority: high 1, normal 0,
// low -1, or any integer.
func leasePriority(s string) (int, error) {
	switch s {
	case "high":
		return 1, nil
	case "normal", "":
		return 0, nil
	case "low":
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("--priority %q: want high, normal, low or an integer", s)
	}
	return n, nil
}
