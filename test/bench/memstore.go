package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slotlease/slotlease/manager"
)

// memStore is a manager.Store that keeps records in a map and costs nothing:
// no server round trip, no watch echo, no expiry. It exists only for the
// -diag ceiling scenarios (diag/lease-memstore/...), which measure what the
// lease cycle would reach if durable writes were free, so that a target
// the product misses can be compared with what any store design could
// give. Nothing it stores survives the process; the product never uses it.
type memStore struct {
	mu   sync.Mutex
	rev  uint64
	keys map[string]memEntry
}

type memEntry struct {
	value []byte
	rev   uint64
}

func newMemStore() *memStore { return &memStore{keys: make(map[string]memEntry)} }

func (s *memStore) put(key string, value []byte) uint64 {
	s.rev++
	s.keys[key] = memEntry{value: append([]byte(nil), value...), rev: s.rev}
	return s.rev
}

func (s *memStore) Create(_ context.Context, key string, value []byte, _ time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return 0, fmt.Errorf("%w: %s", manager.ErrStoreExists, key)
	}
	return s.put(key, value), nil
}

func (s *memStore) Renew(_ context.Context, key string, value []byte, _ time.Duration, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; !ok || e.rev != rev {
		return 0, fmt.Errorf("%w: %s", manager.ErrStoreRevision, key)
	}
	return s.put(key, value), nil
}

func (s *memStore) Delete(_ context.Context, key string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok {
		return fmt.Errorf("%w: %s", manager.ErrStoreNotFound, key)
	}
	if e.rev != rev {
		return fmt.Errorf("%w: %s", manager.ErrStoreRevision, key)
	}
	delete(s.keys, key)
	return nil
}

func (s *memStore) Put(_ context.Context, key string, value []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(key, value), nil
}

func (s *memStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", manager.ErrStoreNotFound, key)
	}
	return e.value, e.rev, nil
}

// Watch reports the (empty) initial state and then nothing: the manager's
// own writes are not echoed back, which is part of what a free store saves.
func (s *memStore) Watch(context.Context, string) (manager.Watcher, error) {
	w := &memWatcher{out: make(chan manager.Change, 1)}
	w.out <- manager.Change{Op: manager.ChangeCaughtUp}
	return w, nil
}

type memWatcher struct {
	once sync.Once
	out  chan manager.Change
}

func (w *memWatcher) Changes() <-chan manager.Change { return w.out }

func (w *memWatcher) Stop() error {
	w.once.Do(func() { close(w.out) })
	return nil
}
