package lease

// PoolCounts are how a pool's requests and leases ended, counted by the
// node's managers from the events they publish (section 6 of
// docs/protocol.md) and kept in the pool bucket, so that they carry on
// across restarts and takeovers (manager/tally.go says what may be lost).
// Each event counts once, in exactly one field:
//
//   - Granted: granted events, leases granted and sent to their holder;
//   - Completed: released events without a code, leases their holder
//     released (or that were released for it: a forced resize);
//   - Failed: expired events (a TTL that lapsed: the holder stopped
//     renewing or lost touch) and released events with code
//     holder_disconnected (fast release after the holder's connection
//     closed);
//   - Rejected: rejected events with any code but dropped, acquires ended
//     by an error (queue_full, would_wait, wait_expired, bad_request, …);
//   - Dropped: rejected events with code dropped, waiters a drop_oldest
//     pool's full queue evicted for a newer request;
//   - Cancelled: cancelled events, queued requests and leases their holder
//     withdrew, and superseded events, queued requests a newer request of
//     their concurrency group replaced.
type PoolCounts struct {
	Granted   uint64 `json:"granted"`
	Completed uint64 `json:"completed"`
	Failed    uint64 `json:"failed"`
	Rejected  uint64 `json:"rejected"`
	Dropped   uint64 `json:"dropped"`
	Cancelled uint64 `json:"cancelled"`
}

// Outcome names one field of PoolCounts: the outcome label of
// lease_pool_outcomes_total.
type Outcome string

const (
	OutcomeGranted   Outcome = "granted"
	OutcomeCompleted Outcome = "completed"
	OutcomeFailed    Outcome = "failed"
	OutcomeRejected  Outcome = "rejected"
	OutcomeDropped   Outcome = "dropped"
	OutcomeCancelled Outcome = "cancelled"
)

// Outcomes lists every Outcome in PoolCounts' field order.
var Outcomes = []Outcome{OutcomeGranted, OutcomeCompleted, OutcomeFailed, OutcomeRejected, OutcomeDropped, OutcomeCancelled}

// OutcomeOf is the outcome an event of kind with code counts as, and false
// for an event that counts as none (requested, queued, resized, stopping).
func OutcomeOf(kind EventKind, code Code) (Outcome, bool) {
	switch kind {
	case EventGranted:
		return OutcomeGranted, true
	case EventReleased:
		if code == CodeHolderDisconnected {
			return OutcomeFailed, true
		}
		return OutcomeCompleted, true
	case EventExpired:
		return OutcomeFailed, true
	case EventRejected:
		if code == CodeDropped {
			return OutcomeDropped, true
		}
		return OutcomeRejected, true
	case EventCancelled, EventSuperseded:
		return OutcomeCancelled, true
	}
	return "", false
}

// Field is c's field of outcome o, nil for an unknown o.
func (c *PoolCounts) Field(o Outcome) *uint64 {
	switch o {
	case OutcomeGranted:
		return &c.Granted
	case OutcomeCompleted:
		return &c.Completed
	case OutcomeFailed:
		return &c.Failed
	case OutcomeRejected:
		return &c.Rejected
	case OutcomeDropped:
		return &c.Dropped
	case OutcomeCancelled:
		return &c.Cancelled
	}
	return nil
}
