package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/sandbox"
)

// EnvUnconfined, set to 1, lets the executor run workers unconfined, with
// the secret paths readable, on a machine that cannot confine them (no
// namespaces): the explicit opt-out. Where confinement works it changes
// nothing: workers are confined all the same, and an attempt that cannot
// get its namespaces is never run unconfined.
const EnvUnconfined = config.EnvExecutorUnconfined

// ExitNotIsolated: the worker could not be confined (this machine cannot,
// or an attempt could not get its namespaces), so nothing was run.
const ExitNotIsolated = 71

// workerHide returns the paths to hide from every worker (credentials, the
// lease store), which also makes every worker confined (sandbox.Spec.Hide).
// It checks at start that this machine can confine workers, and says what
// it cannot: where it cannot at all, the executor refuses to start
// (ExitNotIsolated) unless EXECUTOR_UNCONFINED=1, and then it warns once,
// naming the paths the workers can read, and returns none. Where workers
// can only keep the executor's own uid, it says so once; where that uid
// or gid is 0 and the namespaces work, it refuses to start whatever
// EXECUTOR_UNCONFINED says (sandbox.WorkerIDsError).
func workerHide(cfg *config.Common, stderr io.Writer) ([]string, error) {
	paths := cfg.SecretPaths()
	unconfined := false
	switch v := os.Getenv(EnvUnconfined); v {
	case "", "0":
	case "1":
		unconfined = true
	default:
		return nil, fail(ExitUsage, "%s=%q: want 1 (run workers unconfined where this machine cannot confine them) or 0", EnvUnconfined, v)
	}
	c, err := sandbox.CheckConfine()
	var ids *sandbox.WorkerIDsError
	if errors.As(err, &ids) {
		// Confinement works here but for the worker's ids. The opt-out is
		// for machines without namespaces, and would not help: an
		// unconfined worker keeps the executor's ids, 0 among them.
		return nil, fail(ExitNotIsolated, "%s; nothing was run. Map a range of at least 3 ids besides 0 into the executor's user namespace, "+
			"give its user subordinate ids (/etc/subuid, /etc/subgid and newuidmap), or run it as an ordinary user whose groups do not include 0 "+
			"(see docs/security.md, \"Who the worker is\")", ids.Reason())
	}
	if err == nil {
		if c.Identity == sandbox.IdentityExecutor {
			fmt.Fprintf(stderr, "executor: note: workers run as this user (uid %s), confined: no ids of their own can be had (%s); see docs/security.md, \"Who the worker is\"\n", c.UIDs, c.Why)
		}
		return paths, nil
	}
	var exposed []string
	for _, p := range paths {
		if _, serr := os.Stat(p); serr == nil {
			exposed = append(exposed, p)
		}
	}
	reason := strings.TrimPrefix(err.Error(), sandbox.ErrNotIsolated.Error()+": ")
	if !unconfined {
		return nil, fail(ExitNotIsolated, "this machine cannot confine workers, so they could read %s and every file of this user (%s); nothing was run. "+
			"Set %s=1 to run them unconfined anyway (see docs/security.md, \"What the worker can reach\")",
			orNone(exposed), reason, EnvUnconfined)
	}
	fmt.Fprintf(stderr, "executor: warning: workers can read %s: this machine cannot confine them (%s), and %s=1 runs them unconfined (see docs/security.md, \"What the worker can reach\")\n",
		orNone(exposed), reason, EnvUnconfined)
	return nil, nil
}

func orNone(paths []string) string {
	if len(paths) == 0 {
		return "the credentials (none exist yet)"
	}
	return strings.Join(paths, ", ")
}

// notIsolated turns a run's ErrNotIsolated into ExitNotIsolated.
func notIsolated(err error) error {
	if errors.Is(err, sandbox.ErrNotIsolated) {
		return &exitError{code: ExitNotIsolated, err: err}
	}
	return err
}
