package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/jobs"
)

func statusSetup(cmd *cobra.Command) action {
	asJSON := cmd.Flags().Bool("json", false, "print the record as JSON")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if len(args) != 1 {
			return usageErr(errors.New("usage: executor status [--json] JOB_ID"))
		}
		return statusCommand(ctx, args[0], *asJSON, stdout)
	}
}

// statusCommand prints job id's record.
func statusCommand(ctx context.Context, id string, asJSON bool, stdout io.Writer) (int, error) {
	cfg, nc, q, err := connectQueue(ctx, "executor status", false)
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		return codeOf(err), err
	}
	defer nc.Close()
	var rec *jobs.Record
	if q != nil {
		// An outcome counts only if a broker signed it (jobs/sign.go).
		rec, err = q.GetChecked(ctx, id)
	}
	if errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobs.ErrNoQueue) {
		return 1, fmt.Errorf("job %q not found: no such id under prefix %q, or its record expired (results are kept %v)", id, cfg.SubjectPrefix, jobs.DefaultResultTTL)
	}
	if err != nil {
		return 1, err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(rec)
	}
	printRecord(stdout, rec)
	return 0, nil
}

func printRecord(w io.Writer, r *jobs.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339Nano)
	}
	row("job", r.ID)
	row("state", stateText(r))
	row("pool", fmt.Sprintf("%s (%d slot(s)), priority %s", r.Spec.Pool, r.Spec.Slots, r.Spec.Priority))
	row("command", quoteArgs(r.Spec.Command))
	row("attempts", fmt.Sprintf("%d of %d", r.Attempts, r.Spec.MaxAttempts))
	if r.Returned > 0 {
		row("given back", fmt.Sprintf("%d time(s), not counted as attempts", r.Returned))
	}
	if r.Node != "" {
		row("node", fmt.Sprintf("%s (lease %s, token %d)", r.Node, r.LeaseID, r.LeaseToken))
	}
	if r.ExitCode != nil {
		row("exit code", strconv.Itoa(*r.ExitCode))
	}
	row("signal", r.Signal)
	if r.ExitCode != nil {
		row("duration", r.Duration().String())
	}
	row("stopped by", r.StoppedBy)
	row("submitted", ts(r.SubmittedAt))
	row("started", ts(r.StartedAt))
	row("finished", ts(r.FinishedAt))
	row("next attempt", ts(r.NextAttemptAt))
	row("error", r.Error)
	for _, n := range r.Notes {
		row("note", n)
	}
	_ = tw.Flush()
	for _, out := range []struct{ name, text string }{{"stdout", r.StdoutTail}, {"stderr", r.StderrTail}} {
		if out.text != "" {
			fmt.Fprintf(w, "--- %s (last %d bytes at most) ---\n%s", out.name, jobs.DefaultOutputBytes, out.text)
			if !strings.HasSuffix(out.text, "\n") {
				fmt.Fprintln(w)
			}
		}
	}
}

// stateText is a record's state as shown, with a refused outcome said so.
func stateText(r *jobs.Record) string {
	if r.Unsigned {
		return string(r.State) + " REFUSED: no lease manager signed this outcome (a forgery, or a write by hand); the job has not ended"
	}
	return string(r.State)
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]{}~#!") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
