package lease_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// swallow subscribes to the renew subject of pool p and answers nothing, as
// a frozen manager that is still subscribed would. Every request it takes is
// sent on the returned channel.
// node is the node the tests' managers serve.
const node = "n1"

func swallow(t *testing.T, url, pool string) <-chan *nats.Msg {
	t.Helper()
	nc := harness.Connect(t, url)
	got := make(chan *nats.Msg, 256)
	sub, err := nc.Subscribe(lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbRenew), func(m *nats.Msg) {
		select {
		case got <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return got
}

// renewTTL leaves a loaded machine time to start the next manager before
// the record expires: the first renewal goes out TTL/3 after the grant,
// so the next manager has 2/3 of it (a 3s TTL gave it 2s, which a
// manager's start with -race took at a load of 16 on 2 cores).
const renewTTL = 10 * time.Second

var renewPools = []manager.PoolConfig{{Name: "p", Capacity: 1}}

// leaseOfFrozenManager acquires a lease (TTL renewTTL, request timeout longer than
// the TTL) and then closes its manager, leaving only a subscriber that takes
// renewals and never answers (swallow).
func leaseOfFrozenManager(t *testing.T) (*harness.Server, *lease.Lease, <-chan *nats.Msg) {
	t.Helper()
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: renewTTL, Pools: renewPools})
	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(time.Minute))
	l, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	frozen := swallow(t, srv.URL, "p")
	if err := n.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	return srv, l, frozen
}

// A renewal that went to a manager which never answers (frozen, or deposed
// while it was in flight) is sent again after min(TTL/10, 500ms), so the
// next manager renews the lease long before the request timeout, which is
// here longer than the whole TTL.
func TestRenewalResentReachesTheNextManager(t *testing.T) {
	t.Parallel()
	srv, l, frozen := leaseOfFrozenManager(t)
	deadline := l.Deadline()
	// The heartbeat's renewal (due TTL/3 after the acquire) goes to the
	// frozen subscriber only; once it has been, the next manager starts.
	select {
	case <-frozen:
	case <-l.Done():
		t.Fatalf("lease lost before its first renewal: %v", l.Err())
	case <-time.After(2 * renewTTL):
		t.Fatal("no renewal was sent")
	}
	harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: renewTTL, Pools: renewPools})
	harness.Eventually(t, 2*renewTTL, "a renewal answered by the next manager", func() bool {
		return l.Deadline().After(deadline)
	})
	select {
	case <-l.Done():
		t.Fatalf("lease lost: %v", l.Err())
	default:
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// All attempts of one renewal share a reply subject, so a late answer to the
// first attempt counts; and the holder's new deadline is measured from the
// first attempt's send time, the only one it can be sure the record's write
// came after.
func TestLateAnswerToFirstRenewalAttemptCounts(t *testing.T) {
	t.Parallel()
	srv, l, frozen := leaseOfFrozenManager(t)
	deadline := l.Deadline()
	var attempts []*nats.Msg
	var firstSeen time.Time
	for len(attempts) < 3 {
		select {
		case m := <-frozen:
			if len(attempts) == 0 {
				firstSeen = time.Now()
			}
			attempts = append(attempts, m)
		case <-l.Done():
			t.Fatalf("lease lost after %d renewal attempts: %v", len(attempts), l.Err())
		}
	}
	for i, m := range attempts {
		if m.Reply != attempts[0].Reply {
			t.Fatalf("attempt %d replies to %q, the first to %q: one renewal must keep one reply subject", i, m.Reply, attempts[0].Reply)
		}
		if string(m.Data) != string(attempts[0].Data) {
			t.Fatalf("attempt %d is %s, the first %s", i, m.Data, attempts[0].Data)
		}
	}
	rec := l.Record()
	body, err := json.Marshal(lease.Reply{Status: lease.StatusRenewed, Lease: &rec})
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	if err := harness.Connect(t, srv.URL).Publish(attempts[0].Reply, body); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, renewTTL, "the late answer renews the lease", func() bool {
		return l.Deadline().After(deadline)
	})
	if got, limit := l.Deadline(), firstSeen.Add(renewTTL-renewTTL/10); got.After(limit) {
		t.Fatalf("deadline %v is after the first attempt's arrival + TTL - margin (%v): it is not measured from the first attempt", got.Format(time.StampMilli), limit.Format(time.StampMilli))
	}
	if got, later := l.Deadline(), answered.Add(renewTTL-renewTTL/10); !got.Before(later) {
		t.Fatalf("deadline %v measured from the answer (%v), not from the first attempt", got.Format(time.StampMilli), later.Format(time.StampMilli))
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost: %v", l.Err())
	default:
	}
	_ = l.Release(context.Background()) // nobody serves: the release only has to return
}

// renewGate holds every Renew until the test opens it, as a stalled store
// would, and counts the writes.
type renewGate struct {
	manager.Store
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	writes  int
}

func (g *renewGate) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	g.mu.Lock()
	g.writes++
	g.mu.Unlock()
	return g.Store.Renew(ctx, key, value, ttl, rev)
}

// Attempts of one renewal that pile up at a manager whose store stalled (or
// that was frozen) are all answered "renewed" once it moves again: they do
// not fail each other's compare-and-set into lease_not_found.
func TestPiledUpRenewalAttemptsAllRenew(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	var g *renewGate
	harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: renewTTL, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}},
		func(s manager.Store) manager.Store {
			g = &renewGate{Store: s, entered: make(chan struct{}, 1), gate: make(chan struct{})}
			return g
		})
	nc := harness.Connect(t, srv.URL)
	r := harness.Request(t, nc, lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "held", Holder: "h", Slots: 1, Secret: "s"})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire %+v", r)
	}
	body, err := json.Marshal(lease.RenewRequest{LeaseID: "held", Token: r.Lease.Token, Secret: "s"})
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 8
	subject := lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbRenew)
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first renewal never reached the store")
	}
	for range attempts - 1 {
		if err := nc.PublishRequest(subject, inbox, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	close(g.gate)
	for i := range attempts {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", i+1, attempts, err)
		}
		var rep lease.Reply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Status != lease.StatusRenewed {
			t.Fatalf("answer %d of %d: %+v, want renewed", i+1, attempts, rep)
		}
	}
	g.mu.Lock()
	t.Logf("%d attempts answered with %d store writes", attempts, g.writes)
	g.mu.Unlock()
}
