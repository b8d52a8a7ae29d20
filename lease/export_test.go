package lease

import "time"

// SetQueueEntryTTL shortens the TTL of queue entries without a wait
// deadline for one test, returning what restores it. Not for parallel tests.
func SetQueueEntryTTL(d time.Duration) (restore func()) {
	old := queueEntryTTL
	queueEntryTTL = d
	return func() { queueEntryTTL = old }
}
