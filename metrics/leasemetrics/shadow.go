package leasemetrics

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// lease_shadow_total{node,pool,reason,action} is what a shadow pool's
// limits (POOL_SHADOW) would have done with the requests it granted
// anyway: reason is the limit (pools.ShadowReasons), action what the pool
// would have done (pools.ShadowActions). Like lease_pool_outcomes_total it
// is observed from the counts the serving manager reports
// (lease.PoolStats.ShadowCounts), carried across restarts and takeovers.
// A shadow pool has every series, at 0 until counted; another pool only
// those it counted while it was one.

// Attribute keys of lease_shadow_total besides node and pool (KeyReason
// is shared with the refusal counters).
const KeyAction = attribute.Key("action")

// shadowKey is one series of lease_shadow_total of a pool.
type shadowKey struct {
	reason pools.ShadowReason
	action pools.ShadowAction
}

// newShadowAttrs builds a pool's attribute sets of lease_shadow_total,
// one per known reason and action: a bounded set, made once.
func newShadowAttrs(node, pool string) map[shadowKey]*attrs {
	out := make(map[shadowKey]*attrs, len(pools.ShadowReasons)*len(pools.ShadowActions))
	for _, r := range pools.ShadowReasons {
		for _, a := range pools.ShadowActions {
			out[shadowKey{r, a}] = newAttrs(KeyNode.String(node), KeyPool.String(pool), KeyReason.String(string(r)), KeyAction.String(string(a)))
		}
	}
	return out
}

// newShadowCounter creates lease.shadow.
func newShadowCounter(meter metric.Meter) (metric.Int64ObservableCounter, error) {
	return meter.Int64ObservableCounter("lease.shadow", metric.WithUnit("{request}"),
		metric.WithDescription("Requests a shadow pool (POOL_SHADOW) granted that its limits would have held back: by the limit (reason) and what the pool would have done (action: queued, would_wait, queue_full, dropped); carried across restarts and takeovers."))
}

// observeShadow observes ps's series of lease_shadow_total. Reasons and
// actions this version does not know (a manager of a later one) are left
// out: the label values stay bounded.
func observeShadow(o metric.Observer, c metric.Int64ObservableCounter, p *poolState, ps *lease.PoolStats) {
	if ps.Shadow {
		for k, a := range p.shadow {
			o.ObserveInt64(c, int64(ps.ShadowCounts.Of(k.reason, k.action)), a.observe...)
		}
		return
	}
	for r, byAction := range ps.ShadowCounts {
		for act, n := range byAction {
			if a := p.shadow[shadowKey{r, act}]; a != nil {
				o.ObserveInt64(c, int64(n), a.observe...)
			}
		}
	}
}
