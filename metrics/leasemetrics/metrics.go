// Package leasemetrics turns lease events into OpenTelemetry metrics, per
// node and pool. It is apart from package telemetry because it implements
// manager.EventSink, while the lease package itself calls telemetry's span
// helpers: one package doing both would be an import cycle.
//
// On /metrics (the Prometheus exporter's names; OTLP carries the names in
// the first column):
//
//	lease.capacity        lease_capacity{node,pool}                    gauge, slots
//	lease.in_use          lease_in_use{node,pool}                      gauge, slots held
//	lease.queued          lease_queued{node,pool}                      gauge, requests waiting
//	lease.queued_slots    lease_queued_slots{node,pool}                gauge, slots they want
//	lease.rate_tokens     lease_rate_tokens{node,pool}                 gauge, slots the start rate's bucket
//	                                                                   allows now (pools with a rate only)
//	lease.budget_limit    lease_budget_limit{node,pool}                gauge, units a budget allows per window,
//	lease.budget_window   lease_budget_window_seconds{node,pool}       its window, the units settled in it and
//	lease.budget_used     lease_budget_used{node,pool}                 those the open leases reserved (pools
//	lease.budget_reserved lease_budget_reserved{node,pool}             with a budget only)
//	lease.requests        lease_requests_total{node,pool}              new acquire requests
//	lease.enqueued        lease_enqueued_total{node,pool}              requests that waited 50 ms or more
//	lease.grants          lease_grants_total{node,pool}                grants stored and sent
//	lease.rejections      lease_rejections_total{node,pool,code}       acquires ended by an error, by wire code
//	lease.releases        lease_releases_total{node,pool}              leases released
//	lease.expirations     lease_expirations_total{node,pool}           leases whose TTL lapsed
//	lease.cancellations   lease_cancellations_total{node,pool}         acquires withdrawn by their holder
//	lease.group_stops     lease_group_stops_total{node,pool}           holders asked to stop by a newer request of
//	                                                                   their concurrency group (cancel_in_progress)
//	lease.superseded      lease_superseded_total{node,pool}            queued requests a newer request of their
//	                                                                   concurrency group replaced
//	lease.pool_outcomes   lease_pool_outcomes_total{node,pool,outcome} how the pool's requests and leases ended
//	                                                                   (granted, completed, failed, rejected, dropped,
//	                                                                   cancelled: lease.PoolCounts), as the serving
//	                                                                   manager reports them, carried across restarts
//	lease.shadow          lease_shadow_total{node,pool,reason,action}  what a shadow pool's limits would have done with
//	                                                                   the requests it granted anyway (shadow.go)
//	lease.records_refused lease_records_refused_total{node,reason}     stored records the manager refused (see
//	                                                                   manager.RefusalReasons), each reason from 0
//	lease.replies_refused lease_replies_refused_total{node}            requests dropped for a reply subject that is
//	                                                                   not an inbox (ReplyRefusals; 0 from the start)
//	lease.secrets_refused lease_secrets_refused_total{node,reason}     renew, release, cancel and acquire retries refused
//	                                                                   over their secret: wrong_secret, or
//	                                                                   too_many_attempts (SecretsRefused; 0 from the start)
//	lease.queue_wait      lease_queue_wait_seconds{node,pool}          histogram: request arrival to grant, per grant
//	lease.grant_latency   lease_grant_latency_seconds{node,pool}       histogram: what the manager reports through
//	                                                                   ObserveGrantLatency (arrival to stored grant)
//
// and the fair scheduler's lease_scheduler_* families, with at most
// MaxSchedulerKeys keys per pool (see scheduler.go).
//
// The gauges show each pool's figures as its manager reports them at
// collection time (SetPoolSource), or else as carried by the last event seen
// for the pool; the counters count events of their kind. Every per-pool
// counter series (lease_rejections_total once per code in AcquireCodes) is
// created at 0 when the pool first appears, from its first event or from
// the first collection that finds it in the pool source (at start, after a
// resize added it), so rate() and dashboards see no gaps; so are both
// histograms' series on /metrics, at zero, from the same moment
// (otelsetup.DeclareHistograms: an OpenTelemetry histogram has no data
// point before its first observation). The histograms are in seconds,
// Prometheus' base unit (they were _milliseconds before).
//
// lease_pool_outcomes_total is observed, not counted here: it reads the
// counts the serving manager reports (lease.PoolCounts), which the node's
// managers keep in the pool bucket. So it carries on across a restart or
// a takeover, where the event counters above start again at 0 with the
// process; it has series only while this process serves the node
// (SetPoolSource), and a crash can set it back by the counts of the
// manager's last unwritten second (manager.CountsInterval), which
// Prometheus takes as a counter reset.
package leasemetrics

