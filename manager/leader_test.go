package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// candidate is one lease manager process for a node, running under
// RunLeader on its own NATS connection.
type candidate struct {
	nc      *nats.Conn
	cancel  context.CancelFunc
	done    chan struct{}
	serving atomic.Bool
	terms   atomic.Int32
}

func startCandidate(t *testing.T, url, instance string, leaderTTL time.Duration, overlap *atomic.Int32, pools ...manager.PoolConfig) *candidate {
	t.Helper()
	return startCandidateTTL(t, url, instance, leaderTTL, 5*time.Second, overlap, pools...)
}

// startCandidateTTL is startCandidate granting leases of leaseTTL.
func startCandidateTTL(t *testing.T, url, instance string, leaderTTL, leaseTTL time.Duration, overlap *atomic.Int32, pools ...manager.PoolConfig) *candidate {
	t.Helper()
	nc, err := natsconn.Connect(url, natsconn.Auth{}, instance)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	setup, cancelSetup := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSetup()
	store, err := jetstream.OpenLeaseStore(setup, nc, jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Leases})
	if err != nil {
		t.Fatal(err)
	}
	leaders, err := jetstream.OpenLeaseStore(setup, nc, jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Leaders})
	if err != nil {
		t.Fatal(err)
	}
	poolStore, err := jetstream.OpenLeaseStore(setup, nc, jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Pools})
	if err != nil {
		t.Fatal(err)
	}
	c := &candidate{nc: nc, cancel: cancel, done: make(chan struct{})}
	mcfg := manager.Config{Node: node, TTL: leaseTTL, Pools: pools, Conn: nc, Store: store, PoolStore: poolStore,
		Events: jetstream.NewEvents(nc, "lease", nil), Logger: harness.Logger(), Instance: instance, StoreTimeout: time.Second}
	serve := func(ctx context.Context, fence manager.Fence) error {
		mc := mcfg
		mc.Fence = fence
		m, err := manager.New(mc)
		if err != nil {
			return err
		}
		return m.Run(ctx, func(serving bool) {
			if serving {
				if overlap.Add(1) > 1 {
					t.Errorf("%s serves while another manager serves the node", instance)
				}
				c.serving.Store(true)
				c.terms.Add(1)
				return
			}
			c.serving.Store(false)
			overlap.Add(-1)
		})
	}
	go func() {
		defer close(c.done)
		_ = manager.RunLeader(ctx, manager.LeaderConfig{Store: leaders, Node: node, Instance: instance, TTL: leaderTTL, Logger: harness.Logger()}, serve)
	}()
	t.Cleanup(func() {
		cancel()
		<-c.done
		nc.Close()
	})
	return c
}

// crash cuts the candidate off NATS without a goodbye: no leadership
// give-up, no clean manager shutdown reaches the server.
func (c *candidate) crash() { c.nc.Close() }

// A standby takes over a crashed leader's node, and the leases the leader
// granted live on with it. A lease outlives a takeover that ends before its
// deadline: with a 30 s TTL the takeover, about a second and a half here
// and a few seconds on a loaded machine, stays far within it. How long the
// takeover took is speed: logged, not asserted (docs/testing.md).
func TestStandbyTakesOverWithoutLosingLeases(t *testing.T) {
	t.Parallel()
	const leaderTTL, leaseTTL = time.Second, 30 * time.Second
	srv := harness.StartServer(t)
	var overlap atomic.Int32
	a := startCandidateTTL(t, srv.URL, "a", leaderTTL, leaseTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 2})
	harness.Eventually(t, time.Minute, "a leads", a.serving.Load)
	b := startCandidateTTL(t, srv.URL, "b", leaderTTL, leaseTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 2})

	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(300*time.Millisecond), lease.WithPollInterval(300*time.Millisecond))
	ctx := context.Background()
	held, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.serving.Load() {
		t.Fatal("standby serves while the leader lives")
	}

	crashed := time.Now()
	a.crash()
	harness.Eventually(t, 2*time.Minute, "b takes over", b.serving.Load)
	t.Logf("takeover after %v (leadership TTL %v)", time.Since(crashed).Round(time.Millisecond), leaderTTL)

	// The lease granted by a survives the takeover and is renewed by b: a
	// renewal sent after the crash, which only b can have answered, sets
	// the deadline a TTL less the margin past its sending. The holder
	// renews every TTL/3; the wait is only a budget.
	renewedByB := crashed.Add(leaseTTL - leaseTTL/10)
	harness.Eventually(t, 2*time.Minute, "the holder to renew with b", func() bool {
		select {
		case <-held.Done():
			return true
		default:
			return !held.Deadline().Before(renewedByB)
		}
	})
	if err := held.Err(); err != nil {
		t.Fatalf("lease lost across the takeover: %v", err)
	}
	// b counts it: only one slot is left.
	second, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= held.Token() {
		t.Fatalf("token after takeover %d not above %d", second.Token(), held.Token())
	}
	if _, err := c.Acquire(ctx, "p", 1, lease.WithWait(200*time.Millisecond)); !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatalf("third slot after takeover: %v", err)
	}
	_ = held.Release(ctx)
	_ = second.Release(ctx)
}

