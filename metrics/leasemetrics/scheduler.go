package leasemetrics

import (
	"cmp"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// The fair scheduler's families, read from the pool source at collection
// (fair pools only; a node without a source has none):
//
//	lease.scheduler.selections            lease_scheduler_selections_total{node,pool,tenant,key}
//	lease.scheduler.deferrals             lease_scheduler_deferrals_total{node,pool,tenant,key}
//	lease.scheduler.deficit               lease_scheduler_deficit{node,pool,tenant,key}       gauge, slots
//	lease.scheduler.starvation_promotions lease_scheduler_starvation_promotions_total{node,pool}
//
// Each share (a tenant's requests with one fairness key; key "" for its
// requests without one) is pools.KeyStats: selected, deferred and deficit.
// A pool has series for at most MaxSchedulerKeys shares, its busiest (most
// slots in flight and queued; by name among equals); the others, and the
// shares forgotten since (a share that holds and queues nothing), are
// folded into one series with tenant and key OtherKey, which every fair
// pool has: its counters are the pool's totals less the shares shown, so
// sum by (pool) is the pool's total, and its deficit the sum of the others'
// deficits among those the stats reply lists (lease.MaxStatsKeys). A
// share's counters start at 0 when it appears, so a key that goes idle
// and comes back, or moves between its own series and OtherKey's, looks
// like a counter reset, which rate() takes in its stride.

// MaxSchedulerKeys bounds the shares of one pool with series of their own
// in the lease_scheduler_* families.
const MaxSchedulerKeys = 50

// OtherKey is the tenant and key of the series that sums the shares past
// MaxSchedulerKeys. A share really named so is summed in with them.
const OtherKey = "_other"

// Attribute keys of the scheduler's per-share series.
const (
	KeyTenant = attribute.Key("tenant")
	KeyKey    = attribute.Key("key")
)

// schedInstruments are the scheduler's families.
type schedInstruments struct {
	selections, deferrals, promotions metric.Int64ObservableCounter
	deficit                           metric.Int64ObservableGauge
}

// newSched creates the scheduler's instruments on meter.
func newSched(meter metric.Meter) (*schedInstruments, error) {
	s := &schedInstruments{}
	var err error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var c metric.Int64ObservableCounter
		c, err = meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	s.selections = counter("lease.scheduler.selections", "{request}", "Requests a fair pool's scheduler granted, per share (tenant and fairness key).")
	s.deferrals = counter("lease.scheduler.deferrals", "{deferral}", "Times a fair pool's scheduler passed a share over while it had a request waiting: credit short of its next request, or a key or tenant cap.")
	s.promotions = counter("lease.scheduler.starvation_promotions", "{request}", "Grants of a request that went first because it had waited the pool's starvation age.")
	if err != nil {
		return nil, err
	}
	s.deficit, err = meter.Int64ObservableGauge("lease.scheduler.deficit", metric.WithUnit("{slot}"),
		metric.WithDescription("Credit a share of a fair pool has left from its turns (below 0 after a starvation promotion)."))
	return s, err
}

// instruments lists them for RegisterCallback.
func (s *schedInstruments) instruments() []metric.Observable {
	return []metric.Observable{s.selections, s.deferrals, s.promotions, s.deficit}
}

// observe reports a pool's scheduler, if it is fair.
func (s *schedInstruments) observe(o metric.Observer, node string, ps *lease.PoolStats) {
	sc := ps.Scheduler
	if sc == nil {
		return
	}
	base := []attribute.KeyValue{KeyNode.String(node), KeyPool.String(ps.Name)}
	o.ObserveInt64(s.promotions, sc.StarvationPromotions, metric.WithAttributeSet(attribute.NewSet(base...)))
	shown, rest := foldKeys(sc.Keys)
	other := pools.KeyStats{Selected: sc.Selected, Deferred: sc.Deferred}
	share := func(tenant, key string, k pools.KeyStats) {
		opt := metric.WithAttributeSet(attribute.NewSet(append(base[:2:2], KeyTenant.String(tenant), KeyKey.String(key))...))
		o.ObserveInt64(s.selections, k.Selected, opt)
		o.ObserveInt64(s.deferrals, k.Deferred, opt)
		o.ObserveInt64(s.deficit, k.Deficit, opt)
	}
	for _, k := range shown {
		share(k.Tenant, k.Key, k)
		other.Selected -= k.Selected
		other.Deferred -= k.Deferred
	}
	for _, k := range rest {
		other.Deficit += k.Deficit
	}
	share(OtherKey, OtherKey, other)
}

// foldKeys splits a pool's shares into those with series of their own (at
// most MaxSchedulerKeys, the busiest) and the rest.
func foldKeys(keys []pools.KeyStats) (shown, rest []pools.KeyStats) {
	keys = slices.Clone(keys)
	slices.SortStableFunc(keys, func(a, b pools.KeyStats) int {
		return cmp.Or(cmp.Compare(b.InUse+b.QueuedSlots, a.InUse+a.QueuedSlots), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	for _, k := range keys {
		if len(shown) < MaxSchedulerKeys && (k.Tenant != OtherKey || k.Key != OtherKey) {
			shown = append(shown, k)
		} else {
			rest = append(rest, k)
		}
	}
	return shown, rest
}
