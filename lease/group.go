package lease

import "errors"

// Concurrency groups (docs/protocol.md, "Concurrency groups"): a request
// may name a group, and a new request of a group may replace the group's
// queued requests (OnGroupCancelPending), or those and ask the group's
// holders to stop as well (OnGroupCancelInProgress): only the newest runs.

// Values of AcquireRequest.OnGroup.
const (
	OnGroupCancelInProgress = "cancel_in_progress"
	OnGroupCancelPending    = "cancel_pending"
)

// MaxGroupLen bounds AcquireRequest.Group, as MaxKeyLen the key.
const MaxGroupLen = 128

// CodeSuperseded: a newer request of the request's concurrency group
// replaced it while it waited (the message names the group and the
// request); on a renewal, the lease was asked to stop by such a request
// long enough ago (the manager's GroupStopBound) that its renewals are refused.
const CodeSuperseded Code = "superseded"

// ErrSuperseded matches every superseded error.
var ErrSuperseded = &Error{Code: CodeSuperseded}

// Event kinds of concurrency groups.
const (
	// EventStopRequested: a newer request of the lease's group asked its
	// holder to stop (lease_id, group, request_id the newer request).
	EventStopRequested EventKind = "stop_requested"
	// EventSuperseded: a queued request left its queue, replaced by a
	// newer request of its group (code superseded).
	EventSuperseded EventKind = "superseded"
)

// StopNotice is a renewal's answer's word that the lease's holder is asked
// to stop its work and release: a newer request of its group came.
type StopNotice struct {
	Code    Code   `json:"code"`
	Group   string `json:"group"`
	By      string `json:"by"` // the request id of the newer request
	Message string `json:"message"`
}

// ErrStopRequested is what a stop request's error wraps (Lease.StopErr).
var ErrStopRequested = errors.New("lease: a newer request of its concurrency group asked the holder to stop")
