package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

func jobsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("executor jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limit := fs.Int("limit", 20, "show at most this many recent jobs (0: all)")
	state := fs.String("state", "", "show only jobs in this state: queued, running, failed, succeeded, dead or cancelled")
	asJSON := fs.Bool("json", false, "print JSON: {\"queues\": [...], \"jobs\": [...]}")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageErr(fmt.Errorf("jobs takes no arguments, got %q", fs.Args()))
	}
	switch jobs.State(*state) {
	case "", jobs.StateQueued, jobs.StateRunning, jobs.StateFailed, jobs.StateSucceeded, jobs.StateDead, jobs.StateCancelled:
	default:
		return usageErr(fmt.Errorf("--state %q: must be queued, running, failed, succeeded, dead or cancelled", *state))
	}
	_, nc, q, err := connectQueue(ctx, "executor jobs", false)
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		return codeOf(err), err
	}
	defer nc.Close()
	var out struct {
		Queues []jobs.Depth    `json:"queues"`
		Pools  []jobs.PoolLoad `json:"pools"`
		Jobs   []jobs.Record   `json:"jobs"`
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
		out.Jobs = selectJobs(all, jobs.State(*state), *limit)
	}
	if *asJSON {
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
