package manager

import "github.com/slotlease/slotlease/lease"

// A pool in shadow mode (POOL_SHADOW, pools.Options.Shadow) grants at
// once what its limits would have queued or refused; its granted events
// say which limit and what it would have done (lease.Event.Shadow), the
// tally counts them (shadowcounts.go) and stats replies
// (lease.PoolStats.ShadowCounts), metrics and views show them. What protects the node rather than the pool's
// users is never shadowed: malformed requests, more slots than the pool
// could ever grant (exceeds), and the per-connection and per-credential
// bounds, which only count queue places a shadow pool never takes.

// withShadow marks ev, the granted event of r, with what r's pool's
// limits would have done with it, if they would have held it back.
func withShadow(ev lease.Event, r *request) lease.Event {
	if r.w != nil {
		ev.Shadow, ev.ShadowAction = r.w.Shadow.Reason, r.w.Shadow.Action
	}
	return ev
}
