package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/cmd/internal/cli"
	"github.com/slotlease/slotlease/config"
)

type commandDoc struct {
	name, short, synopsis, about string
	reads                        config.Reader // the variables it reads
}

// commandHelp is each command's synopsis, what it does and which
// variables it reads: the top-level usage and each command's -h are made
// from it.
var commandHelp = []commandDoc{
	{"run", "Serve this node's pools (the default command)", "[run]", `Serves this node's pools (standby if another manager leads the node), on
an embedded NATS server unless NATS_URL is set. The default command.`, config.ReadByManager},
	{"pools", "Print pools", "pools [--json] [--node N] [--all]", `Prints pools: capacity, in use, available, queued, policy, then how their
requests and leases ended, counted across restarts (granted, completed,
failed, rejected, dropped, cancelled; docs/protocol.md 2.5). --all: every
node, found by NATS micro service discovery.`, config.ReadByClients},
	{"watch", "Print lease events live", "watch [--node N|'*'] [--pool P] [--kind K] [--since 1h] [--json]", `Prints lease events live (--since replays the stored events first).`, config.ReadByClients},
	{"resize", "Change pools at runtime", "resize [--rate P=60/m|P=off]... [--burst P=N]... [--remove P]... [--force] [--reset] [--node N] [name=capacity]...",
		`Changes pools at runtime; the change is stored and applied at every start.`, config.ReadByClients},
	{"nats-context", "Write nats CLI contexts, one per role", "nats-context [--role R]... [--name slotlease] [--dir D]", `Writes contexts for the nats CLI that reach this node's NATS as slotlease's
clients do: one per role of the embedded server (slotlease-manager,
slotlease-executor, slotlease-reader), each with the role's credential and
inbox prefix; with NATS_CREDS, NATS_NKEY or NATS_USER set, one context
(slotlease) with those. Then: nats --context slotlease-reader micro ls leasemgr`, config.ReadByClients},
	{"layout", "Write a secure NATS cluster's configuration, credentials and environment", "layout --out DIR [--servers 3] [--hosts h0,h1,h2] [--executors a,b] [--creds-dir D] [--store-dir D] [--bind ADDR] [--client-port 4222] [--cluster-port 6222] [--monitor-port 8222] [--monitor-bind 127.0.0.1] [--cluster-name slotlease] [--executors-max-store BYTES] [--force]",
		`Writes the files of a NATS cluster for slotlease with the accounts, users,
imports and limits of docs/security.md: DIR/nats/nats-I.conf per server
(nats-server -c), an nkey seed per user in DIR/creds (manager, jobs-admin,
reader, sys, executor-NAME), and the environment of each program:
DIR/leasemgr.env (fast release on: DISCONNECT_EVENTS), DIR/executor-NAME.env
(DIR/executor.env: the first executor's) and DIR/reader.env.`, 0},
	{"health", "Ask this host's leasemgr whether it is alive or ready (exit 0 or 1)", "health [--ready] [--addr HOST:PORT]",
		`Asks the leasemgr at HTTP_ADDR (or --addr; a listener on every interface is
asked on loopback) for /healthz, or /readyz with --ready, prints the answer
and exits 0 on 200, 1 otherwise (not running, standing by, NATS down): the
container image's HEALTHCHECK, which has no curl.`, 0},
	{"version", "Print what leasemgr was built from", "version [--json]", `Prints the version and VCS revision leasemgr was built from (as its NATS
service info and slotlease_build_info on /metrics show them).`, 0},
}

// environment is the usage's list of the variables r reads.
func environment(r config.Reader) string {
	return "Configuration is read from the environment (docs/configuration.md):\n" + config.Usage(r)
}

// usage is the top-level usage text: every command, and every variable
// leasemgr reads.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: leasemgr [command] [flags]\n\n")
	for _, c := range commandHelp {
		fmt.Fprintf(&b, "  leasemgr %s\n%s\n", c.synopsis, cli.Indent(c.about, "      "))
	}
	b.WriteString(`  leasemgr completion bash|zsh|fish|powershell
      Prints a shell completion script of every command and flag, e.g.
      source <(leasemgr completion bash); "leasemgr completion bash -h"
      says how to load it for good.

Run "leasemgr COMMAND -h" for a command's flags. Flags may come before or
after the arguments. "leasemgr --version" is "leasemgr version".

`)
	b.WriteString(environment(config.ReadByManager | config.ReadByClients))
	fmt.Fprintf(&b, "(The executor also reads %s: executor help.)\n", strings.Join(executorOnly(), ", "))
	return b.String()
}

// executorOnly are the variables only the executor reads.
func executorOnly() []string {
	var out []string
	for _, v := range config.Vars {
		if v.Readers == config.ReadByExecutor {
			out = append(out, v.Name)
		}
	}
	return out
}

// help is cmd's entry of commandHelp, if it is one of leasemgr's commands
// (not cobra's completion).
func help(cmd *cobra.Command) (commandDoc, bool) {
	if cmd.Parent() != cmd.Root() {
		return commandDoc{}, false
	}
	for _, c := range commandHelp {
		if c.name == cmd.Name() {
			return c, true
		}
	}
	return commandDoc{}, false
}

// synopsis is cmd's usage line.
func synopsis(cmd *cobra.Command) string {
	if c, ok := help(cmd); ok {
		return "usage: leasemgr " + c.synopsis
	}
	return ""
}

// commandUsage writes cmd's usage to w: what -h prints.
func commandUsage(w io.Writer, cmd *cobra.Command) bool {
	c, ok := help(cmd)
	if !ok {
		return false
	}
	fmt.Fprintf(w, "usage: leasemgr %s\n\n%s\n", c.synopsis, c.about)
	fmt.Fprintf(w, "\nflags:\n%s", cli.Flags(cmd))
	if c.reads != 0 {
		fmt.Fprintln(w)
		fmt.Fprint(w, environment(c.reads))
	}
	return true
}
