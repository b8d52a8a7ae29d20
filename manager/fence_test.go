package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// testFence is a Fence the test flips.
type testFence struct {
	term  uint64
	valid atomic.Bool
}

func newTestFence(term uint64) *testFence {
	f := &testFence{term: term}
	f.valid.Store(true)
	return f
}

func (f *testFence) Valid() bool  { return f.valid.Load() }
func (f *testFence) Term() uint64 { return f.term }

// startFenced starts a manager serving term under fence, with pools "p"
// and "q" of one slot each. ignored, if not nil, counts the requests it
// drops for having no reply subject (see barrier).
func startFenced(t *testing.T, fence manager.Fence, ignored *atomic.Int32) (*harness.Server, *harness.Node) {
	t.Helper()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Instance: "current", Fence: fence,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}, {Name: "q", Capacity: 1}}}
	if ignored != nil {
		cfg.ReplyRefused = func() { ignored.Add(1) }
	}
	n := harness.StartManager(t, srv.URL, cfg)
	return srv, n
}

// barrier publishes a request without a reply subject on each subject and
// waits until the manager has dropped them all (ignored counts them): a
// subscription's handler takes its messages one at a time, in order, so
// by then the manager has handled everything sent before on those
// subjects, answer or no answer.
func barrier(t *testing.T, nc *nats.Conn, ignored *atomic.Int32, subjects ...string) {
	t.Helper()
	want := ignored.Load() + int32(len(subjects))
	for _, subj := range subjects {
		if err := nc.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 10*time.Second, "the manager to handle what was sent before", func() bool { return ignored.Load() >= want })
}

