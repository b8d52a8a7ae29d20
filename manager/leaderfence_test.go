package manager_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// stallingRenewals passes leadership renewals to the real store until
// stall is set; then each waits for its context's deadline and fails, as a
// renewal sent to a frozen NATS server does. It records when the last
// renewal that succeeded was handed to the store.
type stallingRenewals struct {
	manager.Store
	stall atomic.Bool

	mu     sync.Mutex
	lastOK time.Time // when the last successful renewal was sent
	ok     int
}

func (s *stallingRenewals) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	if s.stall.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	sent := time.Now()
	newRev, err := s.Store.Renew(ctx, key, value, ttl, rev)
	if err == nil {
		s.mu.Lock()
		s.lastOK, s.ok = sent, s.ok+1
		s.mu.Unlock()
	}
	return newRev, err
}

func (s *stallingRenewals) last() (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOK, s.ok
}

// RunLeader's fence is valid while renewals succeed and turns invalid no
// later than the send time of the last successful renewal + TTL - TTL/10,
// while the renewal in flight still hangs and before serve's context ends.
func TestLeaderFenceEndsAtTheDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	const leaderTTL = 4 * time.Second
	const margin = leaderTTL / 10
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setup, cancelSetup := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSetup()
	leaders, err := jetstream.OpenLeaseStore(setup, nc, jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Leaders})
	if err != nil {
		t.Fatal(err)
	}
	store := &stallingRenewals{Store: leaders}

	fences := make(chan manager.Fence, 1)
	ended := make(chan error, 1)
	serve := func(ctx context.Context, f manager.Fence) error {
		fences <- f
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = manager.RunLeader(ctx, manager.LeaderConfig{Store: store, Node: node, Instance: "a", TTL: leaderTTL, Logger: harness.Logger()}, serve)
	}()
	defer func() { cancel(); <-done }()

	var fence manager.Fence
	select {
	case fence = <-fences:
	case <-time.After(10 * time.Second):
		t.Fatal("no leadership")
	}
	if fence.Term() == 0 {
		t.Fatal("term 0: want the leadership key's revision")
	}
	// A renewal succeeds: the fence is valid just after (its deadline is
	// 3.6s after that renewal was sent).
	harness.Eventually(t, 10*time.Second, "a renewal", func() bool { _, n := store.last(); return n >= 1 })
	if !fence.Valid() {
		t.Fatal("fence invalid just after a successful renewal")
	}

	store.stall.Store(true)
	for fence.Valid() {
		last, _ := store.last()
		if now := time.Now(); now.After(last.Add(leaderTTL-margin)) && fence.Valid() {
			t.Fatalf("fence valid %v after the last successful renewal was sent, past TTL - margin (%v)", now.Sub(last), leaderTTL-margin)
		}
		if time.Since(last) > 2*leaderTTL {
			t.Fatal("fence still valid two TTLs after the last successful renewal")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case cause := <-ended:
		if !errors.Is(cause, manager.ErrLeadershipLost) {
			t.Fatalf("serve ended with %v, want ErrLeadershipLost", cause)
		}
	case <-time.After(2 * leaderTTL):
		t.Fatal("serve's context did not end after the deadline")
	}
	if fence.Valid() {
		t.Fatal("fence valid again after the term ended")
	}
}
