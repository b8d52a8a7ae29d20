// Package cli is what leasemgr and executor share in their command lines:
// flag parsing with help on stdout (exit 0) and a short hint for a bad
// flag.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ParseFlags parses args with fs, whose name is "PROGRAM COMMAND". Asked
// for help (-h, --help) it writes usage (the command's usage, flags and
// environment) on stdout and returns flag.ErrHelp, for exit 0; a bad flag
// gets synopsis ("usage: PROGRAM COMMAND ...") and where to find more on
// fs's output (stderr), and its error is returned to be printed.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, usage func(io.Writer), synopsis string) error {
	errOut := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	fs.Usage = func() { usage(&buf) }
	err := fs.Parse(args)
	fs.SetOutput(errOut)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = buf.WriteTo(stdout)
	case err != nil:
		fmt.Fprintf(errOut, "%s\nRun \"%s -h\" for every flag.\n", synopsis, fs.Name())
	}
	return err
}

// Indent puts prefix before every line of s.
func Indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
