package leasemetrics_test

import (
	"context"
	"math"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/metrics/leasemetrics"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
	"github.com/slotlease/slotlease/test/harness"
)

// setup runs otelsetup.Setup with no OTEL_* exporters and returns fresh
// Metrics on its meter.
func setup(t *testing.T) *leasemetrics.Metrics {
	t.Helper()
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
	shutdown, err := otelsetup.Setup(context.Background(), "leasemetrics-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	m, err := leasemetrics.New(telemetry.Meter())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// scrape GETs /metrics from otelsetup.MetricsHandler over HTTP and parses it.
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(otelsetup.MetricsHandler())
	defer srv.Close()
	body := harness.GetOK(t, srv.URL+"/metrics")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// series finds the series of family name with exactly labels; nil if none.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(want) && func() bool {
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}() {
			return m
		}
	}
	return nil
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := series(fams, name, labels...)
	if m == nil {
		t.Fatalf("no series %s%v on /metrics", name, labels)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("series %s%v is neither counter nor gauge", name, labels)
	return 0
}

// cumulative returns a histogram series' count, sum and bucket counts by
// upper bound.
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) (count uint64, sum float64, buckets map[float64]uint64) {
	t.Helper()
	m := series(fams, name, labels...)
	if m == nil || m.Histogram == nil {
		t.Fatalf("no histogram %s%v on /metrics", name, labels)
	}
	buckets = map[float64]uint64{}
	for _, b := range m.Histogram.Bucket {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum(), buckets
}

type recordingSink struct {
	mu     sync.Mutex
	events []lease.Event
}

func (r *recordingSink) Publish(ev lease.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func TestSinkTurnsEventsIntoPrometheusSeries(t *testing.T) {
	m := setup(t)
	next := &recordingSink{}
	sink := m.Sink(next)

	gpu := func(kind lease.EventKind, inUse int64, queued int, mod ...func(*lease.Event)) lease.Event {
		ev := lease.Event{Kind: kind, Node: "n1", Pool: "gpu", Stats: pools.Stats{Capacity: 2, InUse: inUse, Available: 2 - inUse, QueuedRequests: queued, QueuedSlots: int64(queued)}}
		for _, f := range mod {
			f(&ev)
		}
		return ev
	}
	wait := func(ms int64) func(*lease.Event) { return func(ev *lease.Event) { ev.WaitMs = ms } }
	code := func(c lease.Code) func(*lease.Event) { return func(ev *lease.Event) { ev.Code = c } }
	events := []lease.Event{
		gpu(lease.EventRequested, 0, 0),
		gpu(lease.EventGranted, 1, 0, wait(0)),
		gpu(lease.EventRequested, 1, 0),
		gpu(lease.EventGranted, 2, 0, wait(3)),
		gpu(lease.EventRequested, 2, 0),
		gpu(lease.EventQueued, 2, 1),
		gpu(lease.EventRejected, 2, 0, code(lease.CodeWaitExpired)),
		gpu(lease.EventRequested, 2, 0),
		gpu(lease.EventQueued, 2, 1),
		gpu(lease.EventCancelled, 2, 0, code(lease.CodeCancelled)),
		gpu(lease.EventRejected, 2, 0, code(lease.CodeExceedsCapacity)),
		gpu(lease.EventReleased, 1, 0),
		gpu(lease.EventExpired, 0, 0),
		{Kind: lease.EventGranted, Node: "n1", Pool: "io", WaitMs: 1500, Stats: pools.Stats{Capacity: 16, InUse: 4, QueuedRequests: 3, QueuedSlots: 7, Rate: "10/s", Burst: 5, Tokens: 2}},
	}
	for _, ev := range events {
		sink.Publish(ev)
	}
	m.ObserveGrantLatency("n1", "gpu", 750*time.Microsecond)
	m.ObserveGrantLatency("n1", "gpu", 2*time.Millisecond)

	// Every event is forwarded, in order, unchanged.
	if !slices.EqualFunc(next.events, events, func(a, b lease.Event) bool { return a == b }) {
		t.Fatalf("forwarded %d events, want the %d published in order", len(next.events), len(events))
	}

	fams := scrape(t)
	gpuL := []string{"node", "n1", "pool", "gpu"}
	ioL := []string{"node", "n1", "pool", "io"}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"lease_capacity", gpuL, 2},
		{"lease_in_use", gpuL, 0},
		{"lease_queued", gpuL, 0},
		{"lease_queued_slots", gpuL, 0},
		{"lease_capacity", ioL, 16},
		{"lease_in_use", ioL, 4},
		{"lease_queued", ioL, 3},
		{"lease_queued_slots", ioL, 7},
		{"lease_rate_tokens", ioL, 2},
		{"lease_requests_total", gpuL, 4},
		{"lease_enqueued_total", gpuL, 2},
		{"lease_grants_total", gpuL, 2},
		{"lease_grants_total", ioL, 1},
		{"lease_rejections_total", append(slices.Clone(gpuL), "code", "wait_expired"), 1},
		{"lease_rejections_total", append(slices.Clone(gpuL), "code", "exceeds_capacity"), 1},
		{"lease_cancellations_total", gpuL, 1},
		{"lease_releases_total", gpuL, 1},
		{"lease_expirations_total", gpuL, 1},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if s := series(fams, "lease_rate_tokens", gpuL...); s != nil {
		t.Errorf("lease_rate_tokens for gpu, a pool without a rate: %v", s)
	}
	// What did not happen is there at 0 from the pool's first event on.
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"lease_rejections_total", append(slices.Clone(gpuL), "code", "unavailable")},
		{"lease_rejections_total", append(slices.Clone(ioL), "code", "queue_full")},
		{"lease_releases_total", ioL},
		{"lease_requests_total", ioL},
	} {
		if s := series(fams, c.name, c.labels...); s == nil || s.Counter.GetValue() != 0 {
			t.Errorf("%s%v = %v, want a series at 0", c.name, c.labels, s)
		}
	}

	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	count, sum, b := histogram(t, fams, "lease_queue_wait_seconds", gpuL...)
	if count != 2 || !near(sum, 0.003) || b[0.00025] != 1 || b[0.0025] != 1 || b[0.005] != 2 {
		t.Errorf("gpu queue wait: count %d sum %v buckets %v, want 2 waits of 0 and 3 ms", count, sum, b)
	}
	count, sum, b = histogram(t, fams, "lease_queue_wait_seconds", ioL...)
	if count != 1 || !near(sum, 1.5) || b[1] != 0 || b[2.5] != 1 {
		t.Errorf("io queue wait: count %d sum %v buckets %v, want one of 1.5 s", count, sum, b)
	}
	count, sum, b = histogram(t, fams, "lease_grant_latency_seconds", gpuL...)
	if count != 2 || !near(sum, 0.00275) || b[0.0005] != 0 || b[0.001] != 1 || b[0.0025] != 2 {
		t.Errorf("gpu grant latency: count %d sum %v buckets %v, want 0.75 and 2 ms", count, sum, b)
	}

	for name, typ := range map[string]dto.MetricType{
		"lease_in_use": dto.MetricType_GAUGE, "lease_grants_total": dto.MetricType_COUNTER,
		"lease_queue_wait_seconds": dto.MetricType_HISTOGRAM, "lease_grant_latency_seconds": dto.MetricType_HISTOGRAM,
	} {
		if f := fams[name]; f.GetType() != typ || f.GetHelp() == "" {
			t.Errorf("%s: type %v help %q, want %v with help", name, f.GetType(), f.GetHelp(), typ)
		}
	}
}

