package manager

import (
	"fmt"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// The tally's shadow counts (lease.ShadowCounts): what shadow pools'
// limits would have done, counted from their granted events and stored
// beside the pool counts (tallystore.go).

// countShadowLocked counts ev's shadow reason and action. t.mu must be
// held.
func (t *tally) countShadowLocked(ev lease.Event) {
	s := t.shadow[ev.Pool]
	if s.Count(ev) {
		t.shadow[ev.Pool] = s
	}
}

// shadowOf returns a copy of pool's shadow counts, nil if it has none.
func (t *tally) shadowOf(pool string) lease.ShadowCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shadow[pool].Clone()
}

// restoreShadowLocked starts the shadow counts from stored ones. t.mu
// must be held.
func (t *tally) restoreShadowLocked(stored map[string]lease.ShadowCounts) {
	for name, s := range stored {
		t.shadow[name] = s
	}
}

// shadowDueLocked returns a copy of every pool's shadow counts, nil if
// there are none. t.mu must be held.
func (t *tally) shadowDueLocked() map[string]lease.ShadowCounts {
	if len(t.shadow) == 0 {
		return nil
	}
	out := make(map[string]lease.ShadowCounts, len(t.shadow))
	for name, s := range t.shadow {
		out[name] = s.Clone()
	}
	return out
}

// checkShadowCounts checks stored shadow counts: as many pools as counts
// may hold, and every pool, reason and action a token. Reasons and actions
// this version does not know are kept: a later version may count more.
func checkShadowCounts(s map[string]lease.ShadowCounts) error {
	if len(s) > maxCountedPools {
		return fmt.Errorf("holds shadow counts of %d pools, more than %d", len(s), maxCountedPools)
	}
	for name, byReason := range s {
		if err := rules.ValidToken(name); err != nil {
			return fmt.Errorf("shadow counts of pool %q: %w", echo.Clip(name), err)
		}
		if len(byReason) > maxShadowLabels {
			return fmt.Errorf("shadow counts of pool %q: %d reasons, more than %d", name, len(byReason), maxShadowLabels)
		}
		for reason, byAction := range byReason {
			if err := rules.ValidToken(string(reason)); err != nil {
				return fmt.Errorf("shadow counts of pool %q: reason %q: %w", name, echo.Clip(string(reason)), err)
			}
			if len(byAction) > maxShadowLabels {
				return fmt.Errorf("shadow counts of pool %q: reason %s: %d actions, more than %d", name, reason, len(byAction), maxShadowLabels)
			}
			for action := range byAction {
				if err := rules.ValidToken(string(action)); err != nil {
					return fmt.Errorf("shadow counts of pool %q: reason %s: action %q: %w", name, reason, echo.Clip(string(action)), err)
				}
			}
		}
	}
	return nil
}

// maxShadowLabels bounds the reasons of a pool, and the actions of a
// reason, that stored shadow counts may hold: far more than there are.
const maxShadowLabels = 32
