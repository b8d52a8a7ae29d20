package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

// ExitUnavailable: NATS or the lease manager could not be reached.
const ExitUnavailable = 69

// connectQueue loads the configuration and binds the job queue; with
// create false nothing is created (ErrNoQueue if there is no queue yet).
func connectQueue(ctx context.Context, name string, create bool) (*config.Common, *nats.Conn, *jobs.Queue, error) {
	if err := needsNATSInJob(strings.TrimPrefix(name, "executor ")); err != nil {
		return nil, nil, nil, err
	}
	cfg, err := config.LoadCommonAs(config.RoleExecutor)
	if err != nil {
		return nil, nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("configuration:\n%w", err)}
	}
	nc, err := natsconn.Connect(cfg.NATSAddress(), natsconn.ConfigAuth(cfg), name)
	if err != nil {
		return nil, nil, nil, fail(ExitUnavailable, "%v (is leasemgr running?)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var q *jobs.Queue
	if create {
		q, err = jobs.Open(ctx, nc, jobs.Config{Prefix: cfg.SubjectPrefix})
	} else {
		q, err = jobs.Bind(ctx, nc, cfg.SubjectPrefix)
	}
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		nc.Close()
		return nil, nil, nil, fail(ExitUnavailable, "%v (is JetStream enabled on %s?)", err, cfg.NATSAddress())
	}
	return cfg, nc, q, err
}

// clientOptions are the lease client's options for a connection made from
// cfg. Without NATS_URL the executor talks straight to leasemgr's embedded
// server on this host and closes its connection only on its way out, so
// every drop is that server's doing (it restarted or crashed), which frees
// no lease: the running work keeps its lease while the executor reconnects
// (lease.WithServerOnlyDrops).
func clientOptions(cfg *config.Common) []lease.ClientOption {
	opts := []lease.ClientOption{lease.WithPrefix(cfg.SubjectPrefix)}
	if cfg.NATSURL == "" {
		opts = append(opts, lease.WithServerOnlyDrops())
	}
	return opts
}

// usageErr turns a flag or validation error into exit code 2.
func usageErr(err error) (int, error) {
	if errors.Is(err, flag.ErrHelp) {
		return 0, err
	}
	return ExitUsage, &exitError{code: ExitUsage, err: err}
}

// codeOf returns the exit code an error carries (1 if none).
func codeOf(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func submitCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	specs, noPoolCheck, err := parseSubmit(args, os.Stdin, stdout, stderr)
	if err != nil {
		return usageErr(err)
	}
	if socket := os.Getenv(jobs.SocketEnv); socket != "" {
		// The serving executor traces it: the job's follow-up is submitted
		// in the trace of its run.
		for _, s := range specs {
			if code, err := submitFromJob(ctx, socket, s, stdout, stderr); err != nil {
				return code, err
			}
		}
		return 0, nil
	}
	stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return ExitUsage, err
	}
	defer stopTelemetry()
	cfg, nc, q, err := connectQueue(ctx, "executor submit", true)
	if err != nil {
		return codeOf(err), err
	}
	defer nc.Close()
	if !noPoolCheck {
		checked, err := checkPools(ctx, nc, cfg.SubjectPrefix, cfg.NodeID, specs)
		switch {
		case err != nil && !checked:
			return 1, fmt.Errorf("asking the lease managers for their pools: %w", err)
		case err != nil:
			return usageErr(err)
		case !checked:
			fmt.Fprintln(stderr, "executor: no lease manager answered: the jobs' pools and slots were not checked")
		}
	}
	for i, s := range specs {
		rec, err := q.Submit(ctx, s)
		if err != nil {
			if len(specs) > 1 {
				err = fmt.Errorf("job %d of %d (%d submitted before it, their ids printed): %w", i+1, len(specs), i, err)
			}
			if errors.Is(err, jobs.ErrInvalidSpec) || errors.Is(err, jobs.ErrDuplicate) {
				return usageErr(err)
			}
			return 1, err
		}
		fmt.Fprintln(stdout, rec.ID)
		if rec.Existing {
			fmt.Fprintf(stderr, "executor: job %s exists (%s): submitted before with this spec\n", rec.ID, rec.State)
		}
	}
	return 0, nil
}