// A pool source wins over events for its node: idle pools show, removed
// ones vanish, a standby reports none; counters stay, other nodes keep their
// event figures.
func TestPoolSource(t *testing.T) {
	m := setup(t)
	sink := m.Sink(nil)
	var mu sync.Mutex
	current := []lease.PoolStats{{Name: "default", Stats: pools.Stats{Capacity: 4}}, {Name: "gpu", Stats: pools.Stats{Capacity: 1, InUse: 1}}}
	m.SetPoolSource("n1", func() []lease.PoolStats {
		mu.Lock()
		defer mu.Unlock()
		return current
	})
	set := func(ps []lease.PoolStats) {
		mu.Lock()
		current = ps
		mu.Unlock()
	}
	sink.Publish(lease.Event{Kind: lease.EventGranted, Node: "n1", Pool: "gpu", Stats: pools.Stats{Capacity: 9, InUse: 9}})
	sink.Publish(lease.Event{Kind: lease.EventGranted, Node: "n2", Pool: "gpu", Stats: pools.Stats{Capacity: 3, InUse: 1}})

	fams := scrape(t)
	if got := value(t, fams, "lease_capacity", "node", "n1", "pool", "default"); got != 4 {
		t.Errorf("capacity of an idle pool = %v, want 4", got)
	}
	if got := value(t, fams, "lease_capacity", "node", "n1", "pool", "gpu"); got != 1 {
		t.Errorf("capacity = %v, want the source's 1, not the event's 9", got)
	}
	if got := value(t, fams, "lease_capacity", "node", "n2", "pool", "gpu"); got != 3 {
		t.Errorf("n2 (no source) capacity = %v, want the event's 3", got)
	}
	zeroCounters(t, fams, "n1", "default") // idle, met only in the source: its counters are there at 0

	set(append(slices.Clone(current), lease.PoolStats{Name: "new", Stats: pools.Stats{Capacity: 2}})) // added by a resize
	zeroCounters(t, scrape(t), "n1", "new")

	set(current[1:]) // "default" removed by a resize
	fams = scrape(t)
	if s := series(fams, "lease_capacity", "node", "n1", "pool", "default"); s != nil {
		t.Error("a removed pool still has a capacity gauge")
	}
	if got := value(t, fams, "lease_in_use", "node", "n1", "pool", "gpu"); got != 1 {
		t.Errorf("in use = %v, want 1", got)
	}

	set(nil) // standing by
	fams = scrape(t)
	if s := series(fams, "lease_capacity", "node", "n1", "pool", "gpu"); s != nil {
		t.Error("a standby still reports pool gauges")
	}
	if got := value(t, fams, "lease_grants_total", "node", "n1", "pool", "gpu"); got != 1 {
		t.Errorf("grants counter = %v, want 1", got)
	}

	m.SetPoolSource("n1", nil) // back to the figures of the last event
	if got := value(t, scrape(t), "lease_capacity", "node", "n1", "pool", "gpu"); got != 9 {
		t.Errorf("capacity without a source = %v, want the last event's 9", got)
	}
}

