package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/jobs"
)

// jobStates are the states executor jobs --state takes.
var jobStates = []jobs.State{jobs.StateQueued, jobs.StateRunning, jobs.StateFailed, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled}

func jobsSetup(cmd *cobra.Command) action {
	fs := cmd.Flags()
	limit := fs.Int("limit", 20, "show at most this many recent jobs (0: all)")
	state := fs.String("state", "", "show only jobs in this state: queued, running, failed, succeeded, dead or cancelled")
	asJSON := fs.Bool("json", false, "print JSON: {\"queues\": [...], \"pools\": [...], \"scheduler\": [...], \"jobs\": [...]}")
	states := make([]string, len(jobStates))
	for i, s := range jobStates {
		states[i] = string(s)
	}
	words(cmd, "state", states...)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if len(args) > 0 {
			return usageErr(fmt.Errorf("jobs takes no arguments, got %q", args))
		}
		if *state != "" && !slices.Contains(jobStates, jobs.State(*state)) {
			return usageErr(fmt.Errorf("--state %q: must be queued, running, failed, succeeded, dead or cancelled", *state))
		}
		return jobsCommand(ctx, jobs.State(*state), *limit, *asJSON, stdout)
	}
}

// jobsCommand prints the queues' depths, the pools' loads and the recent
// jobs in state (any if "").
func jobsCommand(ctx context.Context, state jobs.State, limit int, asJSON bool, stdout io.Writer) (int, error) {
	cfg, nc, q, err := connectQueue(ctx, "executor jobs", false)
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		return codeOf(err), err
	}
	defer nc.Close()
	var out struct {
		Queues []jobs.Depth    `json:"queues"`
		Pools  []jobs.PoolLoad `json:"pools"`
		// Scheduler: the fair pools among the jobs' (jobssched.go).
		Scheduler []poolScheduler `json:"scheduler"`
		Jobs      []jobs.Record   `json:"jobs"`
	}
	if q != nil {
		if out.Queues, err = q.Depths(ctx); err != nil {
			return 1, err
		}
		all, err := q.ListChecked(ctx, 0, "")
		if err != nil {
			return 1, err
		}
		out.Pools = jobs.Loads(all, time.Now())
		out.Jobs = selectJobs(all, state, limit)
	}
	out.Scheduler = schedulers(ctx, nc, cfg.SubjectPrefix, cfg.NodeID, jobPools(out.Queues, out.Pools))
	if asJSON {
		if out.Queues == nil {
			out.Queues = []jobs.Depth{}
		}
		if out.Pools == nil {
			out.Pools = []jobs.PoolLoad{}
		}
		if out.Jobs == nil {
			out.Jobs = []jobs.Record{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tPRIORITY\tSTORED\tWAITING\tIN-FLIGHT")
	for _, d := range out.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", d.Pool, d.Priority, d.Stored, d.Waiting, d.InFlight)
	}
	fmt.Fprintln(tw)
	printLoads(tw, out.Pools)
	printSchedulers(tw, out.Scheduler)
	fmt.Fprintln(tw, "JOB\tSTATE\tPOOL\tPRIORITY\tATTEMPTS\tNODE\tEXIT\tDURATION\tUPDATED")
	for _, r := range out.Jobs {
		exit, dur := "-", "-"
		if r.ExitCode != nil {
			exit, dur = strconv.Itoa(*r.ExitCode), r.Duration().String()
		}
		node := r.Node
		if node == "" {
			node = "-"
		}
		state := string(r.State)
		if r.Unsigned {
			state += " (refused: unsigned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", r.ID, state, r.Spec.Pool, r.Spec.Priority,
			r.Attempts, r.Spec.MaxAttempts, node, exit, dur, r.UpdatedAt.Local().Format(time.DateTime))
	}
	return 0, tw.Flush()
}
