package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// A node's pool counts (tally.go) are kept in the pool bucket, beside its
// runtime pool changes (pooldelta.go), under countsKey: a bucket only the
// managers' account may read or write (jetstream/accounts.go), so no
// executor can change them. A manager reads them as it starts, before it
// serves anything, and carries on from them; it writes them back once a
// second when they changed (CountsInterval), and once more as it closes.
// So a clean stop or a hand-over loses nothing, and a crash at most the
// last second's counts.
//
// Every write goes through the fence (fencedStore) like the lease writes,
// and expects the revision this manager last read or wrote: a deposed
// manager's late write is refused rather than overwriting its successor's
// counts. A revision that moved under it means another manager wrote: if
// its term is later, this one is deposed (leadership.later); otherwise
// this manager's counts, which began from the stored ones, replace them.

// CountsInterval is how often a manager writes its pool counts when they
// changed: the most a crash loses.
const CountsInterval = time.Second

// maxCountedPools bounds the pools a stored value may hold: a node's pools
// and those resizes removed since (their counts carry on if added back).
const maxCountedPools = 4096

// countsKey is where node's pool counts are stored. Node ids are single
// tokens, so it collides with neither deltaKey nor a legacy key.
func countsKey(node string) string { return node + ".counts" }

// storedCounts is the stored form of the counts, marked with the manager
// instance and term that wrote them.
type storedCounts struct {
	Manager string                      `json:"manager"`
	Term    uint64                      `json:"term,omitempty"`
	Pools   map[string]lease.PoolCounts `json:"pools"`
	// Shadow is what shadow pools' limits would have done, by pool
	// (shadowcounts.go); omitted while there is none.
	Shadow map[string]lease.ShadowCounts `json:"shadow,omitempty"`
}

// decodeStored decodes a value of the pool bucket strictly into v: no
// unknown field, nothing after it, and a manager that wrote it (manager
// points to v's field).
func decodeStored(data []byte, v any, manager *string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("does not decode: %w", err)
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	if *manager == "" {
		return errors.New("names no manager")
	}
	return nil
}

// parseCounts decodes and checks a stored value.
func parseCounts(data []byte) (storedCounts, error) {
	var s storedCounts
	if err := decodeStored(data, &s, &s.Manager); err != nil {
		return s, err
	}
	if len(s.Pools) > maxCountedPools {
		return s, fmt.Errorf("holds %d pools, more than %d", len(s.Pools), maxCountedPools)
	}
	for name := range s.Pools {
		if err := rules.ValidToken(name); err != nil {
			return s, fmt.Errorf("pool %q: %w", echo.Clip(name), err)
		}
	}
	return s, checkShadowCounts(s.Shadow)
}

// countStore reads and writes a node's pool counts, and owns the goroutine
// that writes them while the manager serves.
type countStore struct {
	store   Store // Config.PoolStore, fenced
	node    string
	lead    *leadership // the instance and term that mark a write
	check   *recordCheck
	tally   *tally
	timeout time.Duration // one store call's bound
	log     *slog.Logger

	// rev is the key's revision as this manager last read or wrote it (0:
	// none). Only load and the writer touch it, one after the other, and
	// close after the writer ended.
	rev uint64

	mu      sync.Mutex
	stop    chan struct{} // closed by close; nil before start
	stopped chan struct{} // closed when the writer ends
}

// load starts the tally from the stored counts. A stored value no manager
// wrote is refused, logged and counted (RefusedPoolCounts): the counts
// start at zero and the next write replaces it.
func (s *countStore) load(ctx context.Context) error {
	key := countsKey(s.node)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	data, rev, err := s.store.Get(ctx, key)
	switch {
	case errors.Is(err, ErrStoreNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("lease: reading the pool counts: %w", err)
	}
	s.rev = rev
	stored, err := parseCounts(data)
	if err != nil {
		s.check.count(RefusedPoolCounts)
		s.log.Warn("refusing stored pool counts no manager wrote; counting from zero", "key", key, "why", echo.Clip(err.Error()))
		return nil
	}
	s.tally.restore(stored)
	return nil
}

// start runs the writer until close.
func (s *countStore) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go s.run(s.stop, s.stopped)
}

func (s *countStore) run(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(CountsInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.write()
		}
	}
}

// close stops the writer, if it runs, and writes what it has not: after
// the manager's last event, so a successor carries on from every count.
// A fenced manager writes nothing.
func (s *countStore) close() {
	s.mu.Lock()
	stop, stopped := s.stop, s.stopped
	s.stop = nil
	s.mu.Unlock()
	if stop == nil {
		return // never started, or closed
	}
	close(stop)
	<-stopped
	s.write()
}

// write stores the counts if they changed since the last write.
func (s *countStore) write() {
	counts, change, ok := s.tally.due()
	if !ok {
		return
	}
	key := countsKey(s.node)
	counts.Manager, counts.Term = s.lead.instance, s.lead.term()
	data, err := json.Marshal(counts)
	if err != nil {
		s.log.Error("encoding the pool counts", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	// Renew without a TTL: a write expecting the revision last seen.
	rev, err := s.store.Renew(ctx, key, data, 0, s.rev)
	switch {
	case err == nil:
		s.rev = rev
		s.tally.wrote(change)
	case fencedOut(err):
		// The term is over: the successor carries on from the last write.
	case errors.Is(err, ErrStoreRevision):
		s.moved(ctx, key, data, change)
	default:
		s.log.Warn("writing the pool counts failed; trying again in a second", "key", key, "err", err)
	}
}

// moved learns who wrote the counts since this manager last did: a later
// term deposes it; anything else is replaced at the next write. A deleted
// key (by an operator) is written again at once.
func (s *countStore) moved(ctx context.Context, key string, data []byte, change uint64) {
	stored, rev, err := s.store.Get(ctx, key)
	switch {
	case errors.Is(err, ErrStoreNotFound):
		if rev, err = s.store.Put(ctx, key, data); err == nil {
			s.rev = rev
			s.tally.wrote(change)
		}
		return
	case err != nil:
		s.log.Warn("reading the pool counts after a conflicting write", "key", key, "err", err)
		return
	}
	if v, err := parseCounts(stored); err == nil && s.lead.later(key, v.Term) {
		return // deposed: nothing more is written
	}
	s.log.Warn("the pool counts were written by another manager of this term or an earlier one; this manager's replace them", "key", key)
	s.rev = rev
}
