package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
)

// Code is a wire error code. Every error a lease manager sends carries one,
// so executors in any language can branch on it; docs/protocol.md lists them.
type Code string

const (
	CodeBadRequest      Code = "bad_request"      // malformed JSON, missing or invalid field
	CodeUnknownPool     Code = "unknown_pool"     // no such pool on this node
	CodeInvalidSlots    Code = "invalid_slots"    // slots <= 0
	CodeExceedsCapacity Code = "exceeds_capacity" // slots > the pool's capacity: could never be granted
	CodeWaitExpired     Code = "wait_expired"     // the request's wait deadline passed while it was queued
	CodeQueueFull       Code = "queue_full"       // the pool's queue is at its limit; retry after retry_after_ms
	CodeWouldWait       Code = "would_wait"       // a no_wait (try) acquire that could not be granted at once
	CodeCancelled       Code = "cancelled"        // the queued request was cancelled by its holder
	// CodeDropped: the request waited in a pool whose full queue drops its
	// oldest waiter (POOL_ON_FULL=<pool>=drop_oldest), and a newer request
	// took its place.
	CodeDropped Code = "dropped"
	// CodeHolderDisconnected: the holder's connection closed and the grace
	// passed (fast release): its lease was freed, or its queued request
	// dropped.
	CodeHolderDisconnected Code = "holder_disconnected"
	CodeLeaseNotFound      Code = "lease_not_found" // no live lease with that id (released, expired, never granted)
	CodeTokenMismatch      Code = "token_mismatch"  // the token does not match the lease's fencing token
	CodeConflict           Code = "conflict"        // the request id is in use by another holder
	// CodeTooManyAttempts: the requester's connection presented too many
	// wrong secrets lately (16 within a minute; docs/protocol.md, section
	// 4), so a request that would be checked against a secret is refused
	// without the check until retry_after_ms.
	CodeTooManyAttempts Code = "too_many_attempts"
	CodePoolBusy        Code = "pool_busy"   // a resize would remove a pool that has holders or waiters
	CodeUnavailable     Code = "unavailable" // the manager could not reach its store or is shutting down; retry
	CodeInternal        Code = "internal"    // a bug; please report
)

// Error is a lease error with a wire code. Compare with errors.Is against
// the Err* sentinels, which match by code whatever the message.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// RetryAfterMs hints when to retry a queue_full refusal, or a
	// would_wait one from a pool with a start rate (the earliest the rate
	// lets the request in); on too_many_attempts, when the connection's
	// window of wrong secrets ends.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

func (e *Error) Error() string {
	s := "lease: " + string(e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfterMs > 0 {
		s += fmt.Sprintf(" (retry after %v)", time.Duration(e.RetryAfterMs)*time.Millisecond)
	}
	return s
}

// Is matches any *Error with the same code, so errors.Is(err, ErrUnknownPool)
// holds for every unknown-pool error whatever its message.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrBadRequest      = &Error{Code: CodeBadRequest}
	ErrUnknownPool     = &Error{Code: CodeUnknownPool}
	ErrInvalidSlots    = &Error{Code: CodeInvalidSlots}
	ErrExceedsCapacity = &Error{Code: CodeExceedsCapacity}
	ErrWaitExpired     = &Error{Code: CodeWaitExpired}
	ErrQueueFull       = &Error{Code: CodeQueueFull}
	ErrWouldWait       = &Error{Code: CodeWouldWait}
	ErrCancelled       = &Error{Code: CodeCancelled}
	ErrDropped         = &Error{Code: CodeDropped}
	ErrLeaseNotFound   = &Error{Code: CodeLeaseNotFound}
	ErrTokenMismatch   = &Error{Code: CodeTokenMismatch}
	ErrConflict        = &Error{Code: CodeConflict}
	// ErrTooManyAttempts: this connection sent too many wrong secrets; a
	// renewal refused so is retried until the lease's deadline.
	ErrTooManyAttempts = &Error{Code: CodeTooManyAttempts}
	ErrPoolBusy        = &Error{Code: CodePoolBusy}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrInternal        = &Error{Code: CodeInternal}
)

// ErrLeaseLost is what Lease.Err reports after Done closed without a release:
// the lease expired, was refused on renewal, or renewals kept failing until
// the holder's own deadline.
var ErrLeaseLost = errors.New("lease: lease lost")

// ErrConnectionDropped is the cause of a fast-release lease's loss when its
// connection dropped and the lease could not move to a new connection in
// time (liveness.go): within 3/4 of the grace after the last PING the
// server answered on it.
var ErrConnectionDropped = errors.New("the lease's connection dropped and the lease could not move to a new one in time (fast release)")

// ErrConnectionSilent is the cause of a fast-release lease's loss when its
// connection stayed open but the server answered no PING on it for much
// longer than a restart or a stall lasts (liveness.go).
var ErrConnectionSilent = errors.New("the server did not answer on the lease's connection (fast release)")

// errorf builds an error whose message may quote client input: every
// string and error argument is bounded (clipArgs), so no request makes an
// answer or an event larger than a few hundred bytes.
func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, echo.Args(args)...)}
}
