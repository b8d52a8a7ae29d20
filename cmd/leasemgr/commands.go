package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/cmd/internal/cli"
)

// action is what a command does once its flags are parsed.
type action func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// setup defines a command's flags (and their completions) on cmd and
// returns its action, which reads them.
type setup func(cmd *cobra.Command) action

// setups are the commands, by the name commandHelp gives them.
func setups() map[string]setup {
	return map[string]setup{
		"run": runSetup, "pools": poolsSetup, "watch": watchSetup, "resize": resizeSetup, "health": healthSetup,
		"nats-context": natsContextSetup, "layout": layoutSetup, "version": versionSetup,
	}
}

// program is leasemgr's command line for package cli: its texts, and its
// usage errors, exit code 2.
var program = cli.Program{
	Name:       "leasemgr",
	Usage:      usage,
	Help:       commandUsage,
	Synopsis:   synopsis,
	UsageError: func(err error) error { return usageError{err} },
}

// newRoot makes the command tree. leasemgr with no command serves, as
// leasemgr run does.
func newRoot() *cobra.Command {
	all := setups()
	root := program.Root(nil)
	root.RunE = runE(runSetup(root))
	root.PreRun = warnStrays
	for _, c := range commandHelp {
		cmd := program.Command(c.name, c.short)
		cmd.RunE = runE(all[c.name](cmd))
		if c.reads != 0 {
			cmd.PreRun = warnStrays
		}
		root.AddCommand(cmd)
	}
	return root
}

func runE(act action) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return act(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
}

// warnStrays reports variables that look like slotlease's but are not
// (config.Strays), at the start of every command that reads the
// configuration.
func warnStrays(cmd *cobra.Command, _ []string) {
	cli.WarnStrays(cmd.ErrOrStderr(), "leasemgr", os.Environ())
}
