// Command executor runs work under a slot lease.
//
//	executor run --pool P[=K]... [--slots K] [--wait D] [flags] -- CMD ARGS...
//	executor submit --pool P --slots K [--priority P] [flags] -- CMD ARGS...
//	executor serve [--pools P1,P2] [--concurrency N] [flags]
//	executor status JOB_ID
//	executor jobs
//	executor wait (--batch NAME | JOB_ID...)
//	executor cancel JOB_ID... | --batch NAME
//	executor purge --pool P --confirm
//	executor completion bash|zsh|fish
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
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/slotlease/slotlease/cmd/internal/cli"
	"github.com/slotlease/slotlease/sandbox"
)

// Exit codes of executor itself; any other code is the command's own.
const (
	ExitUsage     = 2   // bad flags, arguments or configuration
	ExitNoLease   = 75  // no lease: unknown pool, bad slots, wait expired, would wait, queue full, dropped, no manager
	ExitLeaseLost = 76  // the lease was lost while the command ran; it was stopped
	ExitTimeout   = 124 // the command ran past --timeout and was stopped
)

// ExitSuperseded: a newer request of the run's concurrency group replaced
// it while it waited, or asked it to stop while it ran (it was stopped as
// a cancel stops it, and its leases released).
const ExitSuperseded = 77

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
	if err != nil {
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

// run runs the command args names and returns executor's exit code (or
// the command's it ran) and the error to print.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	code := 0
	err := cli.Execute(ctx, newRoot(&code), args, stdout, stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, err
	}
	if err != nil && code == 0 {
		code = 1
	}
	return code, err
}