import (
	"context"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
)

// Attribute keys of every series.
const (
	KeyNode = attribute.Key("node")
	KeyPool = attribute.Key("pool")
	KeyCode = attribute.Key("code")
	// KeyReason labels lease_records_refused_total and
	// lease_secrets_refused_total.
	KeyReason = attribute.Key("reason")
	// KeyOutcome labels lease_pool_outcomes_total (lease.Outcomes).
	KeyOutcome = attribute.Key("outcome")
)

// Buckets of both histograms, in seconds: from the sub-millisecond cost of
// an uncontended grant (one KV write) to waits of an hour.
var Buckets = []float64{0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// AcquireCodes are the wire codes an acquire for a pool the node has can be
// rejected with: lease_rejections_total has a series at 0 for each of them
// from the moment the pool appears. (unknown_pool has no pool to count under.)
var AcquireCodes = []lease.Code{
	lease.CodeBadRequest, lease.CodeInvalidSlots, lease.CodeExceedsCapacity, lease.CodeWaitExpired,
	lease.CodeQueueFull, lease.CodeWouldWait, lease.CodeDropped, lease.CodeCancelled, lease.CodeConflict,
	lease.CodePoolBusy, lease.CodeUnavailable, lease.CodeInternal,
}

// Metrics holds the instruments. It is safe for concurrent use.
type Metrics struct {
	requests, enqueued, grants, rejections, releases, expirations, cancellations metric.Int64Counter
	groupStops, superseded                                                       metric.Int64Counter
	recordsRefused                                                               metric.Int64Counter
	repliesRefused                                                               metric.Int64Counter
	secretsRefused                                                               metric.Int64Counter
	jobRecordsRefused                                                            metric.Int64Counter
	queueWait, grantLatency                                                      metric.Float64Histogram
	reg                                                                          metric.Registration
	sched                                                                        *schedInstruments

	undeclare func() // removes zeroHistograms from /metrics

	mu      sync.Mutex
	pools   map[poolKey]*poolState              // every pool seen
	sources map[string]func() []lease.PoolStats // live stats by node; see SetPoolSource
}

type poolKey struct{ node, pool string }

// poolState is one pool's last figures and its prebuilt attribute options.
// Guarded by Metrics.mu.
type poolState struct {
	stats   pools.Stats // from the last event
	attrs   *attrs
	rejects map[lease.Code]*attrs // attribute sets of rejections, by code
	// outcomes are the attribute sets of lease_pool_outcomes_total, in
	// lease.Outcomes' order; shadow those of lease_shadow_total.
	outcomes []*attrs
	shadow   map[shadowKey]*attrs
}

// rejectAttrs returns the attribute set of the pool's rejections with code,
// making it on first use. Guarded by Metrics.mu.
func (p *poolState) rejectAttrs(node, pool string, code lease.Code) *attrs {
	a := p.rejects[code]
	if a == nil {
		a = newAttrs(KeyNode.String(node), KeyPool.String(pool), KeyCode.String(string(code)))
		p.rejects[code] = a
	}
	return a
}

// attrs are measurement options built once per attribute set, so recording
// a measurement does not allocate.
type attrs struct {
	set     attribute.Set
	observe []metric.ObserveOption
	add     []metric.AddOption
	record  []metric.RecordOption
}

func newAttrs(kv ...attribute.KeyValue) *attrs {
	set := attribute.NewSet(kv...)
	opt := metric.WithAttributeSet(set)
	return &attrs{set: set, observe: []metric.ObserveOption{opt}, add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
}

// New creates the instruments on meter (telemetry.Meter() in a program).
func New(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{pools: make(map[poolKey]*poolState), sources: make(map[string]func() []lease.PoolStats)}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	m.requests = counter("lease.requests", "{request}", "New acquire requests.")
	m.enqueued = counter("lease.enqueued", "{request}", "Acquire requests that waited in the queue 50 ms or more (told they wait).")
	m.grants = counter("lease.grants", "{lease}", "Leases granted: stored and sent to the holder.")
	m.rejections = counter("lease.rejections", "{request}", "Acquire requests ended by an error, by wire error code.")
	m.releases = counter("lease.releases", "{lease}", "Leases released.")
	m.expirations = counter("lease.expirations", "{lease}", "Leases freed because their TTL lapsed.")
	m.cancellations = counter("lease.cancellations", "{request}", "Acquire requests or fresh grants withdrawn by their holder.")
	m.groupStops = counter("lease.group_stops", "{lease}", "Holders asked to stop by a newer request of their concurrency group (cancel_in_progress).")
	m.superseded = counter("lease.superseded", "{request}", "Queued requests a newer request of their concurrency group replaced.")
	m.recordsRefused = counter("lease.records_refused", "{record}", "Stored lease records the manager refused to honour, by reason.")
	m.repliesRefused = counter("lease.replies_refused", "{request}", "Requests dropped unanswered because their reply subject is not an inbox.")
	m.secretsRefused = counter("lease.secrets_refused", "{request}", "Requests refused over their lease secret: a wrong one, or too many wrong ones from the connection, by reason.")
	m.jobRecordsRefused = counter("lease.job_records_refused", "{record}", "Job records claiming an outcome no job broker signed, refused when a reader had them checked.")
	histogram := func(name, desc string) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(Buckets...))
		return h
	}
	m.queueWait = histogram("lease.queue_wait", queueWaitHelp)
	m.grantLatency = histogram("lease.grant_latency", grantLatencyHelp)
	if err != nil {
		return nil, err
	}

	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var g metric.Int64ObservableGauge
		g, err = meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return g
	}
	capacity := gauge("lease.capacity", "{slot}", "Pool capacity in slots.")
	inUse := gauge("lease.in_use", "{slot}", "Slots held by leases.")
	queued := gauge("lease.queued", "{request}", "Acquire requests waiting.")
	queuedSlots := gauge("lease.queued_slots", "{slot}", "Slots wanted by the waiting requests.")
	tokens := gauge("lease.rate_tokens", "{slot}", "Slots the start rate's bucket allows now (pools with a rate only).")
	budget := budgetGauges(gauge)
	if err != nil {
		return nil, err
	}
	outcomes, err := meter.Int64ObservableCounter("lease.pool_outcomes", metric.WithUnit("{request}"),
		metric.WithDescription("How the pool's requests and leases ended, by outcome (granted, completed, failed, rejected, dropped, cancelled), as its manager counts them: carried across restarts and takeovers."))
	if err != nil {
		return nil, err
	}
	shadow, err := newShadowCounter(meter)
	if err != nil {
		return nil, err
	}
	if m.sched, err = newSched(meter); err != nil {
		return nil, err
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		observe := func(a *attrs, st pools.Stats) {
			o.ObserveInt64(capacity, st.Capacity, a.observe...)
			o.ObserveInt64(inUse, st.InUse, a.observe...)
			o.ObserveInt64(queued, int64(st.QueuedRequests), a.observe...)
			o.ObserveInt64(queuedSlots, st.QueuedSlots, a.observe...)
			if st.Rate != "" {
				o.ObserveInt64(tokens, st.Tokens, a.observe...)
			}
			budget.observe(o, st, a.observe)
		}
		m.mu.Lock()
		sources := maps.Clone(m.sources)
		for k, p := range m.pools {
			if sources[k.node] == nil {
				observe(p.attrs, p.stats)
			}
		}
		m.mu.Unlock()
		// Sources are called without m.mu: they take the manager's lock,
		// under which the manager publishes events, which take m.mu.
		for node, stats := range sources {
			for _, ps := range stats() {
				// A pool met here first (at start, after a resize) gets
				// its counters at 0 now: the SDK runs callbacks before it
				// reads the counters, so they are in this very collection.
				p := m.pool(node, ps.Name)
				observe(p.attrs, ps.Stats)
				if ps.Counts != nil {
					for i, oc := range lease.Outcomes {
						o.ObserveInt64(outcomes, int64(*ps.Counts.Field(oc)), p.outcomes[i].observe...)
					}
				}
				observeShadow(o, shadow, p, &ps)
				m.sched.observe(o, node, &ps)
			}
		}
		return nil
	}, append(append(m.sched.instruments(), budget.instruments()...), capacity, inUse, queued, queuedSlots, tokens, outcomes, shadow)...)
	if err != nil {
		return nil, err
	}
	m.undeclare = otelsetup.DeclareHistograms(m.zeroHistograms)
	return m, nil
}

