package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// A request that has to wait is stored as a queue entry under the key its
// lease will have. The grant then replaces the entry (conditional on its
// revision), and a cancel or an expired wait deletes it. A manager that
// starts, after a restart or taking over from another instance, finds the
// entries while rebuilding and queues them again in their original order
// (restoreQueue), so queued requests survive a failover in FIFO order; their
// grants go to the reply subjects stored with them, and a client's next poll
// (same request id) finds its request where it was.
//
// The entry is written asynchronously: the holder is told it is queued at
// once. A manager that dies before the write is stored loses that one
// entry; the client's next poll queues it again, at the tail. Which queued
// requests get an entry, and when, is queue.go's business; writing and
// deleting them is the journal's.

// queueEntry is what a stored queue entry adds to the Record fields.
type queueEntry struct {
	Queued    bool      `json:"queued,omitempty"`
	ReplyTo   string    `json:"reply_to,omitempty"`
	QueuedAt  int64     `json:"queued_at,omitempty"` // enqueue order: unix ns, strictly increasing per manager
	WaitUntil time.Time `json:"wait_until,omitzero"`
	PollMs    int64     `json:"poll_ms,omitempty"` // the client's re-send promise
	// OnGroup is its concurrency group's option (group.go).
	OnGroup string `json:"on_group,omitempty"`
}

// storedValue is any value of the lease bucket: a lease record, or a queue
// entry when Queued is set.
type storedValue struct {
	lease.Record
	queueEntry
}

type restoredReq struct {
	entry storedValue
	rev   uint64
}

// entry is a request's queue entry in the journal.
type entry struct {
	has     bool           // written or being written; guarded by Manager.mu
	writing sync.WaitGroup // the write in flight, if any
	rev     uint64         // revision of the stored entry, 0 if none; published by writing.Done
}

// await waits until the entry's write, if any, has ended and returns the
// entry's revision (0 if none was stored).
func (e *entry) await() uint64 {
	if !e.has {
		return 0
	}
	e.writing.Wait()
	return e.rev
}

// maxEntryWriters bounds the queue entry writes in flight. A burst of
// queued requests waits in journal.queue, a pointer each, rather than in a
// goroutine each: the runtime keeps a goroutine's descriptor for good once
// it has existed, so 100k goroutines at once leave ~40 MB behind.
const maxEntryWriters = 32

// journal keeps the queue entries of one manager: which queued requests
// get one and when (queue.go), and writing and deleting them. It owns its
// writer goroutines and every store call it makes: wait returns once they
// have all ended, which they do soon after ctx ends.
//
// Which requests get an entry and when changes with the pools' queues, so
// its ...Locked methods are called with the Manager's lock (m.mu) held;
// its writers' queue has a lock of its own (mu), taken after m.mu. Its
// goroutines never take the Manager's lock: what they need of the
// Manager's state they ask of entryOf and due, which take it themselves.
// It calls nothing else of the Manager's but the outbox.
type journal struct {
	store   Store
	node    string
	ttl     time.Duration // the lease TTL
	timeout time.Duration
	delay   time.Duration // Config.QueueEntryDelay: see persistQueuedLocked
	lead    *leadership   // the instance and term that mark an entry
	out     *outbox       // tells holders they wait
	log     *slog.Logger
	ctx     context.Context // ends when the manager closes
	// entryOf returns what to store for r, if it still waits (entryLocked
	// under the Manager's lock); due tells and persists p's requests that
	// waited the delay (tellDueLocked under it).
	entryOf func(r *request) (storedValue, time.Duration, bool)
	due     func(p *pool)

	mu      sync.Mutex // guards queue and writers
	queue   []*request // entries waiting for a writer
	writers int        // writer goroutines running

	lastOrder int64 // guarded by the Manager's lock; see nextOrderLocked
	ops       sync.WaitGroup
}

// addLocked has r's queue entry written in the background; a grant waits
// for it (entry.await) and writes over it.
func (j *journal) addLocked(r *request) {
	r.entry.has = true
	r.entry.writing.Add(1)
	j.ops.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.queue = append(j.queue, r)
	if j.writers < maxEntryWriters {
		j.writers++
		go j.writeQueued()
	}
}

// writeQueued writes the entries in queue, in order, until none is left.
// An entry whose request stopped waiting before its turn (granted,
// cancelled, expired) or that comes up while the manager is closing is not
// written: its grant then creates the record, and there is nothing to drop.
func (j *journal) writeQueued() {
	for {
		j.mu.Lock()
		if len(j.queue) == 0 {
			j.writers--
			j.queue = nil // let a burst's backing array go
			j.mu.Unlock()
			return
		}
		r := j.queue[0]
		j.queue[0] = nil
		j.queue = j.queue[1:]
		j.mu.Unlock()
		v, ttl, ok := j.entryOf(r)
		if !ok || j.ctx.Err() != nil {
			r.entry.writing.Done()
			j.ops.Done()
			continue
		}
		j.write(r, v, ttl)
	}
}

// write stores r's queue entry with a TTL: a record without one would be
// refused by the next manager (see recordCheck.accept).
func (j *journal) write(r *request, v storedValue, ttl time.Duration) {
	defer j.ops.Done()
	defer r.entry.writing.Done()
	data, err := json.Marshal(v)
	if err != nil {
		j.log.Error("encoding a queue entry", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	key := lease.RecordKey(j.node, r.pool.name, r.id)
	rev, err := j.store.Create(ctx, key, data, ttl)
	if errors.Is(err, ErrStoreExists) {
		// A queue entry left by an earlier attempt: take it over.
		rev, err = j.stale(ctx, key)
	}
	if err != nil {
		// The request still waits in memory; only a failover would lose
		// its place, and its client re-sends it then.
		j.log.Warn("storing a queued request failed", "request", r.id, "err", err)
		return
	}
	r.entry.rev = rev // published to readers by writing.Done
}

// stale returns the revision of a stored queue entry at key, left by an
// earlier attempt whose write or delete failed.
func (j *journal) stale(ctx context.Context, key string) (uint64, error) {
	data, rev, err := j.store.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	var v storedValue
	if err := json.Unmarshal(data, &v); err != nil || !v.Queued {
		return 0, fmt.Errorf("%w: %s holds a record that is not a queue entry", ErrStoreExists, key)
	}
	return rev, nil
}

// dropLocked deletes the queue entry, if any, of a request that left the
// queue without a grant.
func (j *journal) dropLocked(r *request) {
	if !r.entry.has {
		return
	}
	key := lease.RecordKey(j.node, r.pool.name, r.id)
	j.ops.Add(1)
	go func() {
		defer j.ops.Done()
		rev := r.entry.await()
		if rev == 0 {
			return
		}
		// Retry until the delete is stored: a left-over entry would come
		// back as a phantom waiter under the next manager.
		backoff := 50 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
			err := j.store.Delete(ctx, key, rev)
			cancel()
			if err == nil || errors.Is(err, ErrStoreNotFound) || errors.Is(err, ErrStoreRevision) {
				return // gone, or replaced by a newer write of this key
			}
			if fencedOut(err) {
				return // the term is over: the successor restores or drops it
			}
			j.log.Warn("deleting a queue entry failed; retrying", "key", key, "err", err)
			select {
			case <-j.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// wait returns once every write and delete the journal started has ended.
func (j *journal) wait() { j.ops.Wait() }

// unixTime and unixNano convert a deadline kept as unix ns (0: none) to and
// from the zero-or-time form of the stored entry.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
