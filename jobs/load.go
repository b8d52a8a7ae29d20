package jobs

import (
	"cmp"
	"slices"
	"time"
)

// PoolLoad is one pool's share of the queue as the job records tell it:
// what waits, by priority and tenant; how long the oldest ready job has
// waited; what runs, by tenant. `executor jobs` prints it.
type PoolLoad struct {
	Pool string `json:"pool"`
	// Queued counts jobs waiting for a run (queued, or failed and waiting
	// for their retry), by priority (high first) and tenant.
	Queued []TenantCount `json:"queued"`
	// Running counts running jobs by tenant.
	Running []TenantCount `json:"running"`
	// OldestReady is the job that has been ready to run longest (queued
	// since it was submitted, or failed with its retry due since
	// next_attempt_at), and OldestReadySeconds how long; 0 and "" when
	// no job is ready.
	OldestReady        string  `json:"oldest_ready,omitempty"`
	OldestReadySeconds float64 `json:"oldest_ready_seconds"`
}

// TenantCount is a number of jobs of one tenant ("" for none), and of
// one priority where it is given.
type TenantCount struct {
	Priority Priority `json:"priority,omitempty"`
	Tenant   string   `json:"tenant"`
	Jobs     int      `json:"jobs"`
}

// Loads sums records per pool, sorted by pool.
func Loads(recs []Record, now time.Time) []PoolLoad {
	type key struct {
		pool, tenant string
		p            Priority
	}
	queued, running := map[key]int{}, map[key]int{}
	loads := map[string]*PoolLoad{}
	var oldest = map[string]time.Time{}
	for _, r := range recs {
		pool := r.Spec.Pool
		l := loads[pool]
		if l == nil {
			l = &PoolLoad{Pool: pool, Queued: []TenantCount{}, Running: []TenantCount{}}
			loads[pool] = l
		}
		var readySince time.Time
		switch r.State {
		case StateQueued:
			queued[key{pool, r.Spec.Tenant, r.Spec.Priority}]++
			readySince = r.SubmittedAt
		case StateFailed:
			queued[key{pool, r.Spec.Tenant, r.Spec.Priority}]++
			if !r.NextAttemptAt.After(now) {
				readySince = r.NextAttemptAt
			}
		case StateRunning:
			running[key{pool: pool, tenant: r.Spec.Tenant}]++
		}
		if !readySince.IsZero() && (oldest[pool].IsZero() || readySince.Before(oldest[pool])) {
			oldest[pool], l.OldestReady = readySince, r.ID
			l.OldestReadySeconds = max(0, now.Sub(readySince).Seconds())
		}
	}
	for k, n := range queued {
		loads[k.pool].Queued = append(loads[k.pool].Queued, TenantCount{Priority: k.p, Tenant: k.tenant, Jobs: n})
	}
	for k, n := range running {
		loads[k.pool].Running = append(loads[k.pool].Running, TenantCount{Tenant: k.tenant, Jobs: n})
	}
	out := make([]PoolLoad, 0, len(loads))
	for _, l := range loads {
		slices.SortFunc(l.Queued, func(a, b TenantCount) int {
			return cmp.Or(cmp.Compare(b.Priority.rank(), a.Priority.rank()), cmp.Compare(a.Tenant, b.Tenant))
		})
		slices.SortFunc(l.Running, func(a, b TenantCount) int { return cmp.Compare(a.Tenant, b.Tenant) })
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b PoolLoad) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}
