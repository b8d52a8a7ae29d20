package manager

import (
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
func (m *Manager) FillHistory(n int) {
	now := time.Now()
	for i := n - 1; i >= 0; i-- {
		m.disc.hist.record(m.poolPoints(now.Add(-time.Duration(i) * lease.HistoryStep)))
	}
}