// maxSpecsLines bounds a --specs file.
const maxSpecsLines = 100000

// parseSubmit builds the job specs from --spec, --specs or from flags and
// a command; --batch applies to each.
func parseSubmit(args []string, stdin io.Reader, stdout, stderr io.Writer) ([]jobs.Spec, bool, error) {
	s := jobs.NewSpec()
	var (
		specFile, specsFile, priority string
		timeout, cpu                  time.Duration
		memory                        byteSize
		env                           envFlags
		also                          poolFlags
		writable                      pathFlags
		noPoolCheck                   bool
	)
	fs := flag.NewFlagSet("executor submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&specFile, "spec", "", "read the job spec (JSON, see docs/jobs.md) from this file; - for stdin")
	fs.StringVar(&specsFile, "specs", "", "read many job specs, one JSON object per line (JSON Lines), from this file; - for stdin")
	fs.StringVar(&s.Batch, "batch", "", "the batch the job(s) belong to (executor wait --batch waits for all of it)")
	fs.StringVar(&s.ID, "id", "", "job id, making the submit idempotent (a fresh unique id otherwise)")
	fs.StringVar(&s.Pool, "pool", s.Pool, "pool to run in")
	fs.Int64Var(&s.Slots, "slots", s.Slots, "slots the job needs")
	fs.Var(&also, "also-pool", "a further pool the job holds beside --pool, NAME or NAME=SLOTS (repeatable; cluster pools too)")
	fs.StringVar(&priority, "priority", string(s.Priority), "high, normal or low")
	fs.IntVar(&s.MaxAttempts, "max-attempts", s.MaxAttempts, "attempts before the job is dead-lettered")
	fs.DurationVar(&timeout, "timeout", 0, "stop an attempt after this wall-clock time (0: none)")
	fs.DurationVar(&cpu, "cpu", 0, "CPU time limit per attempt (0: none)")
	fs.Var(&memory, "memory", "memory limit, e.g. 512M or 2G (0: none)")
	fs.IntVar(&s.MaxProcs, "max-procs", 0, "process limit (0: none)")
	fs.IntVar(&s.MaxOpenFiles, "max-files", 0, "open file limit (0: inherit)")
	fs.BoolVar(&s.Isolate, "isolate", false, "own PID and mount namespace where the machine allows it")
	fs.BoolVar(&s.NoNetwork, "no-network", false, "own network namespace with only loopback")
	fs.Var(&env, "env", "KEY=VALUE for the job's environment (repeatable)")
	fs.Var(&writable, "writable", "an absolute path the job may write besides its working directory, as far as its ids may (repeatable)")
	fs.StringVar(&s.Tenant, "tenant", "", "tenant of the job's lease: fair pools share by it, tenant caps count it")
	fs.StringVar(&s.IdempotencyKey, "idempotency-key", "", "any string naming this job: submitting it again returns the job submitted first")
	fs.BoolVar(&noPoolCheck, "no-pool-check", false, "submit without asking the lease managers whether the pools exist and can grant the slots (to queue for a pool that does not exist yet)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, false, err
	}
	if specFile != "" || specsFile != "" {
		var others []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "spec" && f.Name != "specs" && f.Name != "batch" && f.Name != "no-pool-check" {
				others = append(others, "--"+f.Name)
			}
		})
		if specFile != "" && specsFile != "" {
			others = append(others, "--specs")
		}
		if len(others) > 0 || fs.NArg() > 0 {
			return nil, false, fmt.Errorf("--spec, --specs: give a spec file (and --batch, --no-pool-check), or flags and a command, not both (also got %s)", strings.Join(append(others, fs.Args()...), " "))
		}
		var specs []jobs.Spec
		var err error
		if specFile != "" {
			specs, err = readSpec(specFile, stdin)
		} else {
			specs, err = readSpecs(specsFile, stdin)
		}
		if err != nil {
			return nil, false, err
		}
		specs, err = withBatch(specs, s.Batch)
		return specs, noPoolCheck, err
	}
	if fs.NArg() == 0 {
		return nil, false, errors.New("no command: give it after --, e.g. executor submit --pool gpu -- ./train.sh, or use --spec FILE")
	}
	p, err := jobs.ParsePriority(priority)
	if err != nil {
		return nil, false, fmt.Errorf("--priority %q: must be high, normal or low", priority)
	}
	if s.Slots <= 0 {
		return nil, false, fmt.Errorf("--slots %d: must be a positive integer", s.Slots)
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > jobs.MaxMaxAttempts {
		return nil, false, fmt.Errorf("--max-attempts %d: must be from 1 to %d", s.MaxAttempts, jobs.MaxMaxAttempts)
	}
	s.Priority, s.Command, s.Env, s.Writable = p, fs.Args(), env, writable
	for _, w := range also {
		s.Pools = append(s.Pools, jobs.PoolSlots{Pool: w.Pool, Slots: max(w.Slots, 1)})
	}
	s.Timeout, s.CPU, s.MemoryBytes = jobs.Duration(timeout), jobs.Duration(cpu), int64(memory)
	if err := s.Validate(); err != nil {
		return nil, false, err
	}
	return []jobs.Spec{s}, noPoolCheck, nil
}