// Close unregisters the gauges' callback and the histograms' zero series.
func (m *Metrics) Close() error {
	m.undeclare()
	return m.reg.Unregister()
}

// Descriptions of the histograms, which are also their HELP on /metrics.
const (
	queueWaitHelp    = "Time from an acquire's arrival until it was granted, per grant."
	grantLatencyHelp = "Time from an acquire's arrival until its grant was stored."
)

// zeroHistograms are both histograms' series of every pool seen, for
// /metrics to show at zero before their first observation
// (otelsetup.DeclareHistograms).
func (m *Metrics) zeroHistograms() []otelsetup.HistogramSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]otelsetup.HistogramSeries, 0, 2*len(m.pools))
	for k := range m.pools {
		labels := map[string]string{string(KeyNode): k.node, string(KeyPool): k.pool}
		out = append(out,
			otelsetup.HistogramSeries{Name: "lease_queue_wait_seconds", Help: queueWaitHelp, Buckets: Buckets, Labels: labels},
			otelsetup.HistogramSeries{Name: "lease_grant_latency_seconds", Help: grantLatencyHelp, Buckets: Buckets, Labels: labels})
	}
	return out
}

// pool returns the pool's state, creating it and its counter series at 0
// on first sight. It takes m.mu, which must not be held.
func (m *Metrics) pool(node, pool string) *poolState {
	m.mu.Lock()
	p, created := m.poolLocked(node, pool)
	m.mu.Unlock()
	if created {
		m.zeroCounters(p)
	}
	return p
}

