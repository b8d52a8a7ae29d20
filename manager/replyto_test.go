package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// spy records every answer of a manager on the given subjects, seen from a
// connection of its own subscribed to everything.
type spy struct {
	mu   sync.Mutex
	want map[string]bool
	seen []string
}

func watchSubjects(t *testing.T, url string, subjects []string) (*spy, *nats.Conn) {
	t.Helper()
	s := &spy{want: map[string]bool{}}
	for _, subj := range subjects {
		s.want[subj] = true
	}
	nc := harness.Connect(t, url)
	if _, err := nc.Subscribe(">", func(msg *nats.Msg) {
		s.mu.Lock()
		defer s.mu.Unlock()
		// Requests pass on some of these subjects too (the acquire
		// subject); an answer of the manager has a status, or a type if a
		// discovery answer.
		var answer struct {
			Status, Type string
		}
		if s.want[msg.Subject] && json.Unmarshal(msg.Data, &answer) == nil && (answer.Status != "" || answer.Type != "") {
			s.seen = append(s.seen, fmt.Sprintf("%s: %.80s", msg.Subject, msg.Data))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s, nc
}

func (s *spy) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// TestRepliesOnlyToInboxes is issue 13's attack: every verb and every
// discovery endpoint, sent with reply subjects that are not inboxes. The
// manager must publish nothing there, act on none of them, count each, and
// keep serving with its leadership key intact.
// TestRepliesOnlyToInboxes: every request whose reply subject is not an
// inbox, or that has none, is neither acted on nor answered, and is
// counted.
func TestRepliesOnlyToInboxes(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	var refused atomic.Int64
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, Pools: []manager.PoolConfig{{Name: "default", Capacity: 2}},
		ReplyRefused: func() { refused.Add(1) }})

	// The leadership key the first attack in issue 13 overwrote.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := leadersBucket(t, ctx, srv.URL)
	leaderRev, err := leaders.Put(ctx, node, []byte(`{"instance":"the-leader"}`))
	if err != nil {
		t.Fatal(err)
	}

	// A lease held by a real client, which a release or renew must not touch.
	c := harness.Client(t, srv.URL, node)
	held, err := c.Acquire(ctx, "default", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := held.Record()

	bad := []string{
		"$KV." + jetstream.NamesFor(lease.DefaultPrefix).Leaders + "." + node,
		"$JS.API.STREAM.DELETE.x",
		"$SYS.x",
		"lease.events.x",
		lease.Subject(lease.DefaultPrefix, node, "default", lease.VerbAcquire),
		n.Conn.NewRespInbox(), // the manager's own request/reply inbox
	}
	sp, spyConn := watchSubjects(t, srv.URL, bad)

	subj := func(verb string) string { return lease.Subject(lease.DefaultPrefix, node, "default", verb) }
	body := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	requests := []struct {
		subject string
		data    []byte
	}{
		{subj(lease.VerbAcquire), body(lease.AcquireRequest{RequestID: "attack", Holder: "mallory", Slots: 1})},
		{subj(lease.VerbRenew), body(lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: rec.Secret})},
		{subj(lease.VerbRelease), body(lease.ReleaseRequest{LeaseID: rec.ID, Token: rec.Token, Secret: rec.Secret})},
		{subj(lease.VerbCancel), body(lease.CancelRequest{RequestID: rec.ID, Holder: rec.Holder, Secret: rec.Secret})},
		{lease.StatsSubject(lease.DefaultPrefix, node), []byte("{}")},
		{lease.ResizeSubject(lease.DefaultPrefix, node), body(lease.ResizeRequest{Set: map[string]int64{"extra": 1}})},
	}
	for _, verb := range []string{"PING", "INFO", "STATS"} {
		requests = append(requests, struct {
			subject string
			data    []byte
		}{"$SRV." + verb, nil},
			struct {
				subject string
				data    []byte
			}{"$SRV." + verb + "." + lease.ServiceName, nil})
	}
	attacker := harness.Connect(t, srv.URL)
	for _, reply := range bad {
		for _, r := range requests {
			if err := attacker.PublishMsg(&nats.Msg{Subject: r.subject, Reply: reply, Data: r.data}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// No reply subject at all: what the server publishes when a client
	// aims a JetStream answer at a request subject. Nothing is done for
	// these either: the release would free the held lease, the resize add
	// a pool.
	for _, r := range requests {
		if err := attacker.PublishMsg(&nats.Msg{Subject: r.subject, Data: r.data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	want := int64((len(bad) + 1) * len(requests))
	harness.Eventually(t, 30*time.Second, "every request refused", func() bool { return refused.Load() >= want })
	if got := refused.Load(); got != want {
		t.Fatalf("refused %d requests, want %d", got, want)
	}

	// Still serving: a normal acquire is granted, stats answer, discovery
	// finds the node. Each round trip also lets anything the manager might
	// have published reach the spy first.
	l2, err := c.Acquire(ctx, "default", 1)
	if err != nil {
		t.Fatalf("acquire after the attack: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	nodes, err := lease.DiscoverNodes(dctx, harness.Connect(t, srv.URL), lease.DefaultPrefix)
	dcancel()
	if err != nil || len(nodes) != 1 || nodes[0] != node {
		t.Fatalf("DiscoverNodes after the attack = %v, %v", nodes, err)
	}
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := spyConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := sp.messages(); len(got) > 0 {
		t.Fatalf("the manager published on reply subjects that are not inboxes:\n%v", got)
	}

	// Nothing was acted on: the attack's acquire holds nothing, the lease
	// is still held (not released, not cancelled), no pool was added.
	stats := n.Manager.Stats()
	if len(stats) != 1 || stats[0].Name != "default" || stats[0].Stats.InUse != 1 {
		t.Fatalf("pools after the attack: %+v; want only default with the one real lease", stats)
	}
	if ls := n.Manager.Leases(); len(ls) != 1 || ls[0].ID != rec.ID {
		t.Fatalf("leases after the attack: %+v; want only %s", ls, rec.ID)
	}
	_, rev, err := leaders.Get(ctx, node)
	if err != nil || rev != leaderRev {
		t.Fatalf("leadership key: revision %d, %v; want %d, untouched", rev, err, leaderRev)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the real holder's release after the attack: %v", err)
	}
}

// TestReplyPrefixes: a configured prefix (an executor's NATS_INBOX_PREFIX)
// is answered, one that is not configured is not, and prefixes that are
// no inbox are refused when the manager is built.
func TestReplyPrefixes(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	var refused atomic.Int64
	harness.StartManager(t, srv.URL, manager.Config{Node: node, Pools: []manager.PoolConfig{{Name: "default", Capacity: 1}},
		ReplyPrefixes: []string{"_INBOX_executor_a"}, ReplyRefused: func() { refused.Add(1) }})

	nc := harness.Connect(t, srv.URL)
	ask := func(reply string) *nats.Subscription {
		sub, err := nc.SubscribeSync(reply)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.PublishRequest(lease.StatsSubject(lease.DefaultPrefix, node), reply, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	for _, reply := range []string{"_INBOX_executor_a.x1", "_INBOX.x2", "_INBOX_executor_a.deep.er"} {
		if _, err := ask(reply).NextMsg(10 * time.Second); err != nil {
			t.Fatalf("stats with reply %s: %v", reply, err)
		}
	}
	before := refused.Load()
	for _, reply := range []string{"_INBOX_executor_b.x", "_INBOX_executor_a", "_INBOX", "x._INBOX.y"} {
		ask(reply)
	}
	harness.Eventually(t, 30*time.Second, "four refusals", func() bool { return refused.Load() == before+4 })

	for _, bad := range [][]string{{"lease"}, {"lease.n1"}, {"$KV"}, {"_INBOX.>"}, {"a..b"}, {""}} {
		_, err := manager.New(manager.Config{Node: node, Conn: nc, Store: harness.StartManagerStore(t, srv.URL),
			Pools: []manager.PoolConfig{{Name: "default", Capacity: 1}}, ReplyPrefixes: bad})
		if err == nil {
			t.Errorf("manager.New accepted reply prefixes %q", bad)
		}
	}
}

// manager.New refuses the reserved node id in any case, capacities past
// pools.MaxCapacity (as config does), a pool named twice and bad reply
// prefixes; Config.Validate gives the same verdict without making a
// manager.
func TestNewRefusesReservedNodeAndHugeCapacity(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	st := harness.StartManagerStore(t, srv.URL)
	cfg := func(node string, replies []string, pcs ...manager.PoolConfig) manager.Config {
		return manager.Config{Node: node, Conn: nc, Store: st, TTL: 5 * time.Second, Pools: pcs, ReplyPrefixes: replies}
	}
	for _, c := range []manager.Config{
		cfg("events", nil, manager.PoolConfig{Name: "default", Capacity: 1}),
		cfg("EVENTS", nil, manager.PoolConfig{Name: "default", Capacity: 1}),
		cfg("Events", nil, manager.PoolConfig{Name: "default", Capacity: 1}),
		cfg(node, nil, manager.PoolConfig{Name: "default", Capacity: pools.MaxCapacity + 1}),
		cfg(node, nil, manager.PoolConfig{Name: "default", Capacity: 1<<63 - 1}),
		cfg(node, nil, manager.PoolConfig{Name: "a", Capacity: 1}, manager.PoolConfig{Name: "a", Capacity: 2}),
		cfg(node, []string{"$KV"}, manager.PoolConfig{Name: "default", Capacity: 1}),
		cfg(node, nil),
	} {
		_, err := manager.New(c)
		verr := c.Validate()
		if err == nil || verr == nil || err.Error() != verr.Error() {
			t.Errorf("node %q, pools %+v, replies %q: New says %v, Validate says %v; want the same refusal", c.Node, c.Pools, c.ReplyPrefixes, err, verr)
		}
	}
	good := cfg(node, nil, manager.PoolConfig{Name: "default", Capacity: pools.MaxCapacity})
	if err := good.Validate(); err != nil {
		t.Errorf("Validate refused the largest capacity: %v", err)
	}
	if _, err := manager.New(good); err != nil {
		t.Errorf("New refused the largest capacity: %v", err)
	}
}
