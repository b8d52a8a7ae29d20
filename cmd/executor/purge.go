package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/jobs"
)

func purgeSetup(cmd *cobra.Command) action {
	fs := cmd.Flags()
	pool := fs.String("pool", "", "the pool whose waiting jobs to remove")
	confirm := fs.Bool("confirm", false, "really remove them (required)")
	reason := fs.String("reason", "executor purge", "why, kept in each job's record and event")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if *pool == "" || len(args) > 0 {
			return usageErr(errors.New("usage: executor purge --pool P --confirm [--reason R]"))
		}
		if !*confirm {
			return usageErr(fmt.Errorf("purge removes every waiting job of pool %s (running ones finish): add --confirm", *pool))
		}
		if len(*reason) > 200 {
			return usageErr(fmt.Errorf("--reason: at most 200 bytes, got %d", len(*reason)))
		}
		return purgeCommand(ctx, *pool, *reason, stdout, stderr)
	}
}

// purgeCommand cancels every waiting job of pool.
func purgeCommand(ctx context.Context, pool, reason string, stdout, stderr io.Writer) (int, error) {
	_, nc, q, err := connectQueue(ctx, "executor purge", false)
	if errors.Is(err, jobs.ErrNoQueue) {
		fmt.Fprintln(stdout, 0)
		return 0, nil
	}
	if err != nil {
		return codeOf(err), err
	}
	defer nc.Close()
	n, err := q.Purge(ctx, pool, reason)
	if errors.Is(err, jobs.ErrInvalidSpec) {
		return usageErr(err)
	}
	fmt.Fprintln(stdout, n)
	fmt.Fprintf(stderr, "executor: purged %d waiting job(s) of pool %s\n", n, pool)
	return 0, err
}
