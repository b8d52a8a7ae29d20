package manager

import (
	"context"
	"errors"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Store keeps lease records with a per-key TTL. The jetstream package
// implements it over a JetStream KV bucket; every write is acknowledged by
// the server before the call returns, which is what makes a grant durable
// before the holder hears of it. A Store that is also an EchoWriter can
// send writes without the acknowledgement; the manager then waits for its
// watch to show them stored instead.
type Store interface {
	// Create stores a new key with a TTL. ErrStoreExists if the key is live.
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (rev uint64, err error)
	// Renew rewrites a key with a fresh TTL, only if its latest revision is
	// rev. ErrStoreRevision otherwise (the record expired or changed).
	Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (newRev uint64, err error)
	// Delete removes a key only if its latest revision is rev, so a stale
	// caller cannot delete a newer owner's record. ErrStoreRevision otherwise.
	Delete(ctx context.Context, key string, rev uint64) error
	// Put writes a key unconditionally, without a TTL.
	Put(ctx context.Context, key string, value []byte) (rev uint64, err error)
	// Get returns a live key. ErrStoreNotFound if absent, deleted or expired.
	Get(ctx context.Context, key string) (value []byte, rev uint64, err error)
	// Watch streams the latest state of the keys matching filter and then
	// every change. It sends one Change with Op ChangeCaughtUp once the
	// initial state has been delivered.
	Watch(ctx context.Context, filter string) (Watcher, error)
}

// EchoWriter is a Store that can send a write without waiting for the
// server's acknowledgement: a write that is stored shows on the Store's
// watch (its echo), one that is refused or lost shows nowhere. The manager
// watches its node's records anyway, so waiting for the echo instead of
// the acknowledgement costs one message fewer per write.
type EchoWriter interface {
	// SendCreate sends Create(key, value, ttl), SendRenew Renew(key,
	// value, ttl, rev) and SendDelete Delete(key, rev); each returns once
	// its write is sent.
	SendCreate(key string, value []byte, ttl time.Duration) error
	SendRenew(key string, value []byte, ttl time.Duration, rev uint64) error
	SendDelete(key string, rev uint64) error
}

// Watcher is a running watch. Changes is closed when the watch ends.
type Watcher interface {
	Changes() <-chan Change
	Stop() error
}

// ChangeOp says what happened to a key.
type ChangeOp int

const (
	ChangePut      ChangeOp = iota + 1 // created or renewed
	ChangeDelete                       // deleted or purged by a client
	ChangeExpire                       // its TTL lapsed (or an operator purged it)
	ChangeCaughtUp                     // the initial state has been delivered
)

// Change is one entry of a watch.
type Change struct {
	Op    ChangeOp
	Key   string
	Value []byte
	Rev   uint64
	// TTL is the time to live the value was stored with (its Nats-TTL
	// header); 0 if it has none and never expires. The manager refuses
	// records without one (see recordCheck.accept).
	TTL time.Duration
}

// Store errors, returned wrapped by implementations.
var (
	ErrStoreExists   = errors.New("store: key exists")
	ErrStoreRevision = errors.New("store: revision mismatch")
	ErrStoreNotFound = errors.New("store: key not found")
)

// EventSink receives every lease event. Publish must not block for long: it
// is called on the request path.
type EventSink interface {
	Publish(ev lease.Event)
}

// Flusher is an EventSink that holds events back to send several in one
// message: the manager flushes it as it closes, after its last event.
type Flusher interface {
	Flush()
}

// NopEvents discards events.
type NopEvents struct{}

// Publish does nothing.
func (NopEvents) Publish(lease.Event) {}
