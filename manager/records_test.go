package manager_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// refusals counts RecordRefused calls by reason.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[reason]++
}

func (r *refusals) get(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// forge writes, with an attacker's connection that has full rights on the
// lease bucket, one record per refusal reason, each holding slots of pool
// p and each naming the manager instance inst where it names one. It
// returns the reasons it expects the manager to refuse them for.
func forge(t *testing.T, url, inst, round string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(harness.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, sljs.NamesFor(lease.DefaultPrefix).Leases)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string, slots int64, writer string) []byte {
		now := time.Now().UTC()
		b, err := json.Marshal(lease.Record{ID: id, Node: node, Pool: "p", Slots: slots, Holder: "attacker", TTLMs: 60000,
			GrantedAt: now, ExpiresAt: now.Add(time.Hour), Manager: writer})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key := func(id string) string { return lease.RecordKey(node, "p", id) }
	ttl := jetstream.KeyTTL(time.Minute)
	put := func(id string, value []byte, withTTL bool) {
		t.Helper()
		var err error
		if withTTL {
			_, err = kv.Create(ctx, key(id), value, ttl)
		} else {
			_, err = kv.Put(ctx, key(id), value)
		}
		if err != nil {
			t.Fatalf("attacker's put of %s: %v", id, err)
		}
	}
	// Naming the current instance, without a TTL: a restart would have
	// counted it for good.
	put("nottl"+round, rec("nottl"+round, 1, inst), false)
	// A queue entry without a TTL, its reply aimed at the leadership key.
	put("nottlq"+round, []byte(`{"id":"nottlq`+round+`","node":"`+node+`","pool":"p","slots":1,"holder":"attacker","manager":"`+inst+
		`","queued":true,"reply_to":"$KV.lease_leaders.`+node+`","queued_at":1}`), false)
	put("foreign"+round, rec("foreign"+round, 1, ""), true)
	put("garbage"+round, []byte("not a record {"), true)
	// A grant may be stored at another lease's key of its pool (a slot
	// handed over to it), a queue entry never.
	put("wrongkey"+round, []byte(`{"id":"someoneelse","node":"`+node+`","pool":"p","slots":1,"holder":"attacker","manager":"`+inst+
		`","queued":true,"reply_to":"_INBOX.x","queued_at":1}`), true)
	put("noslots"+round, rec("noslots"+round, 0, inst), true)
	return []string{manager.RefusedNoTTL, manager.RefusedForeign, manager.RefusedUnreadable, manager.RefusedKey, manager.RefusedShape}
}

// Records the manager did not write, or written without a TTL, are never
// counted: not when they appear while it serves, not when it rebuilds after
// a restart. Each is refused and counted by reason, and the pool keeps
// granting as if they were not there.
func TestForgedRecordsAreRefused(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	const inst = "instance-1"
	live := &refusals{n: map[string]int{}}
	var logged harness.SyncBuffer
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Instance: inst, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}, RecordRefused: live.add,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	held, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}

	// While it serves.
	reasons := forge(t, srv.URL, inst, "a")
	for _, r := range reasons {
		harness.Eventually(t, 10*time.Second, "live refusal "+r, func() bool { return live.get(r) >= 1 })
	}
	if got := live.get(manager.RefusedNoTTL); got != 2 {
		t.Errorf("%d no_ttl refusals, want 2 (a grant and a queue entry)", got)
	}
	// Logged, but once per reason and interval: a writer cannot flood the log.
	if n := strings.Count(logged.String(), "reason=no_ttl"); n != 1 {
		t.Errorf("%d log lines for 2 no_ttl refusals, want 1:\n%s", n, logged.String())
	}
	if s := harness.PoolStats(t, first.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 0 {
		t.Fatalf("after forged records: %+v, want only the real lease's slot in use", s)
	}

	// At a restart (the same instance id: the forged records name it).
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	forge(t, srv.URL, inst, "b") // more, while no manager runs
	rebuilt := &refusals{n: map[string]int{}}
	cfg.RecordRefused = rebuilt.add
	second := harness.StartManager(t, srv.URL, cfg)
	for _, r := range reasons {
		if rebuilt.get(r) < 2 {
			t.Errorf("rebuild refused %d records for %s, want both rounds' (2)", rebuilt.get(r), r)
		}
	}
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 1 || s.QueuedRequests != 0 {
		t.Fatalf("after the rebuild: %+v, want only the real lease's slot in use", s)
	}
	// The free slot is granted at once, and a waiter behind it is granted
	// when the real holder releases.
	other, err := c.Acquire(ctx, "p", 1, lease.NoWait())
	if err != nil {
		t.Fatalf("the free slot: %v", err)
	}
	got, errc, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := mustGrant(t, got, errc)
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 2 {
		t.Fatalf("stats %+v, want the 2 real leases", s)
	}
	_ = waiter.Release(ctx)
	_ = other.Release(ctx)
	// Refused records are not deleted: only their writer knows they are junk.
	if _, _, err := second.Store.Get(ctx, lease.RecordKey(node, "p", "nottla")); err != nil {
		t.Errorf("the forged record was deleted: %v", err)
	}
}

