// Command executor runs work under a slot lease.
//
//	executor run --pool P[=K]... [--slots K] [--wait D] [limits] -- CMD ARGS...
//	executor submit --pool P --slots K [--priority P] -- CMD ARGS...
//	executor serve [--pools P1,P2] [--concurrency N]
//	executor status JOB_ID
//	executor jobs
//	executor wait (--batch NAME | JOB_ID...)
//	executor cancel JOB_ID... | --batch NAME
//	executor purge --pool P --confirm
//
// It acquires the lease on this node (printing its queue position while it
// waits), runs CMD in a sandbox with LEASE_ID, LEASE_TOKEN, LEASE_POOL,
// LEASE_SLOTS and LEASE_NODE in its environment, keeps the lease alive,
// releases it, and exits with CMD's exit code. Configuration comes from the
// environment (NODE_ID, NATS_URL, NATS_CREDS, NATS_LISTEN,
// LEASE_SUBJECT_PREFIX); see README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/slotlease/slotlease/sandbox"
)

// Exit codes of executor itself; any other code is the command's own.
const (
	ExitUsage     = 2   // bad flags, arguments or configuration
	ExitNoLease   = 75  // no lease: unknown pool, bad slots, wait expired, would wait, queue full, no manager
	ExitLeaseLost = 76  // the lease was lost while the command ran; it was stopped
	ExitTimeout   = 124 // the command ran past --timeout and was stopped
)

func main() {
	sandbox.Init() // the sandbox re-executes this binary to apply limits before exec
	// Workers may run as the same user (where no other ids can be had,
	// or unconfined): keep them out of this process's environment
	// (credentials), memory and descriptors.
	if err := sandbox.DisableDumping(); err != nil {
		fmt.Fprintln(os.Stderr, "executor: warning: cannot make the process non-dumpable:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "executor:", err)
	}
	os.Exit(code)
}

const usage = `usage: executor COMMAND [flags]

  run --pool P[=K]... [--slots K] [--wait D] [limits] -- CMD ARGS...
      Acquires K slots of pool P on this node's lease manager (of every pool
      given, node or cluster pools, all or none), runs CMD while the leases
      are held, releases them, and exits with CMD's exit code.
  submit --pool P [--slots K] [--priority high|normal|low] [--max-attempts N]
         [--timeout D] [--env K=V]... [--id ID] -- CMD ARGS...
  submit --spec FILE|-  or  submit --specs FILE|- (JSON Lines: many jobs)
      Stores job(s) in the durable job queue and prints their ids. --batch
      NAME puts them in a batch; inside a job, submit goes through the job's
      executor into its batch.
  serve [--pools P1,P2] [--concurrency N] [--grace D]
      Takes jobs of this node's pools, each under a lease of this node, until
      SIGTERM; running jobs get --grace to finish, then are given back.
  status [--json] JOB_ID
      Shows a job's state and latest result.
  jobs [--limit N] [--state S] [--json]
      Lists queue depth per pool and priority, and recent jobs.
  wait (--batch NAME | JOB_ID...) [--timeout D] [--fail-fast] [--json]
      Waits until every job of the batch (or these jobs), follow-ups
      included, has ended; prints a summary; exits 0 only if all succeeded,
      1 if some did not, 124 on --timeout.
  cancel [--reason R] JOB_ID... | --batch NAME
      Cancels jobs: a waiting one never runs; a running one is stopped and
      its slots released. Its state becomes cancelled.
  purge --pool P --confirm
      Cancels every waiting job of pool P (running ones finish) and prints
      how many.

Run "executor COMMAND -h" for a command's flags; docs/jobs.md describes jobs.
exit codes of run: CMD's own; 2 usage; 71 the worker could not be confined;
75 no lease; 76 lease lost; 124 timeout.
exit codes of the others: 0 ok; 1 error (e.g. unknown job); 2 usage or
invalid job; 69 NATS or the lease manager unreachable; 71 (serve) this
machine cannot confine workers.

Configuration is read from the environment: NODE_ID, NATS_URL, NATS_LISTEN,
LEASE_SUBJECT_PREFIX, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD,
NATS_TLS_CA, NATS_TLS_CERT, NATS_TLS_KEY, NATS_INBOX_PREFIX, NATS_AUTH_DIR, LOG_LEVEL,
LOG_FORMAT, OTEL_* and EXECUTOR_UNCONFINED. See README.md.
`

// exitError carries executor's own exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage, errors.New("no command given")
	}
	var err error
	var code int
	switch args[0] {
	case "run":
		code, err = runCommand(ctx, args[1:], stdout, stderr)
	case "submit":
		code, err = submitCommand(ctx, args[1:], stdout, stderr)
	case "serve":
		code, err = serveCommand(ctx, args[1:], stdout, stderr)
	case "status":
		code, err = statusCommand(ctx, args[1:], stdout, stderr)
	case "jobs":
		code, err = jobsCommand(ctx, args[1:], stdout, stderr)
	case "wait":
		code, err = waitCommand(ctx, args[1:], stdout, stderr)
	case "cancel":
		code, err = cancelCommand(ctx, args[1:], stdout, stderr)
	case "purge":
		code, err = purgeCommand(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0, nil
	default:
		fmt.Fprint(stderr, usage)
		return ExitUsage, fmt.Errorf("unknown command %q", args[0])
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, err
	}
	if err != nil && code == 0 {
		code = 1
	}
	return code, err
}
