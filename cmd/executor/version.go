package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/buildinfo"
)

// versionSetup: executor version [--json] prints what this binary was
// built from; `executor --version` prints the same line (cli.Program.Root).
func versionSetup(cmd *cobra.Command) action {
	asJSON := cmd.Flags().Bool("json", false, "print JSON: version, semver, revision, time, modified, go_version")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(_ context.Context, args []string, stdout, _ io.Writer) (int, error) {
		if len(args) > 0 {
			return usageErr(fmt.Errorf("version takes no arguments, got %q", args))
		}
		if *asJSON {
			return 0, json.NewEncoder(stdout).Encode(buildinfo.Get().JSON())
		}
		_, err := fmt.Fprintln(stdout, "executor", buildinfo.Get())
		return 0, err
	}
}