// poolLocked returns the pool's state, creating it on first sight (created
// is then true, and the caller must call zeroCounters after unlocking).
func (m *Metrics) poolLocked(node, pool string) (p *poolState, created bool) {
	k := poolKey{node, pool}
	p = m.pools[k]
	if p == nil {
		p = &poolState{attrs: newAttrs(KeyNode.String(node), KeyPool.String(pool))}
		p.rejects = make(map[lease.Code]*attrs, len(AcquireCodes))
		for _, c := range AcquireCodes {
			p.rejects[c] = p.rejectAttrs(node, pool, c)
		}
		for _, o := range lease.Outcomes {
			p.outcomes = append(p.outcomes, newAttrs(KeyNode.String(node), KeyPool.String(pool), KeyOutcome.String(string(o))))
		}
		p.shadow = newShadowAttrs(node, pool)
		m.pools[k] = p
		created = true
	}
	return p, created
}

// zeroCounters creates every counter series of a new pool at 0.
func (m *Metrics) zeroCounters(p *poolState) {
	ctx := context.Background()
	for _, c := range []metric.Int64Counter{m.requests, m.enqueued, m.grants, m.releases, m.expirations, m.cancellations, m.groupStops, m.superseded} {
		c.Add(ctx, 0, p.attrs.add...)
	}
	for _, c := range AcquireCodes {
		m.rejections.Add(ctx, 0, p.rejects[c].add...)
	}
}