// zeroCounters fails t unless every per-pool counter series of node's pool
// is in fams at 0: a pool's counters appear with the pool.
func zeroCounters(t *testing.T, fams map[string]*dto.MetricFamily, node, pool string) {
	t.Helper()
	for _, name := range []string{"lease_requests_total", "lease_enqueued_total", "lease_grants_total", "lease_releases_total", "lease_expirations_total", "lease_cancellations_total"} {
		if s := series(fams, name, "node", node, "pool", pool); s == nil || s.Counter.GetValue() != 0 {
			t.Errorf("%s{node=%s,pool=%s} = %v, want a series at 0", name, node, pool, s)
		}
	}
	for _, c := range leasemetrics.AcquireCodes {
		if s := series(fams, "lease_rejections_total", "node", node, "pool", pool, "code", string(c)); s == nil || s.Counter.GetValue() != 0 {
			t.Errorf("lease_rejections_total{node=%s,pool=%s,code=%s} = %v, want a series at 0", node, pool, c, s)
		}
	}
}

// A real lease manager's events, through the sink, and its stats, through
// a pool source, come out on /metrics.
func TestMetricsFromARealManager(t *testing.T) {
	m := setup(t)
	srv := harness.StartServer(t)
	node := harness.StartManager(t, srv.URL, manager.Config{
		Node: "n1", Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}, TTL: 5 * time.Second,
		Events: m.Sink(nil),
	})
	// Gauges read the manager at collection while it publishes events:
	// the race detector and the scrapes below check the locking.
	m.SetPoolSource("n1", node.Manager.Stats)
	client := harness.Client(t, srv.URL, "n1", lease.WithPollInterval(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	first, err := client.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	var once sync.Once
	type result struct {
		l   *lease.Lease
		err error
	}
	second := make(chan result, 1)
	go func() {
		l, err := client.Acquire(ctx, "gpu", 1, lease.OnQueued(func(int) { once.Do(func() { close(queued) }) }))
		second <- result{l, err}
	}()
	select {
	case <-queued:
	case <-ctx.Done():
		t.Fatal("the second acquire never queued")
	}
	fams := scrape(t)
	if got := value(t, fams, "lease_queued", "node", "n1", "pool", "gpu"); got != 1 {
		t.Errorf("lease_queued while one waits = %v, want 1", got)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Releases are evented once the delete is stored: poll.
	harness.Eventually(t, 10*time.Second, "two releases on /metrics", func() bool {
		s := series(scrape(t), "lease_releases_total", "node", "n1", "pool", "gpu")
		return s != nil && s.Counter.GetValue() == 2
	})
	fams = scrape(t)
	got := map[string]float64{}
	for _, name := range []string{"lease_requests_total", "lease_enqueued_total", "lease_grants_total", "lease_in_use", "lease_queued", "lease_capacity"} {
		got[name] = value(t, fams, name, "node", "n1", "pool", "gpu")
	}
	want := map[string]float64{"lease_requests_total": 2, "lease_enqueued_total": 1, "lease_grants_total": 2, "lease_in_use": 0, "lease_queued": 0, "lease_capacity": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The outcome counts as the manager reports them, every outcome with
	// a series.
	for o, want := range map[lease.Outcome]float64{lease.OutcomeGranted: 2, lease.OutcomeCompleted: 2, lease.OutcomeFailed: 0,
		lease.OutcomeRejected: 0, lease.OutcomeDropped: 0, lease.OutcomeCancelled: 0} {
		s := series(fams, "lease_pool_outcomes_total", "node", "n1", "pool", "gpu", "outcome", string(o))
		if s == nil || s.Counter.GetValue() != want {
			t.Errorf("lease_pool_outcomes_total{outcome=%s} = %v, want %v", o, s, want)
		}
	}
	count, _, _ := histogram(t, fams, "lease_queue_wait_seconds", "node", "n1", "pool", "gpu")
	if count != 2 {
		t.Errorf("queue wait observations = %d, want 2", count)
	}
	if t.Failed() {
		names := make([]string, 0, len(fams))
		for n := range fams {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("families: %v", names)
	}
}

// lease_records_refused_total has a series per reason from the start, at
// 0, and counts what the manager reports.
func TestRecordsRefusedSeries(t *testing.T) {
	m := setup(t)
	refused := m.RecordsRefused("n1")
	fams := scrape(t)
	for _, r := range manager.RefusalReasons {
		if v := value(t, fams, "lease_records_refused_total", "node", "n1", "reason", r); v != 0 {
			t.Fatalf("%s starts at %v, want 0", r, v)
		}
	}
	refused(manager.RefusedNoTTL)
	refused(manager.RefusedNoTTL)
	refused(manager.RefusedForeign)
	fams = scrape(t)
	for r, want := range map[string]float64{manager.RefusedNoTTL: 2, manager.RefusedForeign: 1, manager.RefusedKey: 0} {
		if v := value(t, fams, "lease_records_refused_total", "node", "n1", "reason", r); v != want {
			t.Errorf("%s: %v, want %v", r, v, want)
		}
	}
}