// withBatch puts every spec in batch (if given); a spec naming another
// batch is refused.
func withBatch(specs []jobs.Spec, batch string) ([]jobs.Spec, error) {
	if batch == "" {
		return specs, nil
	}
	for i := range specs {
		if specs[i].Batch != "" && specs[i].Batch != batch {
			return nil, fmt.Errorf("--batch %s: job %d of the specs names batch %q", batch, i+1, specs[i].Batch)
		}
		specs[i].Batch = batch
		if err := specs[i].Validate(); err != nil {
			return nil, fmt.Errorf("--batch: %w", err)
		}
	}
	return specs, nil
}

// openSpecs opens a spec file, or stdin for "-".
func openSpecs(name string, stdin io.Reader) (io.Reader, func(), error) {
	if name == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// readSpec reads one spec (--spec).
func readSpec(name string, stdin io.Reader) ([]jobs.Spec, error) {
	r, done, err := openSpecs(name, stdin)
	if err != nil {
		return nil, fmt.Errorf("--spec: %w", err)
	}
	defer done()
	data, err := io.ReadAll(io.LimitReader(r, jobs.MaxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--spec: %w", err)
	}
	spec, err := jobs.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("--spec %s: %w", name, err)
	}
	return []jobs.Spec{spec}, nil
}

// readSpecs reads JSON Lines (--specs), all of them before any is
// submitted, so a bad line submits nothing. Blank lines are skipped.
func readSpecs(name string, stdin io.Reader) ([]jobs.Spec, error) {
	r, done, err := openSpecs(name, stdin)
	if err != nil {
		return nil, fmt.Errorf("--specs: %w", err)
	}
	defer done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), jobs.MaxSpecBytes+1)
	var specs []jobs.Spec
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if len(specs) == maxSpecsLines {
			return nil, fmt.Errorf("--specs %s: more than %d jobs; submit them in parts", name, maxSpecsLines)
		}
		spec, err := jobs.ParseSpec(text)
		if err != nil {
			return nil, fmt.Errorf("--specs %s, line %d: %w", name, line, err)
		}
		specs = append(specs, spec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line is longer than %d bytes", jobs.MaxSpecBytes)
		}
		return nil, fmt.Errorf("--specs %s: %w", name, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("--specs %s: no job in it", name)
	}
	return specs, nil
}

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("executor status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the record as JSON")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return usageErr(errors.New("usage: executor status [--json] JOB_ID"))
	}
	id := fs.Arg(0)
	cfg, nc, q, err := connectQueue(ctx, "executor status", false)
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		return codeOf(err), err
	}
	defer nc.Close()
	var rec *jobs.Record
	if q != nil {
		rec, err = q.Get(ctx, id)
	}
	if errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobs.ErrNoQueue) {
		return 1, fmt.Errorf("job %q not found: no such id under prefix %q, or its record expired (results are kept %v)", id, cfg.SubjectPrefix, jobs.DefaultResultTTL)
	}
	if err != nil {
		return 1, err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(rec)
	}
	printRecord(stdout, rec)
	return 0, nil
}