func TestAtMostOneActiveManagerPerNode(t *testing.T) {
	t.Parallel()
	const leaderTTL = time.Second
	srv := harness.StartServer(t)
	var overlap atomic.Int32
	var cands []*candidate
	for _, id := range []string{"w", "x", "y", "z"} { // one more than the rounds below
		cands = append(cands, startCandidate(t, srv.URL, id, leaderTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 1}))
	}
	leader := func() *candidate {
		var found *candidate
		for _, c := range cands {
			if c.serving.Load() {
				if found != nil {
					t.Fatal("two candidates serve at once")
				}
				found = c
			}
		}
		return found
	}
	// Hand leadership around three times: a graceful stop (the key is given
	// up: quick) and crashes (the key must expire first).
	for round := range 3 {
		var cur *candidate
		harness.Eventually(t, 3*leaderTTL, "a leader", func() bool { cur = leader(); return cur != nil })
		if round == 0 {
			cur.cancel()
		} else {
			cur.crash()
		}
		harness.Eventually(t, 3*leaderTTL, "a new leader", func() bool {
			n := leader()
			return n != nil && n != cur
		})
	}
	if got := overlap.Load(); got != 1 {
		t.Fatalf("%d managers serving at the end, want 1", got)
	}
}

// An acquire sent while no manager serves the node (a takeover or restart in
// progress) keeps asking and is granted once one does.
func TestAcquireWaitsOutAMissingManager(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	c := harness.Client(t, srv.URL, node, lease.WithNoManagerWait(10*time.Second))
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "p", 1)
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(time.Second) // the fault: no manager for a second while the client waits
	harness.StartManager(t, srv.URL, manager.Config{Node: node, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acquire did not get through once the manager served")
	}
}

// A leadership key no manager wrote (garbage, an unknown instance, no TTL,
// so it never expires) stopped the node for good, also across restarts
// (issue 28). It is taken over once it has gone unrenewed for longer than
// twice the leadership TTL; a live leader's key, renewed every TTL/3, never
// is.
func TestForeignLeadershipKeyIsTakenOver(t *testing.T) {
	t.Parallel()
	const leaderTTL = time.Second
	srv := harness.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := leadersBucket(t, ctx, srv.URL)
	for _, value := range []string{"not json", `{"instance":"nobody","since":"2026-01-01T00:00:00Z"}`} {
		t.Run(value, func(t *testing.T) {
			if _, err := leaders.Put(ctx, node, []byte(value)); err != nil { // no TTL
				t.Fatal(err)
			}
			var overlap atomic.Int32
			forged := time.Now()
			a := startCandidate(t, srv.URL, "a-"+nuid.Next(), leaderTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 1})
			harness.Eventually(t, 6*leaderTTL, "the candidate takes over the foreign key", a.serving.Load)
			took := time.Since(forged)
			t.Logf("served %v after the foreign key was written (leadership TTL %v)", took.Round(time.Millisecond), leaderTTL)
			if took < 2*leaderTTL {
				t.Fatalf("served after %v: a key unchanged for less than twice the leadership TTL was taken over", took)
			}
			// The live leader's key is never taken over by a standby.
			b := startCandidate(t, srv.URL, "b-"+nuid.Next(), leaderTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 1})
			terms := a.terms.Load()
			for range 12 { // four leadership TTLs, counted in the leader's renewals
				_, rev, err := leaders.Get(ctx, node)
				if err != nil {
					t.Fatal(err)
				}
				harness.Eventually(t, 2*leaderTTL, "the leader renews its key", func() bool {
					_, r, err := leaders.Get(ctx, node)
					return err == nil && r > rev
				})
			}
			if b.serving.Load() || a.terms.Load() != terms || !a.serving.Load() {
				t.Fatalf("a live leader's key was taken over: a serving %v (terms %d→%d), b serving %v", a.serving.Load(), terms, a.terms.Load(), b.serving.Load())
			}
			a.cancel()
			<-a.done
			b.cancel()
			<-b.done
		})
	}
}

// Every renewal of a term writes the value the term began with: its
// instance, and since, when it acquired the key. A new since at the first
// renewal changed the key's value under anyone reading it.
func TestLeaderRenewalsKeepTheValue(t *testing.T) {
	t.Parallel()
	const leaderTTL = time.Second
	srv := harness.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := leadersBucket(t, ctx, srv.URL)
	var overlap atomic.Int32
	started := time.Now()
	a := startCandidate(t, srv.URL, "a-"+nuid.Next(), leaderTTL, &overlap, manager.PoolConfig{Name: "p", Capacity: 1})
	harness.Eventually(t, 30*time.Second, "a leads", a.serving.Load)
	first, rev, err := leaders.Get(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	var rec manager.LeaderRecord
	if err := json.Unmarshal(first, &rec); err != nil || rec.Since.Before(started.Add(-time.Second)) || rec.Since.After(time.Now()) {
		t.Fatalf("leadership value %s (%v): want since when the term began", first, err)
	}
	for range 3 {
		harness.Eventually(t, 10*leaderTTL, "the leader renews its key", func() bool {
			_, r, err := leaders.Get(ctx, node)
			return err == nil && r > rev
		})
		value, r, err := leaders.Get(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if string(value) != string(first) {
			t.Fatalf("renewal %d wrote %s, the term began with %s", r, value, first)
		}
		rev = r
	}
	a.cancel()
	<-a.done
}

// leadersBucket opens the leadership bucket of the server at url, as a
// test reads and writes its keys from outside the managers.
func leadersBucket(t *testing.T, ctx context.Context, url string) *jetstream.LeaseStore {
	t.Helper()
	leaders, err := jetstream.OpenLeaseStore(ctx, harness.Connect(t, url), jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Leaders})
	if err != nil {
		t.Fatal(err)
	}
	return leaders
}
