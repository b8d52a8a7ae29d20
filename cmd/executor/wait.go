package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/jobs"
)

// waitOptions are executor wait's flags.
type waitOptions struct {
	batch    string
	timeout  time.Duration
	failFast bool
	asJSON   bool
}

func waitSetup(cmd *cobra.Command) action {
	var o waitOptions
	fs := cmd.Flags()
	fs.StringVar(&o.batch, "batch", "", "wait for every job of this batch, follow-ups included")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: wait as long as it takes)")
	fs.BoolVar(&o.failFast, "fail-fast", false, "at the first dead job, cancel every job of the set that has not ended")
	fs.BoolVar(&o.asJSON, "json", false, "print the summary as JSON")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if (o.batch == "") == (len(args) == 0) {
			return usageErr(errors.New("usage: executor wait (--batch NAME | JOB_ID...) [--timeout D] [--fail-fast] [--json]"))
		}
		if o.timeout < 0 {
			return usageErr(fmt.Errorf("--timeout %v: must not be negative", o.timeout))
		}
		return waitCommand(ctx, o, args, stdout)
	}
}

// waitCommand waits for the jobs ids (or o.batch) and their follow-ups
// to end, and prints the summary.
func waitCommand(ctx context.Context, o waitOptions, ids []string, stdout io.Writer) (int, error) {
	_, nc, q, err := connectQueue(ctx, "executor wait", false)
	if errors.Is(err, jobs.ErrNoQueue) {
		return 1, errors.New("no job queue yet: no job to wait for")
	}
	if err != nil {
		return codeOf(err), err
	}
	defer nc.Close()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	sum, err := q.Wait(ctx, jobs.WaitFor{Batch: o.batch, IDs: ids, FailFast: o.failFast}, nil)
	switch {
	case errors.Is(err, jobs.ErrInvalidSpec):
		return usageErr(err)
	case errors.Is(err, jobs.ErrWaitTimeout):
		printSummary(stdout, sum, o.asJSON)
		return ExitTimeout, fmt.Errorf("%v: %d of %d job(s) have not ended", waitWhat(o.batch, ids), sum.Pending, sum.Jobs)
	case err != nil:
		return 1, err
	}
	printSummary(stdout, sum, o.asJSON)
	if !sum.OK() {
		ids := make([]string, 0, len(sum.Failed))
		for _, r := range sum.Failed {
			ids = append(ids, r.ID+" ("+string(r.State)+")")
		}
		return 1, fmt.Errorf("%v: %d of %d job(s) did not succeed: %s", waitWhat(o.batch, ids), len(sum.Failed), sum.Jobs, strings.Join(ids, ", "))
	}
	return 0, nil
}

func waitWhat(batch string, ids []string) string {
	if batch != "" {
		return "batch " + batch
	}
	return fmt.Sprintf("%d job(s) and their follow-ups", len(ids))
}

// printSummary prints where the set stands: counts, the slowest jobs, and
// every job that did not succeed with its error.
func printSummary(w io.Writer, s *jobs.Summary, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
		return
	}
	what := "jobs"
	if s.Batch != "" {
		what = "batch " + s.Batch
	}
	fmt.Fprintf(w, "%s: %d job(s): %d succeeded, %d dead, %d cancelled", what, s.Jobs, s.Succeeded, s.Dead, s.Cancelled)
	if s.Pending > 0 {
		fmt.Fprintf(w, ", %d not ended", s.Pending)
	}
	fmt.Fprintf(w, "; %d retried; %v from the first submit to the last change\n", s.Retried, s.Wall.Round(time.Millisecond))
	if len(s.Slowest) > 0 {
		parts := make([]string, 0, len(s.Slowest))
		for _, r := range s.Slowest {
			parts = append(parts, fmt.Sprintf("%s %v", r.ID, r.Duration()))
		}
		fmt.Fprintf(w, "slowest: %s\n", strings.Join(parts, ", "))
	}
	for _, r := range s.Failed {
		fmt.Fprintf(w, "%s %s after %d attempt(s): %s\n", string(r.State), r.ID, r.Attempts, r.Error)
	}
	for _, id := range s.Refused {
		fmt.Fprintf(w, "refused %s: its record claimed an outcome no lease manager signed (a forgery, or a write by hand); not counted as ended\n", id)
	}
}
