// Command leasemgr runs the lease manager for one node and inspects it.
//
//	leasemgr [run]          serve this node's pools (embedded NATS unless NATS_URL is set)
//	leasemgr pools [--json] print this node's pools
//	leasemgr watch          print lease events live
//	leasemgr resize gpu=2   change pools at runtime
//
// Configuration comes from the environment; see README.md.
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
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
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

const usage = `usage: leasemgr [command]

commands:
  run                 serve this node's pools (the default)
  pools [--json] [--all] [--node N]
                      print pools: capacity, in use, available, queued, policy
                      (--all: every node, found by NATS micro service discovery)
  watch [flags]       print lease events live (--node, --pool, --kind, --json;
                      --since 1h replays the stored events first)
  resize [flags] name=capacity...
                      change pools at runtime (--rate P=60/m, --burst P=5,
                      --remove P, --force, --reset)

Configuration is read from the environment: NODE_ID, POOL_CAPACITIES,
CLUSTER_POOLS, POOL_RATES, POOL_RATE_BURST, EXECUTOR_MAX_CONCURRENCY, POOL_POLICIES, POOL_MAX_QUEUE,
MAX_QUEUED_PER_CONNECTION, TENANT_WEIGHTS,
TENANT_DEFAULT_WEIGHT, TENANT_CAPS, PRIORITY_AGING, NATS_URL, NATS_LISTEN,
NATS_STORE_DIR, NATS_REPLICAS, LEASE_TTL, LEADER_TTL, LEASE_SUBJECT_PREFIX,
HTTP_ADDR, EVENT_RETENTION, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD,
NATS_TLS_CA, NATS_TLS_CERT, NATS_TLS_KEY, NATS_INBOX_PREFIX, NATS_AUTH_DIR, LOG_LEVEL,
LOG_FORMAT and OTEL_*. See README.md.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd, rest := "run", args
	if len(args) > 0 {
		cmd, rest = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runManager(ctx, rest, stderr)
	case "pools":
		return runPools(ctx, rest, stdout, stderr)
	case "watch":
		return runWatch(ctx, rest, stdout, stderr)
	case "resize":
		return runResize(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
}
