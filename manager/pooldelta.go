package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

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
	if d.empty() {
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

// deltaStore keeps the node's runtime pool changes in the pool bucket:
// their stored form, the refusal of what no manager wrote, and the one
// carry-over of an earlier version's value. The changes in force are the
// Manager's (m.delta, under m.mu, changed with the pools); deltaStore holds
// no state of its own and takes no lock but the refusal count's.
type deltaStore struct {
	store Store // Config.PoolStore, fenced
	node  string
	lead  *leadership  // the instance and term that mark a write
	check *recordCheck // counts refusals
	log   *slog.Logger
}

// load reads the node's stored pool changes, carrying a legacy value over
// on the first start of this version. apply is false if the stored value
// was refused: the node then serves its configured pools.
func (s *deltaStore) load(ctx context.Context) (d poolDelta, apply bool, err error) {
	key := deltaKey(s.node)
	data, _, err := s.store.Get(ctx, key)
	switch {
	case err == nil:
		if d, err = parseDelta(data, true); err != nil {
			s.refuse(key, err)
			return poolDelta{}, false, nil
		}
	case errors.Is(err, ErrStoreNotFound):
		if d, err = s.carryOver(ctx); err != nil {
			return d, false, err
		}
	default:
		return d, false, fmt.Errorf("lease: reading runtime pool changes: %w", err)
	}
	return d, true, nil
}

// carryOver reads the unmarked value of an earlier version, if any, and
// stores it (or nothing, if there is none or it is refused) under
// deltaKey, so that it is read this once.
func (s *deltaStore) carryOver(ctx context.Context) (poolDelta, error) {
	var d poolDelta
	data, _, err := s.store.Get(ctx, s.node)
	switch {
	case err == nil:
		if d, err = parseDelta(data, false); err != nil {
			s.refuse(s.node, err)
			d = poolDelta{}
		} else if !d.empty() {
			s.log.Info("runtime pool changes of an earlier version carried over", "from", s.node, "to", deltaKey(s.node))
		}
	case !errors.Is(err, ErrStoreNotFound):
		return d, fmt.Errorf("lease: reading runtime pool changes: %w", err)
	}
	if err := s.put(ctx, d); err != nil {
		return d, fmt.Errorf("lease: storing runtime pool changes: %w", err)
	}
	return d, nil
}

// put writes d, marked with this manager, under deltaKey.
func (s *deltaStore) put(ctx context.Context, d poolDelta) error {
	data, err := json.Marshal(storedDelta{Manager: s.lead.instance, Term: s.lead.term(), poolDelta: d})
	if err != nil {
		return err
	}
	_, err = s.store.Put(ctx, deltaKey(s.node), data)
	return err
}

// refuse reports stored pool changes that are not applied.
func (s *deltaStore) refuse(key string, why error) {
	s.check.count(RefusedPoolDelta)
	s.log.Warn("refusing stored pool changes no manager wrote; serving the configured pools (leasemgr resize stores new ones)",
		"key", echo.Clip(key), "why", echo.Clip(why.Error()))
}