// SetPoolSource makes the gauges of node's pools read stats at every
// collection instead of the figures carried by the last event: pools show
// up before their first event, pools removed by a resize disappear, and a
// process standing by (stats returns nil) reports no pools it does not
// serve. stats is called without any lock of Metrics held, and must not
// block for long; nil removes the source.
func (m *Metrics) SetPoolSource(node string, stats func() []lease.PoolStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if stats == nil {
		delete(m.sources, node)
		return
	}
	m.sources[node] = stats
}

// ObserveGrantLatency records the time from an acquire's arrival at the
// manager until its grant was stored.
func (m *Metrics) ObserveGrantLatency(node, pool string, d time.Duration) {
	m.grantLatency.Record(context.Background(), d.Seconds(), m.pool(node, pool).attrs.record...)
}

// RecordsRefused returns the function for manager.Config.RecordRefused
// of node. It creates every reason's series at 0 at once, so a dashboard or
// an alert sees the series before the first refusal.
func (m *Metrics) RecordsRefused(node string) func(reason string) {
	byReason := make(map[string]*attrs, len(manager.RefusalReasons))
	for _, r := range manager.RefusalReasons {
		a := newAttrs(KeyNode.String(node), KeyReason.String(r))
		byReason[r] = a
		m.recordsRefused.Add(context.Background(), 0, a.add...)
	}
	return func(reason string) {
		a := byReason[reason]
		if a == nil { // a reason not in RefusalReasons: still counted
			a = newAttrs(KeyNode.String(node), KeyReason.String(reason))
		}
		m.recordsRefused.Add(context.Background(), 1, a.add...)
	}
}

// Record updates the instruments from one event.
func (m *Metrics) Record(ev lease.Event) {
	ctx := context.Background()
	m.mu.Lock()
	p, created := m.poolLocked(ev.Node, ev.Pool)
	p.stats = ev.Stats
	a := p.attrs
	if ev.Kind == lease.EventRejected {
		a = p.rejectAttrs(ev.Node, ev.Pool, ev.Code)
	}
	m.mu.Unlock()
	if created {
		m.zeroCounters(p)
	}

	switch ev.Kind {
	case lease.EventRequested:
		m.requests.Add(ctx, 1, a.add...)
	case lease.EventQueued:
		m.enqueued.Add(ctx, 1, a.add...)
	case lease.EventGranted:
		m.grants.Add(ctx, 1, a.add...)
		m.queueWait.Record(ctx, float64(ev.WaitMs)/1000, a.record...)
	case lease.EventRejected:
		m.rejections.Add(ctx, 1, a.add...)
	case lease.EventReleased:
		m.releases.Add(ctx, 1, a.add...)
	case lease.EventExpired:
		m.expirations.Add(ctx, 1, a.add...)
	case lease.EventCancelled:
		m.cancellations.Add(ctx, 1, a.add...)
	case lease.EventStopRequested:
		m.groupStops.Add(ctx, 1, a.add...)
	case lease.EventSuperseded:
		m.superseded.Add(ctx, 1, a.add...)
	}
}

// Sink returns an EventSink that records every event and then passes it to
// next (nil: to nobody).
func (m *Metrics) Sink(next manager.EventSink) *Sink {
	if next == nil {
		next = manager.NopEvents{}
	}
	return &Sink{m: m, next: next}
}

// Sink records events into Metrics and forwards them.
type Sink struct {
	m    *Metrics
	next manager.EventSink
}

var _ manager.EventSink = (*Sink)(nil)

// Publish records ev, then forwards it. It takes one short lock and does
// not block.
func (s *Sink) Publish(ev lease.Event) {
	s.m.Record(ev)
	s.next.Publish(ev)
}

var _ manager.Flusher = (*Sink)(nil)

// Flush flushes the sink it forwards to, if that holds events back.
func (s *Sink) Flush() {
	if f, ok := s.next.(manager.Flusher); ok {
		f.Flush()
	}
}
