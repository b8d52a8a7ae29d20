package lease

import (
	"maps"

	"github.com/slotlease/slotlease/pools"
)

// ShadowCounts are what a shadow pool's limits would have done with the
// requests it granted anyway (POOL_SHADOW, pools.Shadowed): by reason (the
// limit), then by action (queued, would_wait, queue_full, dropped), counted
// from its granted events (Event.Shadow). Only counts above zero are
// present. A node's managers keep them beside the PoolCounts, so they
// carry on across restarts and takeovers, also after the pool left shadow
// mode.
type ShadowCounts map[pools.ShadowReason]map[pools.ShadowAction]uint64

// Of returns the count of reason and action.
func (s ShadowCounts) Of(reason pools.ShadowReason, action pools.ShadowAction) uint64 {
	return s[reason][action]
}

// Clone returns a copy of s that shares no map with it; nil for nil.
func (s ShadowCounts) Clone() ShadowCounts {
	if s == nil {
		return nil
	}
	out := make(ShadowCounts, len(s))
	for r, byAction := range s {
		out[r] = maps.Clone(byAction)
	}
	return out
}

// Count counts ev's shadow reason and action into *s, if it is a granted
// event that has them, and reports whether it did.
func (s *ShadowCounts) Count(ev Event) bool {
	if ev.Kind != EventGranted || ev.Shadow == "" {
		return false
	}
	if *s == nil {
		*s = make(ShadowCounts)
	}
	byAction := (*s)[ev.Shadow]
	if byAction == nil {
		byAction = make(map[pools.ShadowAction]uint64)
		(*s)[ev.Shadow] = byAction
	}
	byAction[ev.ShadowAction]++
	return true
}
