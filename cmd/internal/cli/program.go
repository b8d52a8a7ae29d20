package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/buildinfo"
)

// Program is one binary's command line: its texts and how it marks a
// usage error. The programs keep their texts (their usage tables); this
// package makes cobra use them.
type Program struct {
	Name string // "executor"
	// Usage is the top-level help: every command and every variable read.
	Usage func() string
	// Help writes cmd's -h (usage line, what it does, Flags(cmd), the
	// variables it reads) and reports whether cmd is the program's own;
	// cobra's commands (completion) keep cobra's help.
	Help func(w io.Writer, cmd *cobra.Command) bool
	// Synopsis is cmd's usage line(s), "usage: PROGRAM COMMAND ...", shown
	// with a bad flag; "" for cobra's commands.
	Synopsis func(cmd *cobra.Command) string
	// UsageError marks err as a usage error: the program's exit code 2.
	UsageError func(err error) error
}

// Root returns the program's root command. run is what the program does
// with no command (leasemgr serves; executor says a command is missing);
// a word that is not a command is a usage error that suggests the
// nearest command.
func (p Program) Root(run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	root := &cobra.Command{
		Use:     p.Name,
		Version: buildinfo.Get().String(),
		Args:    p.noCommand,
		RunE:    run,
		// The programs print their errors themselves, with their prefix,
		// and never the usage after an error but a bad flag's line.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	// --version prints what `PROGRAM version` prints. Defined here so that
	// cobra does not also take -v, which stays free.
	root.Flags().Bool("version", false, "print the version and VCS revision this binary was built from (as the version command)")
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	p.helpFlag(root)
	root.SetHelpFunc(p.help)
	root.SetUsageFunc(p.usage)
	root.SetFlagErrorFunc(p.flagError)
	return root
}

// Command returns a command of the program: use is its name, short its
// one-line description for the completion scripts. Its arguments are
// its own to check (each command says what it takes).
func (p Program) Command(use, short string) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs}
	p.helpFlag(cmd)
	return cmd
}

func (p Program) helpFlag(cmd *cobra.Command) {
	cmd.Flags().BoolP("help", "h", false, "print this help")
}

// Flags is cmd's flags for its help, one a line.
func Flags(cmd *cobra.Command) string { return cmd.LocalFlags().FlagUsages() }

// Execute runs root on args (without the program's name) and returns the
// error of the command that ran, for the program to print and turn into
// its exit code. Asked for help, a command prints it and returns nil.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) error {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	_, err := root.ExecuteContextC(ctx)
	return err
}

// defaultHelp and defaultUsage are cobra's, for its own commands.
var (
	defaultHelp  = (&cobra.Command{}).HelpFunc()
	defaultUsage = (&cobra.Command{}).UsageFunc()
)

// usage is the root's usage (`PROGRAM help NO-SUCH-TOPIC` prints it);
// cobra's commands, which inherit it, keep cobra's.
func (p Program) usage(cmd *cobra.Command) error {
	if cmd != cmd.Root() {
		return defaultUsage(cmd)
	}
	_, err := fmt.Fprint(cmd.OutOrStderr(), p.Usage())
	return err
}

func (p Program) help(cmd *cobra.Command, args []string) {
	if cmd == cmd.Root() {
		fmt.Fprint(cmd.OutOrStdout(), p.Usage())
		return
	}
	if !p.Help(cmd.OutOrStdout(), cmd) {
		defaultHelp(cmd, args)
	}
}

// flagError prints a bad flag's hint: the command's usage line and where
// to find every flag. The error itself is the program's to print.
func (p Program) flagError(cmd *cobra.Command, err error) error {
	synopsis := p.Synopsis(cmd)
	switch {
	case cmd == cmd.Root():
		synopsis, _, _ = strings.Cut(p.Usage(), "\n") // "usage: PROGRAM COMMAND ..."
	case synopsis == "":
		synopsis = "usage: " + cmd.UseLine()
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s\nRun \"%s -h\" for every flag.\n", synopsis, cmd.CommandPath())
	if len(cmd.Flags().Args()) > 0 {
		// An argument came before the bad flag: most likely a command's
		// own flag (executor run --pool p sh -c ...), which flags anywhere
		// on the line take for the program's.
		fmt.Fprintf(cmd.ErrOrStderr(), "Flags after arguments are %s's too: put \"--\" before arguments that begin with \"-\" (a command and its flags).\n", p.Name)
	}
	return p.UsageError(err)
}

// noCommand refuses a first argument that names no command, printing the
// usage on stderr, and suggests the command nearest to it.
func (p Program) noCommand(root *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	fmt.Fprint(root.ErrOrStderr(), p.Usage())
	err := fmt.Errorf("unknown command %q", args[0])
	if s := root.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("%w (did you mean %s?)", err, strings.Join(s, " or "))
	}
	return p.UsageError(err)
}
