package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/pools"
)

// A pool's budget window (the units settled in its last window) is kept
// in the pool bucket under budgetKey, beside the counts, written through
// the fence and expecting the revision this manager last read or wrote,
// as tallystore.go writes the counts. Unlike the counts it may not lag:
// units a successor does not see would be spent twice. So the rule is
// that a lease's units are always stored somewhere a successor reads:
// in its record (the estimate, reserved again by the rebuild) until the
// window holding its settlement is stored, and only then is the record
// deleted (release.go). A crash in between counts them twice, never
// zero times. Concurrent releases of a pool share one write (pend,
// flushUntil): each waits for a write made after its settlement was
// pending.
//
// The one end no write can precede is an expiry: the store removes the
// record at its TTL. The manager that sees it settles the estimate and
// writes the window at once (dirty); a crash in that moment loses that
// lease's estimate (docs/guarantees.md, "Budgets").

// budgetKey is where node's window of pool is stored: node ids and pool
// names are single tokens, so it collides with neither countsKey nor
// deltaKey.
func budgetKey(node, pool string) string { return node + ".budget." + pool }

// storedBudget is the stored form of a window, marked with the manager
// instance and term that wrote it.
type storedBudget struct {
	Manager string        `json:"manager"`
	Term    uint64        `json:"term,omitempty"`
	Spent   []pools.Spent `json:"spent"`
}

// maxStoredSlices bounds the slices a stored window may hold: a window
// keeps 61, and the pending settlements of its releases add theirs.
const maxStoredSlices = 4096

func parseBudget(data []byte) (storedBudget, error) {
	var s storedBudget
	if err := decodeStored(data, &s, &s.Manager); err != nil {
		return s, err
	}
	if len(s.Spent) > maxStoredSlices {
		return s, fmt.Errorf("holds %d slices, more than %d", len(s.Spent), maxStoredSlices)
	}
	return s, nil
}

// budgetStore reads and writes the windows of a node's budget pools. A nil
// budgetStore (no PoolStore) keeps them in memory only.
type budgetStore struct {
	store   Store // Config.PoolStore, fenced
	node    string
	lead    *leadership
	timeout time.Duration
	log     *slog.Logger
	ops     *sync.WaitGroup // Manager.ops: the writes dirty starts
	ctx     context.Context // Manager.ctx: ends them

	mu   sync.Mutex
	keys map[string]*budgetWindow // by pool name
}

// budgetWindow is one pool's stored window.
type budgetWindow struct {
	write   sync.Mutex // held across a write: one at a time
	rev     uint64     // the revision last read or written; under write
	written uint64     // the gen the last write covered; under write

	gen     atomic.Uint64 // bumped after each settlement to store
	mu      sync.Mutex
	pending map[*held]pools.Spent // settlements not yet in the pool's window
}

func (s *budgetStore) window(pool string) *budgetWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]*budgetWindow)
	}
	w := s.keys[pool]
	if w == nil {
		w = &budgetWindow{pending: make(map[*held]pools.Spent)}
		s.keys[pool] = w
	}
	return w
}

// load adds the stored windows to the budget pools, before the rebuild.
// A stored value no manager wrote is refused and logged, and its pool's
// window starts full (its whole budget spent now): what was spent is
// unknown, and a guess could only over-spend.
func (s *budgetStore) load(ctx context.Context, ps map[string]*pool) error {
	if s == nil {
		return nil
	}
	for name, p := range ps {
		if !p.p.HasBudget() {
			continue
		}
		key := budgetKey(s.node, name)
		gctx, cancel := context.WithTimeout(ctx, s.timeout)
		data, rev, err := s.store.Get(gctx, key)
		cancel()
		switch {
		case errors.Is(err, ErrStoreNotFound):
			continue
		case err != nil:
			return fmt.Errorf("lease: reading the budget of pool %q: %w", name, err)
		}
		s.window(name).rev = rev
		stored, err := parseBudget(data)
		if err != nil {
			s.log.Warn("refusing a stored budget window no manager wrote; counting the budget as spent for one window", "key", key, "why", echo.Clip(err.Error()))
			st := p.p.Stats()
			full, _ := p.p.Settling(st.BudgetLimit)
			stored.Spent = []pools.Spent{full}
		}
		p.p.RestoreSpent(stored.Spent)
	}
	return nil
}

