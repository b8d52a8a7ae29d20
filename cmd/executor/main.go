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
// environment: `executor help` lists every variable (config.Vars), and
// docs/configuration.md says more.
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
		fmt.Fprint(stderr, usage())
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
	case "version":
		code, err = versionCommand(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return 0, nil
	default:
		fmt.Fprint(stderr, usage())
		return ExitUsage, fmt.Errorf("unknown command %q", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0, nil // the command's -h: its usage is printed
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
