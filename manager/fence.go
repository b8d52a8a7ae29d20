package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Fence is a manager's licence to act, given by RunLeader for one term of
// leadership. Valid reports whether the term's leadership deadline (on the
// monotonic clock: the send time of the last successful leadership renewal
// plus LEADER_TTL minus a margin) is still ahead and the term was not
// ended. Term is the leadership key's revision when the term began: a
// JetStream stream sequence, so a later term always has a higher one.
//
// A Manager with a Fence checks Valid right before every store write and
// every reply or event, so a process that was frozen past its deadline and
// resumes writes, deletes and answers nothing (docs/guarantees.md,
// "Fencing").
type Fence interface {
	Valid() bool
	Term() uint64
}

// ErrFenced is returned, wrapped, by a store write that the fence refused:
// nothing was sent to the store.
var ErrFenced = errors.New("lease: fenced: this manager's leadership term is over")

// fencedStore refuses every write while ok reports false. Reads and
// watches pass: they change nothing.
type fencedStore struct {
	Store
	ok func() bool
}

func (s fencedStore) refused(op, key string) error {
	return fmt.Errorf("%w: %s %s not sent", ErrFenced, op, key)
}

func (s fencedStore) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	if !s.ok() {
		return 0, s.refused("create", key)
	}
	return s.Store.Create(ctx, key, value, ttl)
}

func (s fencedStore) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	if !s.ok() {
		return 0, s.refused("renew", key)
	}
	return s.Store.Renew(ctx, key, value, ttl, rev)
}

func (s fencedStore) Delete(ctx context.Context, key string, rev uint64) error {
	if !s.ok() {
		return s.refused("delete", key)
	}
	return s.Store.Delete(ctx, key, rev)
}

// SendCreate, SendRenew and SendDelete send their write if the term is
// valid and the Store can (EchoWriter); errNoEcho if it cannot.
func (s fencedStore) SendCreate(key string, value []byte, ttl time.Duration) error {
	ew, err := s.echoWriter("create", key)
	if err != nil {
		return err
	}
	return ew.SendCreate(key, value, ttl)
}

func (s fencedStore) SendRenew(key string, value []byte, ttl time.Duration, rev uint64) error {
	ew, err := s.echoWriter("renew", key)
	if err != nil {
		return err
	}
	return ew.SendRenew(key, value, ttl, rev)
}

func (s fencedStore) SendDelete(key string, rev uint64) error {
	ew, err := s.echoWriter("delete", key)
	if err != nil {
		return err
	}
	return ew.SendDelete(key, rev)
}

// echoWriter is the Store as an EchoWriter, if it is one and the term is
// valid.
func (s fencedStore) echoWriter(op, key string) (EchoWriter, error) {
	ew, ok := s.Store.(EchoWriter)
	if !ok {
		return nil, errNoEcho
	}
	if !s.ok() {
		return nil, s.refused(op, key)
	}
	return ew, nil
}

// errNoEcho: the Store writes only with an acknowledgement.
var errNoEcho = errors.New("lease: the store cannot send a write without its acknowledgement")

func (s fencedStore) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if !s.ok() {
		return 0, s.refused("put", key)
	}
	return s.Store.Put(ctx, key, value)
}

// leadership is the term this manager serves and what it has seen of
// later ones: the owner of the fence checks. Its state is atomic (deposed)
// or fixed at New, so it needs no lock: every write, reply and event asks
// serving, with or without the Manager's lock held, and it never calls back
// into the Manager.
type leadership struct {
	fence    Fence // nil for a standalone manager
	instance string
	log      *slog.Logger
	// mark is how this instance's name appears in the values it writes,
	// for telling its own writes from others' without decoding (ownMark).
	mark []byte
	// deposed is set, and done closed, once a record of a later
	// leadership term was seen: see Manager.Deposed.
	deposed atomic.Bool
	done    chan struct{}
}

func newLeadership(fence Fence, instance string, log *slog.Logger) *leadership {
	l := &leadership{fence: fence, instance: instance, log: log, done: make(chan struct{})}
	l.mark = ownMark(instance, l.term())
	return l
}

// serving reports whether this manager may write, delete, answer or
// publish now: it was not deposed, and its fence (if any) is valid.
func (l *leadership) serving() bool {
	return !l.deposed.Load() && (l.fence == nil || l.fence.Valid())
}

// term is this manager's leadership term, 0 without a fence.
func (l *leadership) term() uint64 {
	if l.fence == nil {
		return 0
	}
	return l.fence.Term()
}

// Deposed is closed when this manager saw a record written in a later
// leadership term than its own: another manager leads the node, and this
// one has stopped writing and answering. Its owner should Close it.
func (m *Manager) Deposed() <-chan struct{} { return m.lead.done }

// depose stops this manager from writing or answering anything more.
func (l *leadership) depose(key string, term uint64) {
	if l.deposed.CompareAndSwap(false, true) {
		l.log.Warn("a later leadership term wrote to this node; this manager is deposed and stops serving",
			"key", key, "term", l.term(), "later_term", term)
		close(l.done)
	}
}

// later deposes this manager if term, a stored record's, is later than its
// own, and reports whether it was. Without a fence no term is later.
func (l *leadership) later(key string, term uint64) bool {
	if l.fence == nil || term <= l.term() {
		return false
	}
	l.depose(key, term)
	return true
}

// wrote reports whether value carries this instance's mark: a write of its
// own, as decoding would show, without the cost of decoding. A string value
// cannot hold the unescaped mark, so no other record has it.
func (l *leadership) wrote(value []byte) bool { return bytes.Contains(value, l.mark) }

// fencedOut reports whether err is a write the fence refused: the term is
// over, so nothing more should be tried; the successor cleans up.
func fencedOut(err error) bool { return errors.Is(err, ErrFenced) }

// ownMark is how a manager's instance id and term appear in every value it
// writes: "term":<term>,"manager":"<instance>" ("term" only with a fence).
// The term comes first so that the instance string's closing quote ends
// the mark: a later term of the same instance does not match it.
func ownMark(instance string, term uint64) []byte {
	b := []byte{'{'}
	if term != 0 {
		b = appendUintField(b, "term", term)
	}
	return appendStringField(b, "manager", instance)[1:]
}

// checkWrite deposes this manager if ch, a write to a record it holds, was
// made by another instance in a later term (a successor renewing or
// replacing it).
func (l *leadership) checkWrite(ch Change) {
	if l.fence == nil || l.wrote(ch.Value) {
		return
	}
	var v struct {
		Term uint64 `json:"term"`
	}
	if json.Unmarshal(ch.Value, &v) == nil {
		l.later(ch.Key, v.Term)
	}
}

// mayDelete is the rule for destructive clean-ups: a grant another
// instance stored after this manager's term began (the caller saw it after
// the rebuild) may be deleted only by a manager whose fence is valid, and
// only if the record's term is lower than its own (no term counts as 0).
// Without a fence (a standalone manager) any other instance's grant is
// late. A record of a later term deposes this manager before it gets here.
func (l *leadership) mayDelete(key string, rec lease.Record) bool {
	if l.fence == nil {
		return rec.Manager != l.instance
	}
	if rec.Term >= l.term() {
		if rec.Manager != l.instance {
			l.log.Error("another manager instance wrote a grant in this manager's own term; leaving it alone", "key", key, "manager", rec.Manager, "term", rec.Term)
		}
		return false
	}
	return l.serving()
}