// pend notes h's settlement s, to be stored before h's record is deleted,
// and returns the gen a write must cover. 0 without a store.
func (s *budgetStore) pend(p *pool, h *held, sp pools.Spent) uint64 {
	if s == nil {
		return 0
	}
	w := s.window(p.name)
	w.mu.Lock()
	w.pending[h] = sp
	w.mu.Unlock()
	return w.gen.Add(1)
}

// settled forgets h's pending settlement: the pool's window holds it now.
func (s *budgetStore) settled(p *pool, h *held) {
	if s == nil {
		return
	}
	w := s.window(p.name)
	w.mu.Lock()
	delete(w.pending, h)
	w.mu.Unlock()
}

// dirty stores p's window soon: a settlement reached it with no write
// before (an expiry). Unless write, only the next write (close) stores it:
// a closing manager starts no writes of its own.
func (s *budgetStore) dirty(p *pool, write bool) {
	if s == nil {
		return
	}
	gen := s.window(p.name).gen.Add(1)
	if !write {
		return
	}
	s.ops.Add(1)
	go func() {
		defer s.ops.Done()
		s.flushUntil(s.ctx, p, gen)
	}()
}

// close writes, once, each window a settlement changed since its last
// write: the expiries seen while the manager was closing. After the watch
// stopped, so no settlement comes after it; a fenced manager writes nothing.
func (s *budgetStore) close(ps map[string]*pool) {
	if s == nil {
		return
	}
	for name, p := range ps {
		s.mu.Lock()
		w := s.keys[name]
		s.mu.Unlock()
		if w == nil {
			continue
		}
		if err := s.flush(p, w.gen.Load()); err != nil && !fencedOut(err) {
			s.log.Warn("storing a budget window as the manager stops", "pool", name, "err", err)
		}
	}
}

// flushUntil writes p's window until a write covers gen, and reports
// whether one did: false once this manager's term is over or ctx ends.
func (s *budgetStore) flushUntil(ctx context.Context, p *pool, gen uint64) bool {
	if s == nil {
		return true
	}
	backoff := 50 * time.Millisecond
	for {
		err := s.flush(p, gen)
		if err == nil {
			return true
		}
		if fencedOut(err) {
			return false
		}
		s.log.Warn("storing a budget window failed; retrying", "pool", p.name, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// flush writes p's window, its pending settlements included, unless a
// write since gen was bumped already covers it.
func (s *budgetStore) flush(p *pool, gen uint64) error {
	w := s.window(p.name)
	w.write.Lock()
	defer w.write.Unlock()
	if w.written >= gen {
		return nil
	}
	covers := w.gen.Load()
	// Pending first, then the pool's window: a settlement that moves from
	// one to the other meanwhile (the pool first) is in at least one.
	w.mu.Lock()
	spent := make([]pools.Spent, 0, len(w.pending)+budgetSlicesHint)
	for _, sp := range w.pending {
		spent = append(spent, sp)
	}
	w.mu.Unlock()
	spent = append(spent, p.p.Spent()...)
	data, err := json.Marshal(storedBudget{Manager: s.lead.instance, Term: s.lead.term(), Spent: spent})
	if err != nil {
		return err
	}
	key := budgetKey(s.node, p.name)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	for range 3 {
		rev, err := s.store.Renew(ctx, key, data, 0, w.rev)
		if !errors.Is(err, ErrStoreRevision) {
			if err == nil {
				w.rev, w.written = rev, covers
			}
			return err
		}
		// Written by another manager since: a later term deposes this one;
		// anything else is replaced (it began from the stored window).
		stored, rev, err := s.store.Get(ctx, key)
		switch {
		case errors.Is(err, ErrStoreNotFound):
			if rev, err = s.store.Put(ctx, key, data); err == nil {
				w.rev, w.written = rev, covers
			}
			return err
		case err != nil:
			return err
		}
		if v, err := parseBudget(stored); err == nil && s.lead.later(key, v.Term) {
			return fmt.Errorf("%w: budget window %s written by a later term", ErrFenced, key)
		}
		w.rev = rev
	}
	return fmt.Errorf("budget window %s: moved under every write", key)
}

// budgetSlicesHint is about the slices a window keeps.
const budgetSlicesHint = 61
