package manager

import (
	"fmt"
	"strings"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/telemetry"
)

// pool is one named pool's state. Guarded by Manager.mu.
type pool struct {
	name string
	p    *pools.Pool
	// waiting holds every acquire that has no stored lease yet: queued, or
	// granted in memory with its record being written. Keyed by request id.
	waiting map[string]*request
	// unpersisted are queued requests not yet told they wait, nor given an
	// entry, in arrival order (see persistQueuedLocked); entryTimer tells
	// them once they have waited QueueEntryDelay.
	unpersisted []*request
	entryTimer  *time.Timer
}

// newPool makes a pool; a MaxQueue of 0 is rules.DefaultMaxQueue, unless
// the pool has no queue (FailFast): no pool's queue is unbounded.
func newPool(name string, capacity int64, o pools.Options) (*pool, error) {
	if o.MaxQueue == 0 && !o.FailFast {
		o.MaxQueue = rules.DefaultMaxQueue
	}
	pp, err := pools.NewWithOptions(capacity, o)
	if err != nil {
		return nil, fmt.Errorf("lease: pool %q: %w", name, err)
	}
	return &pool{name: name, p: pp, waiting: make(map[string]*request)}, nil
}

// request is an acquire from the moment it is accepted until its lease is
// stored, or it ends with an error. Guarded by Manager.mu.
type request struct {
	id, holder string
	secret     string
	tenant     string
	key        string // fairness key
	priority   int
	slots      int64
	units      int64 // the estimate, for a budget (budget.go)
	pool       *pool
	reply      string // where answers go; a retried acquire may move it
	conn       conn   // the connection its latest send came on, if said
	origin     origin // the connection its latest send came on, if the server vouched for it
	owner      string // the connection it first came on, as counted (connqueue.go)
	cred       string // the credential it first came with, as counted (connqueue.go)
	since      time.Time
	w          *pools.Waiter
	timer      *time.Timer // wait deadline, nil if none
	state      reqState
	// pollMs is the client's re-send promise (AcquireRequest.PollMs), and
	// lastSeen the unix ns of the latest send: see abandoned.
	pollMs, lastSeen int64
	// trace holds the acquire's spans (nil with tracing off). Once it is
	// granting, only the grant goroutine touches it.
	trace *telemetry.AcquireTrace
	// grantedAt is when its slots were granted in memory (startGrantLocked),
	// the record's granted_at: stamped under the lock in the step that took
	// them, so the stamps keep the grants' order and the rate's spacing
	// however late the grant goroutine runs.
	grantedAt time.Time

	// A request that has to wait is persisted as a queue entry under its
	// lease key, so a successor manager restores the queue in order.
	order     int64 // position in the node's enqueue order (queued_at)
	waitUntil int64 // wait deadline in unix ns, 0 if none
	entry     entry // its queue entry in the journal, if any

	// group, groupOwner and onGroup are its concurrency group, scope and
	// option; stop and stopAt a stop request that came while its grant
	// was being stored (group.go).
	group, groupOwner, onGroup string
	stop                       *lease.StopNotice
	stopAt                     time.Time
}

// reqState is where a request is on its way to a lease. A request leaves
// its pool's waiting map when it ends (granted and stored, refused,
// cancelled, expired or dropped); until then it is in one of these states.
type reqState uint8

const (
	// queued: accepted and waiting in its pool's queue for slots.
	queued reqState = iota
	// granting: its slots are taken in memory and its record is being
	// written; the holder hears of the grant once the store acknowledges.
	granting
	// grantCancelled: granting, and then cancelled (by its holder, or its
	// pool was removed): the lease is given back as soon as it is stored.
	grantCancelled
)

// waiting reports whether r still waits in its pool's queue: it has not
// ended and its slots are not granted.
func (r *request) waiting() bool { return r.pool.waiting[r.id] == r && r.state == queued }

// held is a live lease record. Guarded by Manager.mu.
type held struct {
	key       string
	rec       lease.Record
	rev       uint64 // latest stored revision, for conditional renew and delete
	pool      *pool  // nil if the record names a pool this node no longer has
	releasing bool   // a delete is in flight; that path frees the slots
	// releaseKind and releaseCode are the event kind and code of that
	// release: why the manager let the lease go (code "" for the holder's
	// own release); gone is closed once the record is gone and the slots
	// are free (freeLocked).
	releaseKind lease.EventKind
	releaseCode lease.Code
	gone        chan struct{}
	renewal     renewSeq
	// restored: counted from the store while rebuilding, not granted in
	// this term (see the retry in acquire.go).
	restored bool
	// settle is what its end settles in a budget (budget.go): the actual
	// its release gave, else nil for the estimate; settleGen, once its
	// release is under way, the budget write that must store it first.
	settle    *int64
	settleGen uint64
	// stop is the stop request of a newer request of its group, and
	// stopAt when the first came (group.go).
	stop   *lease.StopNotice
	stopAt time.Time
	// handedOver: its slots went back to its pool at its release, before
	// its record was gone (handover.go); next are the requests they went
	// to that wait for the record to go, started by freeLocked.
	handedOver bool
	next       []*pools.Waiter
}

// poolToken returns the pool token of a request subject
// <prefix>.<node>.<pool>.<verb>.
func poolToken(subject string) string {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return ""
	}
	s := subject[:i]
	return s[strings.LastIndexByte(s, '.')+1:]
}

func (r *request) poolRequest() pools.Request {
	return pools.Request{Slots: r.slots, Units: r.units, Priority: r.priority, Tenant: r.tenant, Key: r.key, Value: r}
}

// importedPollMs is the re-send promise of a request that crossed a
// service import without one (poll_ms 0): the import keeps the reply
// mapping of a multi-answer request 30 s (jetstream/accounts.go), so a
// client silent for longer could not hear its grant anyway. Without it, a
// request sent through the import and never again stayed queued after its
// client was gone, and was granted in its turn to nobody.
const importedPollMs = 30_000

// pollPromise is the re-send promise r's client made (poll_ms), or, for a
// request that came through an import (who is vouched for) with none,
// importedPollMs.
func pollPromise(pollMs int64, who requester) int64 {
	if pollMs == 0 && who.vouched {
		return importedPollMs
	}
	return pollMs
}

// abandoned reports whether r's client broke its promise to re-send r at
// least every pollMs: no send for 3 x pollMs + 1s, so three polls in a row
// were lost, or the client is gone.
func abandoned(r *request, now int64) bool {
	return r.pollMs > 0 && now-r.lastSeen > 3*r.pollMs*int64(time.Millisecond)+int64(time.Second)
}

// stopTimer stops r's wait deadline, if armed.
func (r *request) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// positionLocked is r's place in its pool's queue for a queued reply.
// Finding it walks the queue; on deep queues the reply goes without it
// (0) rather than cost O(depth) on every poll.
func positionLocked(r *request) int {
	if r.pool.p.Stats().QueuedRequests > maxPositionWalk {
		return 0
	}
	return r.pool.p.Position(r.w)
}

// maxPositionWalk bounds the queue depth up to which a poll is answered
// with the request's position.
const maxPositionWalk = 1024