// Every record a manager writes carries a TTL and its instance id, grants
// and queue entries alike, as the jetstream watch reports them: the next
// manager would refuse any that did not.
func TestManagerRecordsCarryTTLAndManager(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	refused := &refusals{n: map[string]int{}}
	cfg := manager.Config{Node: node, TTL: 2 * time.Second, Instance: "me", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}, RecordRefused: refused.add}
	n := harness.StartManager(t, srv.URL, cfg)
	store := harness.StartManagerStore(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := store.Watch(ctx, lease.NodeKeys(node))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()

	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(200*time.Millisecond))
	a, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	got, errc, _ := harness.QueuedAcquire(t, c, waitCtx, "p", 1, lease.WithWait(time.Minute))
	harness.Eventually(t, 10*time.Second, "a queue entry stored", func() bool { return storedQueueEntries(t, n) == 1 })
	// A renewal of a (every TTL/3), whose write the watch checks too.
	renewedFrom := a.Deadline()
	harness.Eventually(t, 10*time.Second, "a renewal of a", func() bool { return a.Deadline().After(renewedFrom) })
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := mustGrant(t, got, errc)
	_ = b.Release(ctx)

	var puts, entries, grants int
	deadline := time.After(10 * time.Second)
	for entries == 0 || grants < 2 {
		select {
		case ch, ok := <-w.Changes():
			if !ok {
				t.Fatal("watch ended")
			}
			if ch.Op != manager.ChangePut {
				continue
			}
			puts++
			var v struct {
				Manager string `json:"manager"`
				Queued  bool   `json:"queued"`
			}
			if err := json.Unmarshal(ch.Value, &v); err != nil {
				t.Fatalf("%s: %v", ch.Key, err)
			}
			if ch.TTL <= 0 || v.Manager != "me" {
				t.Fatalf("%s stored with TTL %v and manager %q: %s", ch.Key, ch.TTL, v.Manager, ch.Value)
			}
			if v.Queued {
				entries++
			} else {
				grants++
			}
		case <-deadline:
			t.Fatalf("saw %d puts (%d queue entries, %d grants), want a queue entry and 2 grants", puts, entries, grants)
		}
	}
	for _, r := range manager.RefusalReasons {
		if refused.get(r) != 0 {
			t.Errorf("the manager refused %d of its own records for %s", refused.get(r), r)
		}
	}
}

// A queue entry expires (its TTL lapses while its request still waits): the
// request keeps its place, and its grant is created anew instead of failing
// on the entry's vanished revision.
func TestGrantAfterQueueEntryExpired(t *testing.T) {
	t.Cleanup(manager.SetQueueEntryTTL(time.Second)) // registered first: runs after the manager's Close
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	held := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "holder", Holder: "h", Slots: 1})
	if held.Status != lease.StatusGranted {
		t.Fatalf("first acquire: %+v", held)
	}
	sub := sendAcquire(t, nc, lease.AcquireRequest{RequestID: "waiter", Holder: "h", Slots: 1})
	wantQueued(t, "waiter", sub, 1)
	harness.Eventually(t, 10*time.Second, "the queue entry stored", func() bool { return storedQueueEntries(t, n) == 1 })
	harness.Eventually(t, 10*time.Second, "the queue entry expired", func() bool { return storedQueueEntries(t, n) == 0 })
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 1 {
		t.Fatalf("after the entry expired: %+v, want the request still queued", s)
	}
	rel := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRelease), lease.ReleaseRequest{LeaseID: "holder", Token: held.Lease.Token})
	if rel.Status != lease.StatusReleased {
		t.Fatalf("release: %+v", rel)
	}
	if r := nextReply(t, sub); r.Status != lease.StatusGranted || r.Lease == nil || r.Lease.ID != "waiter" {
		t.Fatalf("the waiter after its entry expired: %+v, want granted", r)
	}
}
