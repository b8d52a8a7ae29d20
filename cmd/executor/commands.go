package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/cmd/internal/cli"
	"github.com/slotlease/slotlease/jobs"
)

// action is what a command does once its flags are parsed: its exit code
// (executor's own, or the command's it ran) and its error.
type action func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error)

// setup defines a command's flags (and their completions) on cmd and
// returns its action, which reads them.
type setup func(cmd *cobra.Command) action

// setups are the commands, by the name commandHelp gives them.
func setups() map[string]setup {
	return map[string]setup{
		"run": runSetup, "submit": submitSetup, "serve": serveSetup, "status": statusSetup, "jobs": jobsSetup,
		"wait": waitSetup, "cancel": cancelSetup, "purge": purgeSetup, "version": versionSetup,
	}
}

// program is executor's command line for package cli: its texts, and its
// usage errors, exit code 2.
var program = cli.Program{
	Name:       "executor",
	Usage:      usage,
	Help:       commandUsage,
	Synopsis:   synopsis,
	UsageError: func(err error) error { return &exitError{code: ExitUsage, err: err} },
}

// newRoot makes the command tree; the exit code of the command that ran
// goes to code.
func newRoot(code *int) *cobra.Command {
	root := program.Root(func(cmd *cobra.Command, _ []string) error {
		fmt.Fprint(cmd.ErrOrStderr(), usage())
		return &exitError{code: ExitUsage, err: errors.New("no command given")}
	})
	all := setups()
	for _, c := range commandHelp {
		cmd := program.Command(c.name, c.short)
		act := all[c.name](cmd)
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			var err error
			*code, err = act(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return err
		}
		if c.name != "version" { // it reads no variable
			cmd.PreRun = warnStrays
		}
		root.AddCommand(cmd)
	}
	return root
}

// warnStrays reports variables that look like slotlease's but are not
// (config.Strays), at the start of every command that reads the
// configuration. Not inside a job: there submit reads no configuration
// (it goes through the job's executor), and the job's own variables are
// its business.
func warnStrays(cmd *cobra.Command, _ []string) {
	if os.Getenv(jobs.SocketEnv) == "" {
		cli.WarnStrays(cmd.ErrOrStderr(), "executor", os.Environ())
	}
}

// words completes a flag's value from a fixed list.
func words(cmd *cobra.Command, flag string, list ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(list, cobra.ShellCompDirectiveNoFileComp))
}
