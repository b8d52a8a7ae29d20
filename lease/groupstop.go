package lease

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The holder's side of a concurrency group's stop request. The manager
// answers the lease's renewals with a StopNotice once a newer request of
// the lease's group asked it to stop; it also publishes a stop_requested
// event, on which the lease renews at once instead of at its next TTL/3.
// The event only hastens the renewal: anyone who can publish on the
// events' subjects could forge one, and the renewal's answer, on the
// holder's own inbox, is what counts.

// WithGroup names the request's concurrency group (at most MaxGroupLen
// bytes). A group is scoped to the pool on the manager that serves it,
// the request's tenant (WithTenant) and the credential the client
// connected with. With CancelInProgress or CancelPending, a newer request
// of the group replaces the group's older ones.
func WithGroup(group string) AcquireOption {
	return func(o *acquireOptions) { o.group = group }
}

// CancelInProgress makes the request replace its group's queued requests
// (they end with ErrSuperseded) and ask the group's holders to stop
// (Lease.StopRequested): only the newest runs. It needs WithGroup.
func CancelInProgress() AcquireOption {
	return func(o *acquireOptions) { o.onGroup = OnGroupCancelInProgress }
}

// CancelPending makes the request replace its group's queued requests
// (they end with ErrSuperseded); the group's holders run on. It needs
// WithGroup.
func CancelPending() AcquireOption {
	return func(o *acquireOptions) { o.onGroup = OnGroupCancelPending }
}

// InGroup sets the group and its on_group value as the protocol names it
// (OnGroupCancelInProgress, OnGroupCancelPending or ""): WithGroup with
// CancelInProgress or CancelPending, for callers that carry the option as
// a value (a job spec).
func InGroup(group, onGroup string) AcquireOption {
	return func(o *acquireOptions) { o.group, o.onGroup = group, onGroup }
}

// CheckGroup checks an acquire's group and on_group as a manager does
// (bad_request naming what is wrong), nil if they are fine.
func CheckGroup(group, onGroup string) *Error {
	if len(group) > MaxGroupLen {
		return errorf(CodeBadRequest, "group is longer than %d bytes", MaxGroupLen)
	}
	if onGroup != "" && onGroup != OnGroupCancelInProgress && onGroup != OnGroupCancelPending {
		return errorf(CodeBadRequest, "on_group must be %q or %q, got %q", OnGroupCancelInProgress, OnGroupCancelPending, onGroup)
	}
	if onGroup != "" && group == "" {
		return errorf(CodeBadRequest, "on_group %q needs a group", onGroup)
	}
	return nil
}

// StopRequested is closed when a newer request of the lease's concurrency
// group asked its holder to stop (CancelInProgress): stop the work the
// lease guards, then Release. The lease stays held meanwhile; a holder
// that does not release is refused renewals (superseded) a bound after
// the request (the manager's GroupStopBound, 5 minutes by default), and
// then loses the lease at its deadline.
func (l *Lease) StopRequested() <-chan struct{} { return l.asked }

// StopErr is nil until StopRequested closes; then it wraps
// ErrStopRequested, naming the group and the request that asked.
func (l *Lease) StopErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notice == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStopRequested, l.notice.Message)
}

// askStop notes a renewal's stop request, once.
func (l *Lease) askStop(n *StopNotice) {
	if n == nil {
		return
	}
	l.askedOnce.Do(func() {
		l.mu.Lock()
		l.notice = n
		l.mu.Unlock()
		close(l.asked)
	})
}

// StopRequested is closed when any lease of the set was asked to stop
// (Lease.StopRequested).
func (s *LeaseSet) StopRequested() <-chan struct{} { return s.asked }

// StopErr is the first stop request among the set's leases, nil if none.
func (s *LeaseSet) StopErr() error {
	for _, l := range s.leases {
		if err := l.StopErr(); err != nil {
			return fmt.Errorf("lease %s (pool %s on node %s): %w", l.ID(), l.Pool(), l.Node(), err)
		}
	}
	return nil
}

// stopPokeEvery bounds how often events make one lease renew early: a
// forged stream of them costs its holder at most a renewal a second.
const stopPokeEvery = time.Second

// stopWatch is a Client's subscription to stop_requested events, held
// while it has leases with a group.
type stopWatch struct {
	mu     sync.Mutex
	sub    *nats.Subscription
	leases map[string]*Lease    // by lease id
	poked  map[string]time.Time // the latest poke of each
}

// watchStops has l renew at once when an event says it was asked to
// stop; only leases with a group can be. A subscription that fails leaves
// the renewals at TTL/3 to carry the request.
func (c *Client) watchStops(l *Lease) {
	if l.rec.Group == "" {
		return
	}
	w := &c.stops
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leases == nil {
		w.leases, w.poked = map[string]*Lease{}, map[string]time.Time{}
	}
	w.leases[l.rec.ID] = l
	if w.sub == nil {
		sub, err := c.nc.Subscribe(EventFilter(c.prefix, "", "", EventStopRequested), w.onEvents)
		if err == nil {
			w.sub = sub
		}
	}
}

// unwatchStops forgets l, and drops the subscription with the last lease.
func (c *Client) unwatchStops(l *Lease) {
	w := &c.stops
	w.mu.Lock()
	if w.leases[l.rec.ID] != l {
		w.mu.Unlock()
		return
	}
	delete(w.leases, l.rec.ID)
	delete(w.poked, l.rec.ID)
	var sub *nats.Subscription
	if len(w.leases) == 0 {
		sub, w.sub = w.sub, nil
	}
	w.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

// unhook drops the subscription (Client.Close).
func (w *stopWatch) unhook() {
	w.mu.Lock()
	sub := w.sub
	w.sub = nil
	w.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

// onEvents pokes the leases a batch of stop_requested events names.
func (w *stopWatch) onEvents(msg *nats.Msg) {
	evs, err := DecodeEvents(msg.Data)
	if err != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		l := w.leases[ev.LeaseID]
		if ev.Kind != EventStopRequested || l == nil || l.rec.Node != ev.Node || l.rec.Pool != ev.Pool || now.Sub(w.poked[ev.LeaseID]) < stopPokeEvery {
			continue
		}
		w.poked[ev.LeaseID] = now
		select {
		case l.poke <- struct{}{}:
		default:
		}
	}
}
