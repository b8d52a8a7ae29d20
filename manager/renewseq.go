package manager

import (
	"sync"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// maxRenewRereads bounds how often one renewal re-reads its record after a
// revision mismatch and tries again, before it reports the lease gone.
const maxRenewRereads = 4

// renewSeq runs a lease's renewals one at a time on the manager. A holder
// re-sends an unanswered renewal (renewRetry), so after a freeze or a store
// stall several attempts of one renewal arrive together; one at a time they
// do not race each other's compare-and-set, and an attempt that arrived
// before a write began and succeeded is answered with that write instead of
// writing again: at most two writes per burst.
type renewSeq struct {
	mu      sync.Mutex   // held across one renewal's store write
	started time.Time    // guarded by mu: when the last successful write began
	rec     lease.Record // guarded by mu: what that write stored
}

// lock waits for the renewal in flight, if any, to finish.
func (s *renewSeq) lock() { s.mu.Lock() }

func (s *renewSeq) unlock() { s.mu.Unlock() }

// tryLock takes the lock if no renewal is in flight, and reports whether
// it did. The handover holds it from its write until its outcome
// (handover.go), which may end on another goroutine.
func (s *renewSeq) tryLock() bool { return s.mu.TryLock() }

// since returns the record of a successful write that began no earlier than
// received. Answering a request with it is as safe as writing for it: the
// holder dates its deadline from a send before received, and the record
// lives at least TTL from that write. Call with the lock held.
func (s *renewSeq) since(received time.Time) (lease.Record, bool) {
	if s.started.IsZero() || s.started.Before(received) {
		return lease.Record{}, false
	}
	return s.rec, true
}

// stored notes a successful write that began at started. Call with the lock
// held.
func (s *renewSeq) stored(started time.Time, rec lease.Record) {
	s.started, s.rec = started, rec
}
