package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// Runtime pool changes (resize) are stored in the pool bucket under
// deltaKey, marked with the manager instance and leadership term that
// wrote them, and applied at every start over the configured pools. They
// change capacities and rates, so only changes a manager could have made
// are applied: a stored value that does not decode strictly, holds what a
// resize request could not (a bad pool name, a capacity or rate out of
// bounds), or names no manager is refused, logged and counted
// (RefusedPoolDelta), and the node serves its configured pools.
//
// Versions before the executors' account (jetstream/accounts.go) stored
// them unmarked under the node's own key. The first start of this version
// carries those over once, checked the same way, and from then on reads
// only deltaKey: an unmarked value written later is never read.

// deltaKey is where node's pool changes are stored. Node ids are single
// tokens, so it never collides with a legacy key.
func deltaKey(node string) string { return node + ".delta" }

// storedDelta is the stored form of a poolDelta.
type storedDelta struct {
	Manager string `json:"manager"`
	Term    uint64 `json:"term,omitempty"`
	poolDelta
}

// parseDelta decodes and checks a stored delta; marked says the value must
// name its manager (deltaKey's values do, legacy ones cannot).
func parseDelta(data []byte, marked bool) (poolDelta, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s storedDelta
	var err error
	if marked {
		err = dec.Decode(&s)
	} else {
		err = dec.Decode(&s.poolDelta)
	}
	if err != nil {
		return poolDelta{}, fmt.Errorf("does not decode: %w", err)
	}
	if dec.More() {
		return poolDelta{}, errors.New("trailing data")
	}
	if marked && s.Manager == "" {
		return poolDelta{}, errors.New("names no manager")
	}
	d := s.poolDelta
	if len(d.Set) == 0 && len(d.Rates) == 0 && len(d.Removed) == 0 {
		return d, nil
	}
	for _, rs := range d.Rates {
		if rs.Rate == "" {
			return poolDelta{}, errors.New("a rate without its rate")
		}
	}
	if e := validateResize(&lease.ResizeRequest{Set: d.Set, Rates: d.Rates, Remove: d.Removed}); e != nil {
		return poolDelta{}, errors.New(e.Message)
	}
	return d, nil
}

// loadDelta reads the node's stored pool changes, carrying a legacy value
// over on the first start of this version, and applies them before the
// lease records are counted.
func (m *Manager) loadDelta(ctx context.Context) error {
	if m.cfg.PoolStore == nil {
		return nil
	}
	key := deltaKey(m.cfg.Node)
	data, _, err := m.cfg.PoolStore.Get(ctx, key)
	var d poolDelta
	switch {
	case err == nil:
		if d, err = parseDelta(data, true); err != nil {
			m.refuseDelta(key, err)
			return nil
		}
	case errors.Is(err, ErrStoreNotFound):
		if d, err = m.carryDeltaOver(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("lease: reading runtime pool changes: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delta = d
	m.applyLocked(d.effective(m.cfg.Pools), true)
	if len(d.Set) > 0 || len(d.Rates) > 0 || len(d.Removed) > 0 {
		m.log.Info("runtime pool changes applied over the configured pools", "set", d.Set, "rates", d.Rates, "removed", d.Removed)
	}
	return nil
}

// carryDeltaOver reads the unmarked value of an earlier version, if any,
// and stores it (or nothing, if there is none or it is refused) under
// deltaKey, so that it is read this once.
func (m *Manager) carryDeltaOver(ctx context.Context) (poolDelta, error) {
	var d poolDelta
	data, _, err := m.cfg.PoolStore.Get(ctx, m.cfg.Node)
	switch {
	case err == nil:
		if d, err = parseDelta(data, false); err != nil {
			m.refuseDelta(m.cfg.Node, err)
			d = poolDelta{}
		} else if len(d.Set) > 0 || len(d.Rates) > 0 || len(d.Removed) > 0 {
			m.log.Info("runtime pool changes of an earlier version carried over", "from", m.cfg.Node, "to", deltaKey(m.cfg.Node))
		}
	case !errors.Is(err, ErrStoreNotFound):
		return d, fmt.Errorf("lease: reading runtime pool changes: %w", err)
	}
	if err := m.storeDelta(ctx, d); err != nil {
		return d, fmt.Errorf("lease: storing runtime pool changes: %w", err)
	}
	return d, nil
}

// storeDelta writes d, marked with this manager, under deltaKey.
func (m *Manager) storeDelta(ctx context.Context, d poolDelta) error {
	data, err := json.Marshal(storedDelta{Manager: m.cfg.Instance, Term: m.lead.term(), poolDelta: d})
	if err != nil {
		return err
	}
	_, err = m.cfg.PoolStore.Put(ctx, deltaKey(m.cfg.Node), data)
	return err
}

// refuseDelta reports stored pool changes that are not applied.
func (m *Manager) refuseDelta(key string, why error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.RecordRefused != nil {
		m.cfg.RecordRefused(RefusedPoolDelta)
	}
	m.log.Warn("refusing stored pool changes no manager wrote; serving the configured pools (leasemgr resize stores new ones)",
		"key", echo.Clip(key), "why", echo.Clip(why.Error()))
}
