package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/slotlease/slotlease/cmd/internal/cli"
	"github.com/slotlease/slotlease/config"
)

type commandDoc struct {
	name, synopsis, about string
	reads                 config.Reader // the variables it reads
}

// commandHelp is each command's synopsis, what it does and which
// variables it reads: the top-level usage and each command's -h are made
// from it.
var commandHelp = []commandDoc{
	{"run", "[run]", `Serves this node's pools (standby if another manager leads the node), on
an embedded NATS server unless NATS_URL is set. The default command.`, config.ReadByManager},
	{"pools", "pools [--json] [--node N] [--all]", `Prints pools: capacity, in use, available, queued, policy (--all: every
node, found by NATS micro service discovery).`, config.ReadByClients},
	{"watch", "watch [--node N|'*'] [--pool P] [--kind K] [--since 1h] [--json]", `Prints lease events live (--since replays the stored events first).`, config.ReadByClients},
	{"resize", "resize [--rate P=60/m|P=off]... [--burst P=N]... [--remove P]... [--force] [--reset] [name=capacity]...",
		`Changes pools at runtime; the change is stored and applied at every start.`, config.ReadByClients},
	{"nats-context", "nats-context [--role R]... [--name slotlease] [--dir D]", `Writes contexts for the nats CLI that reach this node's NATS as slotlease's
clients do: one per role of the embedded server (slotlease-manager,
slotlease-executor, slotlease-reader), each with the role's credential and
inbox prefix; with NATS_CREDS, NATS_NKEY or NATS_USER set, one context
(slotlease) with those. Then: nats --context slotlease-reader micro ls leasemgr`, config.ReadByClients},
	{"version", "version [--json]", `Prints the version and VCS revision leasemgr was built from (as its NATS
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
	b.WriteString("usage: leasemgr [command]\n\n")
	for _, c := range commandHelp {
		fmt.Fprintf(&b, "  leasemgr %s\n%s\n", c.synopsis, cli.Indent(c.about, "      "))
	}
	b.WriteString("\nRun \"leasemgr COMMAND -h\" for a command's flags.\n\n")
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

// parseFlags is cli.ParseFlags with this program's usage texts.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	return cli.ParseFlags(fs, args, stdout, func(w io.Writer) { commandUsage(w, fs) }, "usage: leasemgr "+help(fs).synopsis)
}

// help is fs's command's entry of commandHelp.
func help(fs *flag.FlagSet) commandDoc {
	name := strings.TrimPrefix(fs.Name(), "leasemgr ")
	for _, c := range commandHelp {
		if c.name == name {
			return c
		}
	}
	return commandDoc{name: name, synopsis: name, reads: config.ReadByClients}
}

// commandUsage writes fs's command's usage to w.
func commandUsage(w io.Writer, fs *flag.FlagSet) {
	c := help(fs)
	fmt.Fprintf(w, "usage: leasemgr %s\n\n%s\n", c.synopsis, c.about)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	if c.reads != 0 {
		fmt.Fprintln(w)
		fmt.Fprint(w, environment(c.reads))
	}
}
