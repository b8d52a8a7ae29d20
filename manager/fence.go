package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func (s fencedStore) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if !s.ok() {
		return 0, s.refused("put", key)
	}
	return s.Store.Put(ctx, key, value)
}

// serving reports whether this manager may write, delete, answer or
// publish now: it was not deposed, and its fence (if any) is valid.
func (m *Manager) serving() bool {
	return !m.deposed.Load() && (m.cfg.Fence == nil || m.cfg.Fence.Valid())
}

// term is this manager's leadership term, 0 without a fence.
func (m *Manager) term() uint64 {
	if m.cfg.Fence == nil {
		return 0
	}
	return m.cfg.Fence.Term()
}

// Deposed is closed when this manager saw a record written in a later
// leadership term than its own: another manager leads the node, and this
// one has stopped writing and answering. Its owner should Close it.
func (m *Manager) Deposed() <-chan struct{} { return m.deposedCh }

// depose stops this manager from writing or answering anything more.
func (m *Manager) depose(key string, term uint64) {
	if m.deposed.CompareAndSwap(false, true) {
		m.log.Warn("a later leadership term wrote to this node; this manager is deposed and stops serving",
			"key", key, "term", m.term(), "later_term", term)
		close(m.deposedCh)
	}
}

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

// checkTermLocked deposes this manager if ch, a write to a record it
// holds, was made by another instance in a later term (a successor
// renewing or replacing it).
func (m *Manager) checkTermLocked(ch Change) {
	if m.cfg.Fence == nil || bytes.Contains(ch.Value, m.ownMark) {
		return
	}
	var v struct {
		Term uint64 `json:"term"`
	}
	if json.Unmarshal(ch.Value, &v) == nil && v.Term > m.term() {
		m.depose(ch.Key, v.Term)
	}
}

// mayDeleteLocked is the rule for destructive clean-ups: a grant another
// instance stored after this manager's term began (the caller saw it after
// the rebuild) may be deleted only by a manager whose fence is valid, and
// only if the record's term is lower than its own (no term counts as 0).
// Without a fence (a standalone manager) any other instance's grant is
// late. A record of a later term deposes this manager before it gets here.
func (m *Manager) mayDeleteLocked(key string, rec lease.Record) bool {
	if m.cfg.Fence == nil {
		return rec.Manager != m.cfg.Instance
	}
	if rec.Term >= m.term() {
		if rec.Manager != m.cfg.Instance {
			m.log.Error("another manager instance wrote a grant in this manager's own term; leaving it alone", "key", key, "manager", rec.Manager, "term", rec.Term)
		}
		return false
	}
	return m.serving()
}
