package manager

import (
	"slices"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// SetQueueEntryTTL shortens the TTL of queue entries without a wait
// deadline for one test, returning what restores it. Not for parallel tests.
func SetQueueEntryTTL(d time.Duration) (restore func()) {
	old := queueEntryTTL
	queueEntryTTL = d
	return func() { queueEntryTTL = old }
}

// FillHistory samples every pool n times, as an hour of HistoryStep
// samples would, ending now.
func FillHistory(m *Manager, n int) {
	now := time.Now()
	for i := n - 1; i >= 0; i-- {
		m.disc.hist.record(m.poolPoints(now.Add(-time.Duration(i) * lease.HistoryStep)))
	}
}

// QueueEntryDecided reports whether the manager has written, or set out
// to write, a queue entry for the waiting request id of pool. The decision
// is made under the Manager's lock as the request is queued, so a test
// can look as soon as the request is counted queued, rather than wait for
// a write that must not come.
func QueueEntryDecided(m *Manager, pool, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[pool]
	if p == nil {
		return false
	}
	r := p.waiting[id]
	return r != nil && r.entry.has
}

// EntryWriters returns how many queue entry writers run, and how many
// entries wait for one. Both are set under the journal's lock as requests
// are queued; writers is 0 only once every write they took has ended.
func EntryWriters(m *Manager) (writers, waiting int) {
	m.journal.mu.Lock()
	defer m.journal.mu.Unlock()
	return m.journal.writers, len(m.journal.queue)
}

// HeardClose reports whether an advisory naming connection id of server
// has been heard and not yet settled (or forgotten, 30 s on). The
// advisories are handled one at a time, in order: once the last of a
// burst is heard, every one before it has been handled.
func HeardClose(m *Manager, server string, id uint64) bool {
	m.gone.mu.Lock()
	defer m.gone.mu.Unlock()
	_, ok := m.gone.heard[conn{server, id}]
	return ok
}

// CloseChecks returns how many close checks are in flight and how many
// frees are armed.
func CloseChecks(m *Manager) (checking, armed int) {
	m.gone.mu.Lock()
	defer m.gone.mu.Unlock()
	return len(m.gone.checking), len(m.gone.timers)
}

// CloseCheckWaits are the pauses before each question of a close check
// (closecheck.go).
func CloseCheckWaits() []time.Duration { return slices.Clone(closeCheckWaits) }
