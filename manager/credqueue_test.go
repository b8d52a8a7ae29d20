package manager_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// One credential may have at most MaxQueuedPerCredential requests waiting
// on a node over all its connections (issue 38: ten short connections of
// 1,000 requests each filled a pool's queue): a new connection of the same
// user buys no more places, another credential still queues.
func TestQueuedRequestsPerCredentialAreBounded(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	const perConn, perCred = 4, 6
	n := harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}, MaxQueuedPerConn: perConn, MaxQueuedPerCredential: perCred})
	first := srv.Connect(t, config.RoleExecutor)
	if r := acquireRaw(t, first, "holder", nil); r.Status != lease.StatusGranted {
		t.Fatalf("first acquire: %+v", r)
	}
	queued := 0
	for c := range 3 { // three connections of the executor's credential
		nc := srv.Connect(t, config.RoleExecutor)
		for i := range 3 {
			r := acquireRaw(t, nc, fmt.Sprintf("c%dq%d", c, i), nil)
			switch {
			case queued < perCred && r.Status == lease.StatusQueued:
				queued++
			case queued == perCred && r.Status == lease.StatusError && r.Error.Code == lease.CodeQueueFull &&
				strings.Contains(r.Error.Message, "MAX_QUEUED_PER_CREDENTIAL") && r.Error.RetryAfterMs > 0:
			default:
				t.Fatalf("request %d of connection %d, %d queued so far: %+v", i, c, queued, r)
			}
		}
	}
	if q := harness.PoolStats(t, n.Manager, "p").QueuedRequests; q != perCred {
		t.Fatalf("%d requests queued, want the credential's bound %d", q, perCred)
	}
	// Another credential is not held back by this one's.
	if r := acquireRaw(t, srv.ConnectJobsAdmin(t), "other", nil); r.Status != lease.StatusQueued {
		t.Fatalf("another credential's request: %+v", r)
	}
}

// A queued request lives no longer than the connection that sent it, named
// in it or not (issue 38: queued requests outlived their connection, and
// ten short connections of 1,000 requests each kept a real `executor run`
// out of a one-slot pool for about 42 hours). The server vouches for the
// requester's connection; once it closes, its requests leave the queue
// after the grace, and a real waiter is granted when the slot frees.
func TestQueuedRequestsGoWithTheirConnection(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	n := harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node,
		Pools:            []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject, DisconnectGrace: 200 * time.Millisecond})
	holder, _ := executorClient(t, srv)
	ctx := t.Context()
	held, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}

	// Rejections, as the events tell them.
	var mu sync.Mutex
	rejected := map[string]lease.Code{}
	watch := srv.Connect(t, config.RoleExecutor)
	if _, err := watch.Subscribe(lease.EventFilter(lease.DefaultPrefix, node, "p", lease.EventRejected), func(m *nats.Msg) {
		evs, _ := lease.DecodeEvents(m.Data)
		mu.Lock()
		for _, ev := range evs {
			rejected[ev.RequestID] = ev.Code
		}
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	// Ten short connections queue 20 requests each, naming no connection
	// and promising no polls, then close.
	const conns, each = 10, 20
	for c := range conns {
		nc := srv.Connect(t, config.RoleExecutor)
		for i := range each {
			data, _ := json.Marshal(lease.AcquireRequest{RequestID: fmt.Sprintf("fake-%d-%d", c, i), Holder: "flood", Slots: 1})
			msg, err := nc.Request(lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire), data, 5*time.Second)
			var r lease.Reply
			if err != nil || json.Unmarshal(msg.Data, &r) != nil || r.Status != lease.StatusQueued {
				t.Fatalf("fake request %d of connection %d: %+v, %v", i, c, r, err)
			}
		}
		nc.Close()
	}
	// A real waiter, behind all of them.
	waiter, _ := executorClient(t, srv)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "p", 1, lease.WithWait(time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	harness.Eventually(t, time.Minute, "every fake request withdrawn", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id, code := range rejected {
			if strings.HasPrefix(id, "fake-") && code != lease.CodeHolderDisconnected {
				t.Fatalf("fake request %s rejected with %s, want %s", id, code, lease.CodeHolderDisconnected)
			}
		}
		return len(rejected) == conns*each
	})
	if q := harness.PoolStats(t, n.Manager, "p").QueuedRequests; q != 1 {
		t.Fatalf("%d requests queued once the fakes went, want the real waiter alone", q)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the real waiter, once the slot freed: %v", err)
	}
}
