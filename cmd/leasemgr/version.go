package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/slotlease/slotlease/buildinfo"
)

// runVersion prints what this binary was built from.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("leasemgr version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON: version, semver, revision, time, modified, go_version")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("version takes no arguments, got %q", fs.Args())}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(buildinfo.Get().JSON())
	}
	_, err := fmt.Fprintln(stdout, "leasemgr", buildinfo.Get())
	return err
}
