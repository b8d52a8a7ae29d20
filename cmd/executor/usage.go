package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/cmd/internal/cli"
	"github.com/slotlease/slotlease/config"
)

// commandHelp is each command's synopsis and what it does, in the order
// the usage lists them: the top-level usage and each command's -h are
// made from it.
var commandHelp = []struct {
	name, short, synopsis, about string
	reads                        []string // the executor's own variables it reads (config.ReadByExecutor)
}{
	{"run", "Run a command under a lease", `run --pool P[=K]... [--slots K] [--wait D] [--priority high|normal|low|N] [--tenant T]
    [--key K] [--no-wait] [--units N] [--group G [--cancel-in-progress|--cancel-pending]] [--timeout D]
    [--memory SIZE] [--cpu D] [--max-procs N] [--max-files N]
    [--keep-workdir] [--dir D] [--writable PATH]... [--isolate] [--no-network]
    [--kill-grace D] [--env K=V]... [--node N] -- CMD ARGS...`,
		`Acquires K slots of pool P on this node's lease manager (of every pool
given, node or cluster pools, all or none), runs CMD confined while the
leases are held, releases them, and exits with CMD's exit code.
Exit codes of its own: 2 usage or configuration; 71 the worker could not
be confined (nothing was run); 75 no lease (refused, or dropped from a
full queue: the message names the code); 76 the lease was lost while
CMD ran (it was stopped); 77 superseded: a newer run of its --group
replaced it while it waited, or stopped it (SIGTERM, --kill-grace,
SIGKILL) with --cancel-in-progress; 124 --timeout passed (it was stopped).
--units N reserves an estimate of N units from pools with a budget; CMD
may write what it used, a decimal, to the file $LEASE_USAGE_FILE names,
which is settled at release (else the estimate, and stderr says why).`, []string{config.EnvExecutorUnconfined}},
	{"submit", "Store jobs in the durable job queue", `submit --pool P [--slots K] [--also-pool P[=K]]... [--priority high|normal|low]
    [--max-attempts N] [--timeout D] [--env K=V]... [--id ID] [--batch NAME] [--tenant T] [--key K]
    [--units N] [--group G [--cancel-in-progress|--cancel-pending]] [flags] -- CMD ARGS...
submit [--batch NAME] [--no-pool-check] --spec FILE|-  |  --specs FILE|-   (JSON Lines: many jobs)`,
		`Stores job(s) in the durable job queue and prints their ids. --batch
NAME puts them in a batch. Inside a job, submit goes through the job's
executor into its batch, with no NATS address or credential; it is the
only command that works there.`, nil},
	{"serve", "Run queued jobs of this node's pools", `serve [--pools P1,P2] [--concurrency N] [--grace D] [--metrics-addr HOST:PORT] [flags]`,
		`Takes jobs of this node's pools, each under a lease of this node, until
SIGTERM; running jobs get --grace to finish, then are given back.
Exits 71 if this machine cannot confine workers.`, []string{config.EnvExecutorUnconfined, config.EnvExecutorMetricsAddr}},
	{"status", "Show a job's state and result", `status [--json] JOB_ID`, `Shows a job's state and latest result.`, nil},
	{"jobs", "List queue depths and recent jobs", `jobs [--limit N] [--state S] [--json]`, `Lists queue depth per pool and priority, and recent jobs.`, nil},
	{"wait", "Wait for jobs or a batch to end", `wait (--batch NAME | JOB_ID...) [--timeout D] [--fail-fast] [--json]`,
		`Waits until every job of the batch (or these jobs), follow-ups
included, has ended; prints a summary; exits 0 only if all succeeded,
1 if some did not, 124 on --timeout.`, nil},
	{"cancel", "Cancel jobs", `cancel [--reason R] (JOB_ID... | --batch NAME)`,
		`Cancels jobs: a waiting one never runs; a running one is stopped and
its slots released. Its state becomes cancelled.`, nil},
	{"purge", "Cancel every waiting job of a pool", `purge --pool P --confirm [--reason R]`,
		`Cancels every waiting job of pool P (running ones finish) and prints
how many.`, nil},
	{"version", "Print what executor was built from", `version [--json]`, `Prints the version and VCS revision executor was built from.`, nil},
}

// environment is the usage's list of the variables a command reads: every
// client's, and the executor's own of also.
func environment(also ...string) string {
	return "Configuration is read from the environment (docs/configuration.md):\n" +
		config.Usage(config.ReadByClients, also...)
}

// usage is the top-level usage text.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: executor COMMAND [flags] [ARGS]\n\n")
	for _, c := range commandHelp {
		for line := range strings.SplitSeq(c.synopsis, "\n") {
			if strings.HasPrefix(line, " ") {
				line = "    " + line // a continuation
			}
			fmt.Fprintf(&b, "  %s\n", line)
		}
		fmt.Fprintf(&b, "%s\n", cli.Indent(c.about, "      "))
	}
	b.WriteString(`  completion bash|zsh|fish|powershell
      Prints a shell completion script of every command and flag, e.g.
      source <(executor completion bash); "executor completion bash -h"
      says how to load it for good.

Run "executor COMMAND -h" for a command's flags; docs/jobs.md describes jobs.
Flags may come before or after the arguments; everything after "--" is an
argument (run's and submit's command, with its own flags). "executor
--version" is "executor version".
Exit codes of commands but run: 0 ok; 1 error (e.g. unknown job); 2 usage
or invalid job; 69 NATS or the lease manager unreachable; 71 (serve) this
machine cannot confine workers.

`)
	b.WriteString(environment(config.VarNames(config.ReadByExecutor)...))
	return b.String()
}

// commandOf is cmd's entry of commandHelp, if it is one of executor's
// commands (not cobra's completion).
func commandOf(cmd *cobra.Command) (int, bool) {
	if cmd.Parent() != cmd.Root() {
		return 0, false
	}
	for i, c := range commandHelp {
		if c.name == cmd.Name() {
			return i, true
		}
	}
	return 0, false
}

// synopsis is the usage line(s) of cmd.
func synopsis(cmd *cobra.Command) string {
	i, ok := commandOf(cmd)
	if !ok {
		return ""
	}
	c := commandHelp[i]
	return "usage: executor " + strings.ReplaceAll(c.synopsis, "\n"+c.name, "\n       executor "+c.name)
}

// commandUsage writes cmd's usage to w: what -h prints.
func commandUsage(w io.Writer, cmd *cobra.Command) bool {
	i, ok := commandOf(cmd)
	if !ok {
		return false
	}
	c := commandHelp[i]
	fmt.Fprintf(w, "%s\n\n%s\n", synopsis(cmd), c.about)
	fmt.Fprintf(w, "\nflags:\n%s", cli.Flags(cmd))
	if c.name != "version" { // it reads no variable
		fmt.Fprintln(w)
		fmt.Fprint(w, environment(c.reads...))
	}
	return true
}
