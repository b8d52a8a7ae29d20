package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/slotlease/slotlease/buildinfo"
)

// versionCommand prints what this binary was built from.
func versionCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("executor version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON: version, semver, revision, time, modified, go_version")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("version takes no arguments, got %q", fs.Args()))
	}
	if *asJSON {
		return 0, json.NewEncoder(stdout).Encode(buildinfo.Get().JSON())
	}
	_, err := fmt.Fprintln(stdout, "executor", buildinfo.Get())
	return 0, err
}
