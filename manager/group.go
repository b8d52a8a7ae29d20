package manager

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// Concurrency groups (docs/protocol.md, "Concurrency groups"). A request
// may name a group; one with on_group cancel_pending replaces the group's
// queued requests (they end superseded), one with cancel_in_progress also
// asks the group's holders to stop: their renewals are answered with a
// StopNotice, a stop_requested event tells them at once, and renewals
// are refused superseded once GroupStopBound has passed since. A holder's
// record is never deleted to make room: its slots free only by its
// release or its expiry, so slots never exceed capacity and work never
// outlives its lease.
//
// A group is scoped to its pool on this manager, the request's tenant, and
// the credential the server vouches the request came with (requester.go):
// a tenant is only what a request says of itself, so the credential's
// digest (group_owner) is what keeps one credential's requests from
// stopping or replacing another's, whatever tenant and group they name.
// Where the server vouches for no credential (holders in the managers'
// account, which may delete any record anyway), the owner is empty, and
// such requests share their groups with each other only.

// maxOnGroupLen bounds on_group as decoded; validGroup names the values.
const maxOnGroupLen = 64

// DefaultGroupStopBound is Config.GroupStopBound's default.
const DefaultGroupStopBound = 5 * time.Minute

// groupOwner is the digest of the credential who came with, stored in the
// records of a group instead of the credential: "" without a group, or if
// the server vouches for no credential.
func groupOwner(who requester, group string) string {
	if who.cred == "" || group == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(who.cred))
	return hex.EncodeToString(sum[:8])
}

// validGroup checks an acquire's group fields.
func validGroup(req *lease.AcquireRequest) *lease.Error {
	return lease.CheckGroup(req.Group, req.OnGroup)
}

// groupOf is a request's or lease's group with its scope.
type groupOf struct {
	pool                 *pool
	owner, tenant, group string
}

func (r *request) groupOf() groupOf {
	return groupOf{pool: r.pool, owner: r.groupOwner, tenant: r.tenant, group: r.group}
}

func (h *held) groupOf() groupOf {
	return groupOf{pool: h.pool, owner: h.rec.GroupOwner, tenant: h.rec.Tenant, group: h.rec.Group}
}

// groups keeps the concurrency groups' rules. It holds no state of its
// own (the stop requests live on the requests and leases it marks), and
// is called with the Manager's lock held, which guards what it reads.
type groups struct {
	node   string
	bound  time.Duration // Config.GroupStopBound
	leases *leaseTable
	out    *outbox
}

// arrivedLocked applies r's on_group, r being committed to its pool
// (granted or queued): it has leave end the older queued requests of its
// group, which r replaces, and, with cancel_in_progress, asks the group's
// holders to stop.
func (gs *groups) arrivedLocked(r *request, leave func(q *request, e *lease.Error)) {
	if r.group == "" || r.onGroup == "" {
		return
	}
	g := r.groupOf()
	var replaced []*request
	for _, q := range r.pool.waiting {
		if q == r || q.groupOf() != g {
			continue
		}
		if q.state == queued {
			replaced = append(replaced, q)
		} else if r.onGroup == lease.OnGroupCancelInProgress {
			// Being granted: it is a holder as soon as it is stored.
			q.stop = gs.notice(r)
			q.stopAt = time.Now()
		}
	}
	for _, q := range replaced {
		if q.waiting() {
			leave(q, errorf(lease.CodeSuperseded, "superseded in group %q by request %q", r.group, r.id))
		}
	}
	if r.onGroup == lease.OnGroupCancelInProgress {
		gs.askHoldersLocked(r)
	}
}

// restoredLocked asks again, for r restored from its queue entry, the
// holders its cancel_in_progress asked: a stop request lives in the
// memory of the manager that took it.
func (gs *groups) restoredLocked(r *request) {
	if r.group != "" && r.onGroup == lease.OnGroupCancelInProgress {
		gs.askHoldersLocked(r)
	}
}

// askHoldersLocked asks every holder of r's group to stop.
func (gs *groups) askHoldersLocked(r *request) {
	g := r.groupOf()
	now := time.Now()
	for _, h := range gs.leases.byKey {
		if h.releasing || h.pool == nil || h.rec.Group == "" || h.groupOf() != g {
			continue
		}
		if h.stop == nil {
			h.stopAt = now
		}
		h.stop = gs.notice(r)
		gs.emitStop(h)
	}
}

// notice is what the holders r asks to stop are told.
func (gs *groups) notice(r *request) *lease.StopNotice {
	return &lease.StopNotice{Code: lease.CodeSuperseded, Group: r.group, By: r.id,
		Message: "request " + quote(r.id) + " of group " + quote(r.group) + " on node " + gs.node + " cancels the group's run in progress"}
}

// emitStop publishes h's stop_requested event.
func (gs *groups) emitStop(h *held) {
	gs.out.emit(h.pool, lease.Event{Kind: lease.EventStopRequested, RequestID: h.stop.By, LeaseID: h.rec.ID, Holder: h.rec.Holder, Slots: h.rec.Slots,
		Tenant: h.rec.Tenant, Key: h.rec.Key, Group: h.rec.Group, Token: h.rec.Token, Code: lease.CodeSuperseded, Message: h.stop.Message})
}

// grantedLocked carries a stop request that came while r's grant was
// being stored over to its lease h, and tells the holder at once.
func (gs *groups) grantedLocked(r *request, h *held) {
	if r.stop == nil {
		return
	}
	h.stop, h.stopAt = r.stop, r.stopAt
	gs.emitStop(h)
}

// refusedLocked refuses a renewal of h once it was asked to stop longer
// than the bound ago: the lease then ends at its deadline.
func (gs *groups) refusedLocked(h *held) *lease.Error {
	if h.stop == nil || time.Since(h.stopAt) < gs.bound {
		return nil
	}
	return errorf(lease.CodeSuperseded, "lease %q was asked to stop %s ago (group %q, request %q) and was not released; its renewals are refused",
		h.rec.ID, time.Since(h.stopAt).Round(time.Second), h.rec.Group, h.stop.By)
}

// quote quotes a client-chosen value for a message, bounded.
func quote(s string) string { return strconv.Quote(echo.Clip(s)) }
