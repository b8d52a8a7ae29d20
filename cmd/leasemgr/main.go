// Command leasemgr runs the lease manager for one node and inspects it.
//
//	leasemgr [run]          serve this node's pools (embedded NATS unless NATS_URL is set)
//	leasemgr pools [--json] print this node's pools
//	leasemgr watch          print lease events live
//	leasemgr resize gpu=2   change pools at runtime
//	leasemgr nats-context   write nats CLI contexts, one per role
//	leasemgr layout --out D write a secure NATS cluster's files
//	leasemgr version        print what this binary was built from
//	leasemgr completion bash|zsh|fish   print a shell completion script
//
// Configuration comes from the environment: `leasemgr help` lists every
// variable (config.Vars), and docs/configuration.md says more.
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

func main() {
	// Workers of executors run as the same user: keep them out of this
	// process's environment (credentials), memory and descriptors.
	if err := sandbox.DisableDumping(); err != nil {
		fmt.Fprintln(os.Stderr, "leasemgr: warning: cannot make the process non-dumpable:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasemgr:", err)
		os.Exit(exitCode(err))
	}
}

// usageError marks bad flags, arguments or configuration: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// run runs the command args names (leasemgr run if none).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, newRoot(), args, stdout, stderr)
}