// lastSeq is the lease bucket stream's last sequence: it moves with every
// write and delete.
func lastSeq(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+jetstream.NamesFor(lease.DefaultPrefix).Leases)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// storeRecord writes a grant as another manager instance would, in term.
func storeRecord(t *testing.T, st *jetstream.LeaseStore, id, manager string, term uint64) (string, uint64) {
	t.Helper()
	now := time.Now().UTC()
	rec := lease.Record{ID: id, Node: node, Pool: "p", Slots: 1, Holder: "h-" + id, TTLMs: 5000,
		GrantedAt: now, ExpiresAt: now.Add(5 * time.Second), Term: term, Manager: manager}
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := lease.RecordKey(node, "p", id)
	rev, err := st.Create(context.Background(), key, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return key, rev
}

func stillStored(t *testing.T, st *jetstream.LeaseStore, key string, rev uint64) bool {
	t.Helper()
	_, got, err := st.Get(context.Background(), key)
	if errors.Is(err, manager.ErrStoreNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return got == rev
}

// Once its fence is invalid, a manager stores, deletes, answers and
// publishes nothing, whatever it is sent: acquire (free slots and full
// pool), renew, release and cancel.
func TestFencedManagerWritesAndAnswersNothing(t *testing.T) {
	t.Parallel()
	fence := newTestFence(5)
	var ignored atomic.Int32
	srv, n := startFenced(t, fence, &ignored)
	nc := harness.Connect(t, srv.URL)

	// Valid: a lease on p, and a request queued behind it (its entry stored).
	held := harness.Request(t, nc, lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire),
		lease.AcquireRequest{RequestID: "held", Holder: "a", Slots: 1, Secret: "s"})
	if held.Status != lease.StatusGranted || held.Lease.Term != 5 {
		t.Fatalf("grant while valid: %+v", held)
	}
	queued := sendAcquire(t, nc, lease.AcquireRequest{RequestID: "queued", Holder: "b", Slots: 1, Secret: "s"})
	if r := nextReply(t, queued); r.Status != lease.StatusQueued {
		t.Fatalf("second acquire: %+v", r)
	}
	harness.Eventually(t, 5*time.Second, "queue entry stored", func() bool { return storedQueueEntries(t, n) == 1 })
	before := lastSeq(t, nc)

	// Everything published from here on, by anyone.
	var mu sync.Mutex
	var seen []*nats.Msg
	spy, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	fence.valid.Store(false)
	if n.Manager.Serving() {
		t.Fatal("Serving() with an invalid fence")
	}
	sent := 0 // requests sent to the manager from here on
	send := func(pool, verb string, body any) {
		t.Helper()
		data, _ := json.Marshal(body)
		if err := nc.PublishRequest(lease.Subject(lease.DefaultPrefix, node, pool, verb), nc.NewInbox(), data); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	verb := func(v string) string { return lease.Subject(lease.DefaultPrefix, node, "p", v) }
	services := []string{"$SRV.PING", "$SRV.INFO." + lease.ServiceName, lease.ResizeSubject(lease.DefaultPrefix, node)}
	wait := func(subjects ...string) {
		t.Helper()
		barrier(t, nc, &ignored, subjects...)
		sent += len(subjects)
	}
	send("q", lease.VerbAcquire, lease.AcquireRequest{RequestID: "free", Holder: "c", Slots: 1, Secret: "s"})
	send("p", lease.VerbAcquire, lease.AcquireRequest{RequestID: "full", Holder: "d", Slots: 1, Secret: "s"})
	send("p", lease.VerbRenew, lease.RenewRequest{LeaseID: "held", Token: held.Lease.Token, Secret: "s"})
	send("p", lease.VerbCancel, lease.CancelRequest{RequestID: "queued", Holder: "b", Secret: "s"})
	send("p", lease.VerbAcquire, lease.AcquireRequest{RequestID: "bad", Holder: "", Slots: 1})
	// The manager got the acquire for q: its slot is taken in memory, and
	// the grant's write was refused.
	harness.Eventually(t, 10*time.Second, "the acquire on q handled", func() bool { return harness.PoolStats(t, n.Manager, "q").InUse == 1 })
	// The release last, so that the renewal (handled on another
	// subscription) meets a live lease and tries its write.
	wait(verb(lease.VerbRenew))
	send("p", lease.VerbRelease, lease.ReleaseRequest{LeaseID: "held", Token: held.Lease.Token, Secret: "s"})
	// Discovery and a resize error (answered with micro's error headers)
	// go through the same fence.
	for _, subj := range services {
		if err := nc.PublishRequest(subj, nc.NewInbox(), []byte(`{"set":{"nope":0}}`)); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	// Every subscription has handled what it was sent; Close then waits
	// for whatever the handlers started (a grant's write). Anything the
	// manager published is at the spy after the two round trips.
	wait(append([]string{verb(lease.VerbAcquire), verb(lease.VerbRenew), verb(lease.VerbRelease), verb(lease.VerbCancel)}, services...)...)
	if err := n.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*nats.Conn{n.Conn, nc} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	requests := 0
	for _, m := range seen {
		switch s := m.Subject; {
		case strings.HasPrefix(s, lease.DefaultPrefix+"."+node+"."), strings.HasPrefix(s, "$SRV."):
			requests++ // what the test sent
		case strings.HasPrefix(s, "$JS.API."), s == "$JS.EVENT.ADVISORY.API":
			// reads (a renewal's revision check, the stream info below)
			// and the server's advisories about them
		case strings.HasPrefix(s, "$JS.EVENT.ADVISORY.CONSUMER.DELETED.KV_"+jetstream.NamesFor(lease.DefaultPrefix).Leases+"."),
			strings.HasPrefix(s, nats.InboxPrefix) && strings.Contains(string(m.Data), `"type":"io.nats.jetstream.api.v1.consumer_delete_response"`):
			// Close stopping the manager's watch: the server deletes its
			// consumer and answers the delete
		default:
			t.Errorf("fenced manager caused a message on %s: header %v, data %q", s, m.Header, m.Data)
		}
	}
	if requests != sent {
		t.Errorf("the spy saw %d requests, want the %d sent", requests, sent)
	}
	if after := lastSeq(t, nc); after != before {
		t.Errorf("lease bucket moved from sequence %d to %d with the fence invalid", before, after)
	}
	if storedQueueEntries(t, n) != 1 {
		t.Error("the queue entry was deleted with the fence invalid")
	}
	if _, rev, err := n.Store.Get(context.Background(), lease.RecordKey(node, "p", "held")); err != nil || rev != held.Lease.Token {
		t.Errorf("held lease record: rev %d err %v, want rev %d untouched", rev, err, held.Lease.Token)
	}
}

// A deposed manager that resumes and sees its successor's grant (a higher
// term) leaves it alone and stops serving; Run returns ErrLeadershipLost.
func TestDeposedManagerLeavesSuccessorsGrantAndStops(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := jetstream.OpenLeaseStore(ctx, nc, jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Leases})
	if err != nil {
		t.Fatal(err)
	}
	fence := newTestFence(5)
	m, err := manager.New(manager.Config{Node: node, TTL: 5 * time.Second, Instance: "old", Fence: fence,
		Conn: nc, Store: st, Logger: harness.Logger(), Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan bool, 2)
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx, func(s bool) { serving <- s }) }()
	if !<-serving {
		t.Fatal("Run reported not serving first")
	}

	// The successor (term 9) grants; this manager, still believing its
	// fence valid (it was frozen), sees the put after its rebuild.
	key, rev := storeRecord(t, harness.StartManagerStore(t, srv.URL), "succ", "successor", 9)
	select {
	case <-m.Deposed():
	case <-time.After(10 * time.Second):
		t.Fatal("manager not deposed by a later term's grant")
	}
	select {
	case err := <-ran:
		if !errors.Is(err, manager.ErrLeadershipLost) {
			t.Fatalf("Run after deposition: %v, want ErrLeadershipLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after deposition")
	}
	if s := <-serving; s {
		t.Fatal("Run did not report the end of serving")
	}
	if m.Serving() {
		t.Fatal("deposed manager reports Serving")
	}
	// Run returned after Close, which waits for everything the manager
	// runs: nothing of it is left to delete.
	if !stillStored(t, st, key, rev) {
		t.Fatal("the deposed manager deleted its successor's grant")
	}
}

// The current leader cleans up grants another instance stored after its
// term began, when their term is lower (or absent, or its own instance id
// from an earlier term); with its fence invalid it deletes nothing.
func TestLeaderDeletesOnlyLowerTermLateGrants(t *testing.T) {
	t.Parallel()
	fence := newTestFence(5)
	srv, n := startFenced(t, fence, nil)
	st := harness.StartManagerStore(t, srv.URL)

	type late struct {
		key string
		rev uint64
	}
	var gone []late
	for _, c := range []struct {
		id, manager string
		term        uint64
	}{{"older", "predecessor", 3}, {"noterm", "predecessor", 0}, {"sameinstance", "current", 4}} {
		key, rev := storeRecord(t, st, c.id, c.manager, c.term)
		gone = append(gone, late{key, rev})
	}
	for _, l := range gone {
		harness.Eventually(t, 10*time.Second, "late grant "+l.key+" deleted", func() bool { return !stillStored(t, st, l.key, l.rev) })
	}
	select {
	case <-n.Manager.Deposed():
		t.Fatal("deposed by a lower term")
	default:
	}

	fence.valid.Store(false)
	key, rev := storeRecord(t, st, "whilefenced", "predecessor", 3)
	// A later term's grant, stored after it, deposes the manager when its
	// watch, which takes records in order, comes to it; Close then waits
	// for whatever the watch started on the late grant.
	storeRecord(t, st, "later", "successor", 9)
	select {
	case <-n.Manager.Deposed():
	case <-time.After(10 * time.Second):
		t.Fatal("manager not deposed by a later term's grant")
	}
	if err := n.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	if !stillStored(t, st, key, rev) {
		t.Fatal("a manager with an invalid fence deleted a late grant")
	}
}
