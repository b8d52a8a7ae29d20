// Package jobmetrics observes the durable job queue per pool and tenant.
// On /metrics (the Prometheus exporter's names; OTLP carries the names in
// the first column):
//
//	jobs.queued        jobs_queued{node,pool,priority,tenant}  gauge, jobs waiting for a run (queued, or
//	                                                           failed and waiting for their retry)
//	jobs.running       jobs_running{node,pool,tenant}          gauge, jobs running
//	jobs.oldest_ready  jobs_oldest_ready_seconds{node,pool}    gauge, how long the job ready longest has waited
//
// node is the reporting manager's node, as on the lease_* series. The job
// queue is the whole cluster's: every node reports the same figures for
// the pools it has, so aggregate across nodes with max by (pool), not sum.
//
// The figures are jobs.Loads over every job record, read at collection
// time at most once per MinRefresh (a collection in between shows the
// last reading; a failed reading keeps it). Tenant labels are bounded: per
// pool the MaxTenants tenants with the most jobs (queued and running) keep
// their name, the rest are summed under OtherTenant; tenant "" is the
// jobs without one. Only the pools of the pools function (the node's) are
// shown, each with its series from the start, at 0: jobs_queued{tenant=""}
// for each priority, jobs_running{tenant=""} and jobs_oldest_ready_seconds.
package jobmetrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slotlease/slotlease/jobs"
)

// Bounds of the metrics.
const (
	MaxTenants  = 16
	OtherTenant = "other"
	MinRefresh  = 5 * time.Second
	readTimeout = 3 * time.Second
)

// Source reads the queue's figures (jobs.Loads of every record).
type Source func(ctx context.Context) ([]jobs.PoolLoad, error)

// Metrics is the registered gauges; Close unregisters them.
type Metrics struct {
	reg    metric.Registration
	pools  func() []string
	source Source

	mu    sync.Mutex
	loads []jobs.PoolLoad
	read  time.Time
}

// New registers the gauges of node on meter. pools lists the pools whose
// series exist from the start; source is read at collection time.
func New(meter metric.Meter, node string, pools func() []string, source Source) (*Metrics, error) {
	m := &Metrics{pools: pools, source: source}
	queued, err := meter.Int64ObservableGauge("jobs.queued", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs waiting for a run (queued, or failed and waiting for their retry), by priority and tenant."))
	if err != nil {
		return nil, err
	}
	running, err := meter.Int64ObservableGauge("jobs.running", metric.WithUnit("{job}"), metric.WithDescription("Jobs running, by tenant."))
	if err != nil {
		return nil, err
	}
	oldest, err := meter.Float64ObservableGauge("jobs.oldest_ready", metric.WithUnit("s"),
		metric.WithDescription("How long the job ready to run longest has waited."))
	if err != nil {
		return nil, err
	}
	m.reg, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		nodeAttr := attribute.String("node", node)
		for _, l := range m.current(ctx) {
			pool := attribute.String("pool", l.Pool)
			for _, c := range l.Queued {
				o.ObserveInt64(queued, int64(c.Jobs), metric.WithAttributes(nodeAttr, pool, attribute.String("priority", string(c.Priority)), attribute.String("tenant", c.Tenant)))
			}
			for _, c := range l.Running {
				o.ObserveInt64(running, int64(c.Jobs), metric.WithAttributes(nodeAttr, pool, attribute.String("tenant", c.Tenant)))
			}
			o.ObserveFloat64(oldest, l.OldestReadySeconds, metric.WithAttributes(nodeAttr, pool))
		}
		return nil
	}, queued, running, oldest)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Close unregisters the gauges.
func (m *Metrics) Close() error { return m.reg.Unregister() }

// current returns the figures to observe: read again if the last reading
// is older than MinRefresh, folded, with every known pool at 0 at least.
func (m *Metrics) current(ctx context.Context) []jobs.PoolLoad {
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.read) >= MinRefresh {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		loads, err := m.source(rctx)
		cancel()
		if err == nil {
			m.loads, m.read = loads, time.Now()
		}
	}
	return Fold(m.loads, m.pools())
}

// Fold keeps the loads of pools only (a job names any pool it likes: the
// pool label is bounded by the node's pools), bounds their tenant labels
// (see the package comment) and adds the zero series of pools: the result
// is what is observed.
func Fold(loads []jobs.PoolLoad, pools []string) []jobs.PoolLoad {
	byPool := map[string]jobs.PoolLoad{}
	for _, l := range loads {
		if slices.Contains(pools, l.Pool) {
			byPool[l.Pool] = foldTenants(l)
		}
	}
	for _, p := range pools {
		l := byPool[p]
		l.Pool = p
		for _, pr := range jobs.Priorities {
			if !slices.ContainsFunc(l.Queued, func(c jobs.TenantCount) bool { return c.Priority == pr && c.Tenant == "" }) {
				l.Queued = append(l.Queued, jobs.TenantCount{Priority: pr})
			}
		}
		if !slices.ContainsFunc(l.Running, func(c jobs.TenantCount) bool { return c.Tenant == "" }) {
			l.Running = append(l.Running, jobs.TenantCount{})
		}
		byPool[p] = l
	}
	out := make([]jobs.PoolLoad, 0, len(byPool))
	for _, l := range byPool {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b jobs.PoolLoad) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}

// foldTenants keeps the MaxTenants tenants with the most jobs (and the
// unnamed one) and sums the others under OtherTenant.
func foldTenants(l jobs.PoolLoad) jobs.PoolLoad {
	total := map[string]int{}
	for _, c := range append(slices.Clone(l.Queued), l.Running...) {
		if c.Tenant != "" {
			total[c.Tenant] += c.Jobs
		}
	}
	if len(total) <= MaxTenants {
		return l
	}
	names := make([]string, 0, len(total))
	for t := range total {
		names = append(names, t)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(total[b], total[a]), cmp.Compare(a, b)) })
	keep := map[string]bool{"": true}
	for _, t := range names[:MaxTenants] {
		keep[t] = true
	}
	fold := func(cs []jobs.TenantCount) []jobs.TenantCount {
		sum := map[jobs.TenantCount]int{}
		var order []jobs.TenantCount
		for _, c := range cs {
			k := jobs.TenantCount{Priority: c.Priority, Tenant: c.Tenant}
			if !keep[c.Tenant] {
				k.Tenant = OtherTenant
			}
			if _, seen := sum[k]; !seen {
				order = append(order, k)
			}
			sum[k] += c.Jobs
		}
		out := make([]jobs.TenantCount, 0, len(order))
		for _, k := range order {
			k.Jobs = sum[k]
			out = append(out, k)
		}
		return out
	}
	l.Queued, l.Running = fold(l.Queued), fold(l.Running)
	return l
}