func printRecord(w io.Writer, r *jobs.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339Nano)
	}
	row("job", r.ID)
	row("state", string(r.State))
	row("pool", fmt.Sprintf("%s (%d slot(s)), priority %s", r.Spec.Pool, r.Spec.Slots, r.Spec.Priority))
	row("command", quoteArgs(r.Spec.Command))
	row("attempts", fmt.Sprintf("%d of %d", r.Attempts, r.Spec.MaxAttempts))
	if r.Returned > 0 {
		row("given back", fmt.Sprintf("%d time(s), not counted as attempts", r.Returned))
	}
	if r.Node != "" {
		row("node", fmt.Sprintf("%s (lease %s, token %d)", r.Node, r.LeaseID, r.LeaseToken))
	}
	if r.ExitCode != nil {
		row("exit code", strconv.Itoa(*r.ExitCode))
	}
	row("signal", r.Signal)
	if r.ExitCode != nil {
		row("duration", r.Duration().String())
	}
	row("stopped by", r.StoppedBy)
	row("submitted", ts(r.SubmittedAt))
	row("started", ts(r.StartedAt))
	row("finished", ts(r.FinishedAt))
	row("next attempt", ts(r.NextAttemptAt))
	row("error", r.Error)
	for _, n := range r.Notes {
		row("note", n)
	}
	_ = tw.Flush()
	for _, out := range []struct{ name, text string }{{"stdout", r.StdoutTail}, {"stderr", r.StderrTail}} {
		if out.text != "" {
			fmt.Fprintf(w, "--- %s (last %d bytes at most) ---\n%s", out.name, jobs.DefaultOutputBytes, out.text)
			if !strings.HasSuffix(out.text, "\n") {
				fmt.Fprintln(w)
			}
		}
	}
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]{}~#!") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func jobsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("executor jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 20, "show at most this many recent jobs (0: all)")
	state := fs.String("state", "", "show only jobs in this state: queued, running, failed, succeeded, dead or cancelled")
	asJSON := fs.Bool("json", false, "print JSON: {\"queues\": [...], \"jobs\": [...]}")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("jobs takes no arguments, got %q", fs.Args()))
	}
	switch jobs.State(*state) {
	case "", jobs.StateQueued, jobs.StateRunning, jobs.StateFailed, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled:
	default:
		return usageErr(fmt.Errorf("--state %q: must be queued, running, failed, succeeded, dead or cancelled", *state))
	}
	_, nc, q, err := connectQueue(ctx, "executor jobs", false)
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		return codeOf(err), err
	}
	defer nc.Close()
	var out struct {
		Queues []jobs.Depth    `json:"queues"`
		Pools  []jobs.PoolLoad `json:"pools"`
		Jobs   []jobs.Record   `json:"jobs"`
	}
	if q != nil {
		if out.Queues, err = q.Depths(ctx); err != nil {
			return 1, err
		}
		all, err := q.List(ctx, 0, "")
		if err != nil {
			return 1, err
		}
		out.Pools = jobs.Loads(all, time.Now())
		out.Jobs = selectJobs(all, jobs.State(*state), *limit)
	}
	if *asJSON {
		if out.Queues == nil {
			out.Queues = []jobs.Depth{}
		}
		if out.Pools == nil {
			out.Pools = []jobs.PoolLoad{}
		}
		if out.Jobs == nil {
			out.Jobs = []jobs.Record{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tPRIORITY\tSTORED\tWAITING\tIN-FLIGHT")
	for _, d := range out.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", d.Pool, d.Priority, d.Stored, d.Waiting, d.InFlight)
	}
	fmt.Fprintln(tw)
	printLoads(tw, out.Pools)
	fmt.Fprintln(tw, "JOB\tSTATE\tPOOL\tPRIORITY\tATTEMPTS\tNODE\tEXIT\tDURATION\tUPDATED")
	for _, r := range out.Jobs {
		exit, dur := "-", "-"
		if r.ExitCode != nil {
			exit, dur = strconv.Itoa(*r.ExitCode), r.Duration().String()
		}
		node := r.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Spec.Pool, r.Spec.Priority,
			r.Attempts, r.Spec.MaxAttempts, node, exit, dur, r.UpdatedAt.Local().Format(time.DateTime))
	}
	return 0, tw.Flush()
}
