package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/jobs"
)

func cancelSetup(cmd *cobra.Command) action {
	batch := cmd.Flags().String("batch", "", "cancel every job of this batch that has not ended")
	reason := cmd.Flags().String("reason", "executor cancel", "why, kept in each job's record and event")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if (*batch == "") == (len(args) == 0) {
			return usageErr(errors.New("usage: executor cancel [--reason R] JOB_ID... | --batch NAME (one or the other)"))
		}
		if len(*reason) > 200 {
			return usageErr(fmt.Errorf("--reason: at most 200 bytes, got %d", len(*reason)))
		}
		return cancelCommand(ctx, args, *batch, *reason, stdout, stderr)
	}
}

// cancelCommand cancels the jobs ids, or those of batch that have not
// ended, and prints what became of each.
func cancelCommand(ctx context.Context, ids []string, batch, reason string, stdout, stderr io.Writer) (int, error) {
	_, nc, q, err := connectQueue(ctx, "executor cancel", false)
	if errors.Is(err, jobs.ErrNoQueue) {
		return 1, errors.New("no job queue yet: nothing to cancel")
	}
	if err != nil {
		return codeOf(err), err
	}
	defer nc.Close()
	if batch != "" {
		recs, err := q.Batch(ctx, batch)
		if err != nil {
			return 1, err
		}
		for _, r := range recs {
			if !r.State.Final() {
				ids = append(ids, r.ID)
			}
		}
		fmt.Fprintf(stderr, "executor: batch %s: %d job(s), %d not ended\n", batch, len(recs), len(ids))
	}
	code := 0
	for _, id := range ids {
		rec, err := q.Cancel(ctx, id, reason)
		switch {
		case errors.Is(err, jobs.ErrFinal):
			fmt.Fprintf(stdout, "%s\talready %s\n", id, rec.State)
		case errors.Is(err, jobs.ErrNotFound):
			fmt.Fprintf(stdout, "%s\tnot found\n", id)
			code = 1
		case err != nil:
			fmt.Fprintf(stdout, "%s\terror: %v\n", id, err)
			code = 1
		case rec.CancelRequested:
			fmt.Fprintf(stdout, "%s\tstopping (running on node %s)\n", id, rec.Node)
		default:
			fmt.Fprintf(stdout, "%s\t%s\n", id, rec.State)
		}
	}
	return code, nil
}
