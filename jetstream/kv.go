package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/lease"
)

// MarkerTTL is how long the bucket keeps the markers left by an expired or
// deleted lease. Watchers see a marker the moment it is written; keeping it
// a while longer lets a manager that restarts soon after still see it, and
// then it goes, so released leases do not pile up in the stream.
const MarkerTTL = time.Minute

// BucketConfig describes the lease bucket.
type BucketConfig struct {
	Name     string // lease.BucketName(prefix)
	Replicas int    // 1 for a single server, 3 on a cluster
}

// LeaseStore keeps lease records in a JetStream KV bucket with a TTL per
// key. It implements lease.Store.
type LeaseStore struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	subject string // "$KV.<bucket>." : renewals publish here directly
}

var _ lease.Store = (*LeaseStore)(nil)

// OpenLeaseStore creates or binds the lease bucket. Per-key TTLs need
// LimitMarkerTTL on the bucket; one revision per key is all a lease needs.
func OpenLeaseStore(ctx context.Context, nc *nats.Conn, cfg BucketConfig) (*LeaseStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         cfg.Name,
		Description:    "slot leases: one record per live lease, expiring with its TTL",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       cfg.Replicas,
		LimitMarkerTTL: MarkerTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: lease bucket %q: %w", cfg.Name, err)
	}
	return &LeaseStore{js: js, kv: kv, subject: "$KV." + cfg.Name + "."}, nil
}

// Create stores a new record with a TTL.
func (s *LeaseStore) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	rev, err := s.kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %w", lease.ErrStoreExists, err)
	}
	return rev, err
}

// Renew rewrites the record with a fresh TTL if its latest revision is rev.
// kv.Update would drop the TTL (nats.go issue 1994), so this publishes to the
// key's subject with the expected revision and a TTL header itself.
func (s *LeaseStore) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	ack, err := s.js.Publish(ctx, s.subject+key, value,
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		if wrongLastSeq(err) {
			return 0, fmt.Errorf("%w: %w", lease.ErrStoreRevision, err)
		}
		return 0, err
	}
	return ack.Sequence, nil
}

// Delete purges the record if its latest revision is rev. A purge drops all
// of the key's history, and its marker expires after MarkerTTL.
func (s *LeaseStore) Delete(ctx context.Context, key string, rev uint64) error {
	err := s.kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(MarkerTTL))
	if err != nil && (errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLastSeq(err)) {
		return fmt.Errorf("%w: %w", lease.ErrStoreRevision, err)
	}
	return err
}

// Put writes a key unconditionally, without a TTL.
func (s *LeaseStore) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.kv.Put(ctx, key, value)
}

// Get returns a live record.
func (s *LeaseStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("%w: %w", lease.ErrStoreNotFound, err)
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// wrongLastSeq reports a CAS conflict: 10071, or 10164 on replicated streams.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Watch streams the latest record of every key matching filter, then every
// change. ctx bounds only the setup; the watch runs until Stop.
func (s *LeaseStore) Watch(ctx context.Context, filter string) (lease.Watcher, error) {
	kw, err := s.kv.Watch(context.Background(), filter)
	if err != nil {
		return nil, fmt.Errorf("jetstream: watch %q: %w", filter, err)
	}
	w := &watcher{kw: kw, out: make(chan lease.Change, 256), stop: make(chan struct{})}
	go w.run()
	return w, nil
}

type watcher struct {
	kw       jetstream.KeyWatcher
	out      chan lease.Change
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *watcher) Changes() <-chan lease.Change { return w.out }

func (w *watcher) Stop() error {
	var err error
	w.stopOnce.Do(func() {
		close(w.stop)
		err = w.kw.Stop()
	})
	return err
}

// run translates KV entries into changes. The initial state is complete at
// the first entry with nothing pending after it (Delta 0), or at once when
// the bucket held nothing: nats.go's own nil marker can come early, so it
// counts only when no entry preceded it.
func (w *watcher) run() {
	defer close(w.out)
	// Once stopped, keep draining: nats.go delivers into its channel while
	// holding a lock that its own unsubscribe needs.
	defer func() {
		go func() {
			for range w.kw.Updates() {
			}
		}()
	}()
	caughtUp, seen := false, 0
	send := func(c lease.Change) bool {
		select {
		case w.out <- c:
			return true
		case <-w.stop:
			return false
		}
	}
	for e := range w.kw.Updates() {
		if e == nil {
			if !caughtUp && seen == 0 {
				caughtUp = true
				if !send(lease.Change{Op: lease.ChangeCaughtUp}) {
					return
				}
			}
			continue
		}
		seen++
		c := lease.Change{Key: e.Key(), Value: e.Value(), Rev: e.Revision(), Op: lease.ChangePut}
		switch e.Operation() {
		case jetstream.KeyValueDelete:
			c.Op = lease.ChangeDelete
		case jetstream.KeyValuePurge:
			c.Op = lease.ChangeExpire
		}
		if !send(c) {
			return
		}
		if !caughtUp && e.Delta() == 0 {
			caughtUp = true
			if !send(lease.Change{Op: lease.ChangeCaughtUp}) {
				return
			}
		}
	}
}
