package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/slotlease/slotlease/jobs"
)

// submitSetup defines submit's flags; its action builds the job specs
// from them (or from a spec file) and submits them.
func submitSetup(cmd *cobra.Command) action {
	parse := submitFlags(cmd)
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		specs, noPoolCheck, err := parse(args, os.Stdin)
		if err != nil {
			return usageErr(err)
		}
		return submitCommand(ctx, specs, noPoolCheck, stdout, stderr)
	}
}

// submitCommand submits specs: through the job's executor inside a job,
// else to the job queue, after asking the lease managers whether their
// pools can grant the slots (unless noPoolCheck).
func submitCommand(ctx context.Context, specs []jobs.Spec, noPoolCheck bool, stdout, stderr io.Writer) (int, error) {
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
		for _, id := range rec.Superseded {
			fmt.Fprintf(stderr, "executor: job %s of group %q cancelled: job %s replaces it (%s)\n", id, rec.Spec.Group, rec.ID, rec.Spec.OnGroup)
		}
	}
	return 0, nil
}

// maxSpecsLines bounds a --specs file.
const maxSpecsLines = 100000

// submitFlags defines submit's flags on cmd and returns what builds the
// job specs from them and the arguments (the command), or from --spec or
// --specs; --batch applies to each.
func submitFlags(cmd *cobra.Command) func(args []string, stdin io.Reader) ([]jobs.Spec, bool, error) {
	s := jobs.NewSpec()
	var (
		specFile, specsFile, priority string
		timeout, cpu                  time.Duration
		memory                        byteSize
		env                           envFlags
		also                          poolFlags
		writable                      pathFlags
		noPoolCheck                   bool
		group                         groupFlags
	)
	fs := cmd.Flags()
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
	fs.StringVar(&s.Key, "key", "", "fairness key of the job's lease: fair pools share by key within a tenant, POOL_KEY_LIMITS caps each")
	fs.Int64Var(&s.Units, "units", 0, "estimated usage of each attempt for pools with a budget (POOL_BUDGETS); the command may write the actual to $LEASE_USAGE_FILE")
	fs.StringVar(&s.IdempotencyKey, "idempotency-key", "", "any string naming this job: submitting it again returns the job submitted first")
	group.define(fs)
	fs.BoolVar(&noPoolCheck, "no-pool-check", false, "submit without asking the lease managers whether the pools exist and can grant the slots (to queue for a pool that does not exist yet)")
	words(cmd, "priority", "high", "normal", "low")
	_ = cmd.MarkFlagFilename("spec", "json")
	_ = cmd.MarkFlagFilename("specs", "jsonl", "json")
	return func(args []string, stdin io.Reader) ([]jobs.Spec, bool, error) {
		if specFile != "" || specsFile != "" {
			var others []string
			fs.Visit(func(f *pflag.Flag) {
				if f.Name != "spec" && f.Name != "specs" && f.Name != "batch" && f.Name != "no-pool-check" {
					others = append(others, "--"+f.Name)
				}
			})
			if specFile != "" && specsFile != "" {
				others = append(others, "--specs")
			}
			if len(others) > 0 || len(args) > 0 {
				return nil, false, fmt.Errorf("--spec, --specs: give a spec file (and --batch, --no-pool-check), or flags and a command, not both (also got %s)", strings.Join(append(others, args...), " "))
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
		if len(args) == 0 {
			return nil, false, errors.New("no command: give it after --, e.g. executor submit --pool gpu -- ./train.sh, or use --spec FILE")
		}
		p, err := jobs.ParsePriority(priority)
		if err != nil {
			return nil, false, fmt.Errorf("--priority %q: must be high, normal or low", priority)
		}
		if s.Slots <= 0 {
			return nil, false, fmt.Errorf("--slots %d: must be a positive integer", s.Slots)
		}
		if err := checkUnitsFlag(s.Units); err != nil {
			return nil, false, err
		}
		if s.MaxAttempts < 1 || s.MaxAttempts > jobs.MaxMaxAttempts {
			return nil, false, fmt.Errorf("--max-attempts %d: must be from 1 to %d", s.MaxAttempts, jobs.MaxMaxAttempts)
		}
		if err := group.check(); err != nil {
			return nil, false, err
		}
		s.Group, s.OnGroup = group.group, group.onGroup()
		s.Priority, s.Command, s.Env, s.Writable = p, args, env, writable
		for _, w := range also {
			s.Pools = append(s.Pools, jobs.PoolSlots{Pool: w.Pool, Slots: max(w.Slots, 1)})
		}
		s.Timeout, s.CPU, s.MemoryBytes = jobs.Duration(timeout), jobs.Duration(cpu), int64(memory)
		if err := s.Validate(); err != nil {
			return nil, false, err
		}
		return []jobs.Spec{s}, noPoolCheck, nil
	}
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
