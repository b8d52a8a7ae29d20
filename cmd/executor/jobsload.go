package main

import (
	"fmt"
	"io"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

// selectJobs keeps the records in state (all for "") and at most limit
// of them (all for 0); records come most recently updated first.
func selectJobs(all []jobs.Record, state jobs.State, limit int) []jobs.Record {
	var out []jobs.Record
	for _, r := range all {
		if state == "" || r.State == state {
			out = append(out, r)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// printLoads prints, per pool with anything queued or running, the jobs
// queued by priority and tenant, those running by tenant, and the oldest
// ready job's wait.
func printLoads(w io.Writer, loads []jobs.PoolLoad) {
	tenant := func(t string) string {
		if t == "" {
			return "-"
		}
		return t
	}
	printed := false
	for _, l := range loads {
		if len(l.Queued) == 0 && len(l.Running) == 0 {
			continue
		}
		if !printed {
			fmt.Fprintln(w, "POOL\tSTATE\tPRIORITY\tTENANT\tJOBS\tOLDEST READY")
			printed = true
		}
		oldest := "-"
		if l.OldestReady != "" {
			oldest = fmt.Sprintf("%s (%s)", (time.Duration(l.OldestReadySeconds * float64(time.Second))).Round(time.Second), l.OldestReady)
		}
		for _, c := range l.Queued {
			fmt.Fprintf(w, "%s\tqueued\t%s\t%s\t%d\t%s\n", l.Pool, c.Priority, tenant(c.Tenant), c.Jobs, oldest)
			oldest = ""
		}
		for _, c := range l.Running {
			fmt.Fprintf(w, "%s\trunning\t-\t%s\t%d\t%s\n", l.Pool, tenant(c.Tenant), c.Jobs, oldest)
			oldest = ""
		}
	}
	if printed {
		fmt.Fprintln(w)
	}
}
