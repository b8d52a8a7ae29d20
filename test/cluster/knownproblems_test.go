package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/manager"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// Deterministic reproductions of the problems the fault suite found in
// lease/ (docs/guarantees.md, "Known problems"): two holders of one slot
// (1, 2), a stalled takeover (3), a phantom waiter (4), a live lease refused
// (5). All five are fixed; these reproductions run in every test run as
// regression tests.

// pair is one node with an active manager and a hot standby, and a direct
// connection for clients.
type pair struct {
	cluster *Cluster
	st      Settings
	a, b    *Candidate
	nc      *nats.Conn
	kv      jetstream.KeyValue
}

func startPair(t *testing.T, leaseTTL time.Duration) *pair {
	t.Helper()
	return startPairOf(t, leaseTTL, []manager.PoolConfig{{Name: "gpu", Capacity: 1}})
}

// startPairOf is startPair serving pools.
func startPairOf(t *testing.T, leaseTTL time.Duration, pools []manager.PoolConfig) *pair {
	t.Helper()
	return startPairWith(t, Settings{LeaseTTL: leaseTTL}, pools)
}

// startPairWith is startPairOf with st's timings (the suite's defaults for
// those it leaves zero).
func startPairWith(t *testing.T, st Settings, pools []manager.PoolConfig) *pair {
	t.Helper()
	// Starting a cluster beside the other suites can take a while; two
	// minutes only catch one that never comes up.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st.Logger = harness.Logger()
	cl := provisionedCluster(ctx, t, &st)
	a, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: "node1", Instance: "a", Pools: pools})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Crash)
	harness.Eventually(t, 2*time.Minute, "a leads", a.Serving) // only catches one that never does: the cluster may start slowly beside other suites
	b, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: "node1", Instance: "b", Pools: pools, Upstream: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	nc, err := dial(ctx, cl.URL(), "clients", cl.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The lease bucket is the managers': read it with their rights.
	mgr, err := dial(ctx, cl.URL(), "lease bucket", cl.Auth(config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	js, _ := jetstream.New(mgr)
	kv, err := js.KeyValue(ctx, sljs.NamesFor(st.Prefix).Leases)
	if err != nil {
		t.Fatal(err)
	}
	return &pair{cluster: cl, st: st, a: a, b: b, nc: nc, kv: kv}
}

// rawAcquire sends an acquire and returns the first answer given to it.
// It re-sends the same request (same id, holder and secret) when 5 s pass
// without an answer, as lease.Client does after a timeout, and never
// after an answer, so the test decides when the holder asks again. The
// re-send is needed: a manager whose leadership lapsed while its
// connection was cut (the suite's LEADER_TTL is 1 s, which a loaded
// machine can miss) answers nothing, and only its successor answers the
// re-send. A budget of a minute, not a bound: after a cut the manager
// reconnects and asks the store before it answers, which took over 5 s
// on a loaded machine.
func (p *pair) rawAcquire(t *testing.T, id, holder, secret string) lease.Reply {
	t.Helper()
	body, _ := json.Marshal(lease.AcquireRequest{RequestID: id, Holder: holder, Slots: 1, Secret: secret})
	subject := lease.Subject(p.st.Prefix, "node1", "gpu", lease.VerbAcquire)
	deadline := time.Now().Add(time.Minute)
	for {
		msg, err := p.nc.Request(subject, body, 5*time.Second)
		if time.Now().Before(deadline) {
			switch {
			case errors.Is(err, nats.ErrTimeout):
				t.Logf("acquire %s: no answer in 5 s; sending it again", id)
				continue
			case errors.Is(err, nats.ErrNoResponders):
				// Between two leaders: nobody serves the subject.
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		if err != nil {
			t.Fatalf("acquire %s: %v", id, err)
		}
		var r lease.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// retry acquires again with the same request id, holder and secret, as
// lease.Client does after an unavailable answer or a timeout.
func (p *pair) retry(t *testing.T, id, holder, secret string) (*lease.Lease, error) {
	t.Helper()
	c, err := lease.NewClient(p.nc, "node1", lease.WithHolder(holder), lease.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Acquire(ctx, "gpu", 1, lease.WithRequestID(id), lease.WithSecret(secret), lease.WithWait(2*time.Second))
}

func (p *pair) acquireOther(t *testing.T) *lease.Lease {
	t.Helper()
	c, err := lease.NewClient(p.nc, "node1", lease.WithHolder("other"), lease.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A budget, not a bound: the pool's one slot is free, and 3 s ran out
	// at a load of 45 on 2 cores while the suite's 1 s leadership lapsed
	// again and again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "gpu", 1, lease.WithRequestID("other"))
	if err != nil {
		t.Fatalf("the other executor: %v", err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// Fixed problem 1 (regression test): a grant whose write is stored but
// whose acknowledgement is lost (here: the manager's connection resets
// right after sending it) used to be answered "unavailable" while the record
// stayed, an orphan the pool no longer counted. The manager now keeps the
// slots until a read of the key shows whether the write was stored, and
// keeps the grant if it was.
func TestLostGrantAckIsNotOrphaned(t *testing.T) {
	t.Parallel()
	p := startPair(t, 8*time.Second)
	key := lease.RecordKey("node1", "gpu", "victim")
	p.a.Proxy.CutOn("$KV." + sljs.NamesFor(p.st.Prefix).Leases + "." + key)
	r := p.rawAcquire(t, "victim", "victim-holder", "s3cret")
	if _, err := p.kv.Get(context.Background(), key); err != nil {
		// The cut came before the write was stored: then unavailable is
		// the right answer, and nothing is orphaned.
		if r.Error == nil || r.Error.Code != lease.CodeUnavailable {
			t.Fatalf("nothing stored, yet the acquire was answered %+v", r)
		}
		return
	}
	if r.Status != lease.StatusGranted || r.Lease == nil {
		t.Fatalf("%s is stored, but the acquire was answered %+v: an orphan record", key, r)
	}
}

// Known problem 2: a grant write that a manager sent before losing its
// leadership can reach the store after a standby took over (a delayed TCP
// segment, here held by the proxy). The successor has already re-granted
// the slot; it counts the late record when its watch shows it, and answers
// the first holder's retry with it: two holders of a one-slot pool. The
// auditor reports the write as stored by one instance while another led.
//
// Fixed: a manager past its leadership deadline tells nobody of a grant it
// stored late, and a successor deletes, rather than counts, grants another
// instance stored after it took over. This reproduction now checks that.
func TestLateGrantAfterTakeoverIsNotHonoured(t *testing.T) {
	t.Parallel()
	p, _, other, landed := heldLateGrant(t)
	p.a.Proxy.Heal()
	// The delayed write reaches the store now, and b deletes it as soon as
	// its watch shows it. The retry comes right after the write landed,
	// before or after b's delete: either way it must not give the slot a
	// second holder.
	landed()
	p.retryMustNotGrant(t, other)
}

// Problem 9 (fixed): the late grant of problem 2 lands, and before the
// successor b deletes it, b goes (crashed here, its delete held) and a
// takes over again. a's rebuild counts every record in the store, the late
// grant beside the lease b granted in its place: the pool holds 2 slots of
// 1, and the late holder's retry used to be answered with the late grant.
// A record restored from an earlier term is now not handed out while its
// pool holds more slots than it has.
func TestLateGrantCountedByARebuildIsNotHandedOut(t *testing.T) {
	t.Parallel()
	p, key, other, landed := heldLateGrant(t)
	p.b.Proxy.StallOn(keySubject(p, key)) // b's delete of the late grant
	p.a.Proxy.Heal()
	landed()
	p.b.Crash()
	harness.Eventually(t, 30*time.Second, "a takes over from the crashed b", p.a.Serving)
	p.retryMustNotGrant(t, other)
}

func keySubject(p *pair, key string) string {
	return "$KV." + sljs.NamesFor(p.st.Prefix).Leases + "." + key
}

// heldLateGrant makes the late grant of problem 2: a's grant write for
// request "late" is held by a's proxy until the test heals it, b takes
// over and grants the pool's one slot to "other". landed waits until the
// held write has reached the store once healed.
func heldLateGrant(t *testing.T) (p *pair, key string, other *lease.Lease, landed func()) {
	t.Helper()
	p = startPair(t, 8*time.Second)
	key = lease.RecordKey("node1", "gpu", "late")
	p.a.Proxy.StallOn(keySubject(p, key))
	go func() {
		// No answer will come while the write is held.
		body, _ := json.Marshal(lease.AcquireRequest{RequestID: "late", Holder: "late-holder", Slots: 1, Secret: "s3cret"})
		_ = p.nc.PublishRequest(lease.Subject(p.st.Prefix, "node1", "gpu", lease.VerbAcquire), p.nc.NewInbox(), body)
	}()
	harness.Eventually(t, 5*time.Second, "a's grant write held by the proxy", p.a.Proxy.Stalled)
	harness.Eventually(t, 30*time.Second, "b takes over from the stalled a", p.b.Serving)
	other = p.acquireOther(t)
	t.Logf("b granted the slot to %q, token %d", "other", other.Token())

	w, err := p.kv.Watch(context.Background(), key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return p, key, other, func() {
		t.Helper()
		select {
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				t.Fatalf("the first change of %s after the heal: %v, want the late grant's put", key, e)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the held grant write never reached the store")
		}
	}
}

// retryMustNotGrant retries the late request as its client would: it must
// not be granted while other holds the pool's one slot.
func (p *pair) retryMustNotGrant(t *testing.T, other *lease.Lease) {
	t.Helper()
	late, err := p.retry(t, "late", "late-holder", "s3cret")
	if err == nil {
		defer late.Release(context.Background())
		t.Errorf("two holders of a one-slot pool: %q token %d and %q token %d", "late-holder", late.Token(), "other", other.Token())
	} else {
		t.Logf("retry: %v", err)
	}
}

// Known problem 3: a manager that takes over rebuilds its state from a KV
// watch and serves only once the watch has delivered the stored records.
// If its connection resets while the watch delivers them, the watch
// (nats.go's ordered consumer) notices the gap only at its next idle
// heartbeat, seconds later; meanwhile Start waits without a bound while
// RunLeader keeps renewing the leadership, so no standby can step in and
// the node has no serving manager. Leases whose holders renew in that time
// are lost. Found by the fault suite (seed 408375: a 7.2s takeover).
//
// Fixed: Start gives up when the watch setup or the rebuild stalls for
// RebuildStall, and RunLeader retries soon after. This reproduction checks
// that the takeover took that path (b's first attempt to serve ended with
// the stall, where the unfixed Start waited for nats.go to notice the gap)
// and that the lease is kept.
//
// The timings are the product's defaults (a 15 s lease TTL, a 5 s
// LEADER_TTL), not the fault suite's 4 s and 1 s: the fixed takeover took
// 2.2 s idle but 3.5-5 s on a busy machine (two copies of the suite at
// once, load 11), past the 4 s TTL, while the unfixed one took 6.2 s
// idle, so no bound on the time tells the two apart on every machine; the
// path taken does. And at load 15 the 1 s leadership lapsed while b set
// up its watch, which ended that attempt ("context canceled") before the
// stall check could: a path the unfixed Start can take as well.
func TestTakeoverDoesNotStallOnWatchGap(t *testing.T) {
	t.Parallel()
	p := startPairWith(t, Settings{LeaseTTL: 15 * time.Second, LeaderTTL: 5 * time.Second}, []manager.PoolConfig{{Name: "gpu", Capacity: 1}})
	c, err := lease.NewClient(p.nc, "node1", lease.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(context.Background(), "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// The first stored record the standby's rebuild watch receives is
	// lost with a connection reset.
	p.b.Proxy.CutOnServer("$KV." + sljs.NamesFor(p.st.Prefix).Leases + ".node1.")
	crashed := time.Now()
	p.a.Crash()
	harness.Eventually(t, time.Minute, "b serves after a crashed", p.b.Serving)
	t.Logf("b served %v after a crashed", time.Since(crashed).Round(time.Millisecond))
	stalled := false
	for _, err := range p.b.ServeErrors() {
		t.Logf("b's attempt to serve ended: %v", err)
		stalled = stalled || strings.Contains(err.Error(), "the watch delivered nothing for") || strings.Contains(err.Error(), "setting up the watch took longer than")
	}
	if !stalled {
		t.Errorf("b served without giving up on its stalled rebuild watch first (attempts that failed: %v)", p.b.ServeErrors())
	}
	select {
	case <-l.Done():
		t.Errorf("lease lost across the takeover: %v", l.Err())
	default:
	}
}

// Known problem 4: a queue entry (stored without a TTL) whose delete fails
// stays in the bucket; the manager that failed to delete it has forgotten
// the request. The next manager of the node restores it as a waiter. A
// restored request without a wait deadline is granted in its turn, to a
// client that gave up long ago: nobody confirms the lease, and it holds its
// slots for a whole TTL ahead of the real waiters. Found by the fault suite
// as queue entries left after the drain (long run, seeds 784172, 379410).
// Problem 4 is fixed (deletes are retried until stored); this reproduction
// now checks the fix and would show a phantom waiter again if it came back.
func TestPhantomWaiterAfterFailedDelete(t *testing.T) {
	t.Parallel()
	// a must stay the node's manager through the reset that drops its
	// delete, to retry it: at load 16-20 the suite's 1 s leadership lapsed
	// there, a's term ended before its retry (a deposed manager writes
	// nothing), b restored the entry, and the test waited out its minute.
	// So the product's default timings: a 5 s LEADER_TTL, and a 15 s lease
	// TTL, which the other holder's lease must outlast the takeover below
	// with. A phantom costs the real waiter a TTL whatever the TTL is.
	p := startPairWith(t, Settings{LeaseTTL: 15 * time.Second, LeaderTTL: 5 * time.Second}, []manager.PoolConfig{{Name: "gpu", Capacity: 1}})
	holder := p.acquireOther(t)
	// A waiter queues without a wait deadline, then gives up; the delete
	// of its queue entry never reaches the store.
	c, err := lease.NewClient(p.nc, "node1", lease.WithHolder("quitter"), lease.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := lease.RecordKey("node1", "gpu", "quitter")
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan struct{}, 1)
	done := make(chan struct{})
	var quit error // the quitter's Acquire's end, once done is closed
	go func() {
		defer close(done)
		var l *lease.Lease
		l, quit = c.Acquire(ctx, "gpu", 1, lease.WithRequestID("quitter"), lease.OnQueued(func(int) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
		if l != nil {
			_ = l.Release(context.Background())
		}
	}()
	select {
	case <-queued:
	case <-done:
		// The other holder's lease was lost (on a machine so loaded that
		// the suite's 1 s LEADER_TTL lapsed again and again), or the
		// acquire failed: there is no queue to leave.
		t.Fatalf("the quitter's acquire ended before it was queued (err %v): the premise of the test is gone", quit)
	case <-time.After(30 * time.Second):
		t.Fatal("the quitter's acquire was not queued within 30 s")
	}
	harness.Eventually(t, 5*time.Second, "the queue entry stored", func() bool {
		_, err := p.kv.Get(context.Background(), key)
		return err == nil
	})
	p.a.Proxy.DropOn("$KV." + sljs.NamesFor(p.st.Prefix).Leases + "." + key)
	cancel()
	<-done
	// Fixed: the manager retries the delete until it is stored (after its
	// connection, reset by the drop, comes back: seconds on a busy
	// machine), so no phantom waiter is left for a successor. Only a
	// delete never retried waits the whole minute.
	harness.Eventually(t, time.Minute, "the retried delete of "+key+" stored", func() bool {
		_, err := p.kv.Get(context.Background(), key)
		return err != nil
	})

	// The node's manager changes; the successor restores the entry.
	p.a.Crash()
	harness.Eventually(t, 30*time.Second, "b takes over", p.b.Serving)
	// A real waiter queues, and the slot is released.
	w, err := lease.NewClient(p.nc, "node1", lease.WithHolder("real"), lease.WithRequestTimeout(300*time.Millisecond), lease.WithPollInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan time.Duration, 1)
	realQueued := make(chan struct{})
	var once sync.Once
	go func() {
		start := time.Now()
		l, err := w.Acquire(context.Background(), "gpu", 1, lease.WithWait(3*p.st.LeaseTTL),
			lease.OnQueued(func(int) { once.Do(func() { close(realQueued) }) }))
		if err == nil {
			_ = l.Release(context.Background())
		}
		got <- time.Since(start)
	}()
	select {
	case <-realQueued:
	case <-time.After(10 * time.Second):
		t.Fatal("the real waiter was not queued")
	}
	_ = holder.Release(context.Background())
	took := <-got
	t.Logf("the real waiter was granted %v after queueing", took.Round(time.Millisecond))
	// A phantom granted ahead of it holds the slot until its record
	// expires, a whole TTL after the release. Half the TTL was this
	// test's bound; a load of 45 on 2 cores, the suite's 1 s leadership
	// lapsing again and again, took 3.1 s without any phantom.
	if took >= p.st.LeaseTTL {
		t.Errorf("the real waiter waited %v behind a restored request whose client had given up", took.Round(time.Millisecond))
	}
}

// Known problem 5: a renewal whose write is stored but whose
// acknowledgement is late or lost is retried by the holder (its request
// timed out); the manager renews again with the revision it knew, which
// the first write has moved. Unless the manager's watch has already shown
// it the first write, the compare-and-set fails and it answers
// lease_not_found ("expired before the renewal") for a record that is
// alive: the holder loses a live lease. Found by the fault suite (seed
// 395559) during a server stop that moved the lease bucket's leader, which
// delays both acknowledgements and watches. Here the proxy drops the
// renewal's acknowledgement and the watch's copy of the record.
// Problem 5 is fixed (a renewal on a revision mismatch reads the key); this
// reproduction now checks the fix.
func TestRenewalAfterLostAckKeepsLease(t *testing.T) {
	t.Parallel()
	// a must keep serving through the cut below, which the suite's 1 s
	// LEADER_TTL does not ensure on a busy machine (two copies of the
	// suite, load 16: b took over and a never served again). The
	// product's default leadership TTL outlasts a reconnect under load;
	// the lease's TTL must exceed it.
	p := startPairWith(t, Settings{LeaseTTL: 8 * time.Second, LeaderTTL: 5 * time.Second}, []manager.PoolConfig{{Name: "gpu", Capacity: 1}})
	c, err := lease.NewClient(p.nc, "node1", lease.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := lease.RecordKey("node1", "gpu", "renewer")
	subject := "$KV." + sljs.NamesFor(p.st.Prefix).Leases + "." + key
	var mu sync.Mutex
	armed, ackDropped := false, false
	p.a.Proxy.FilterServer(func(subj string, payload []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		if !armed {
			return false
		}
		if subj == subject {
			return true // the manager's watch never sees the record change
		}
		if !ackDropped && bytes.Contains(payload, []byte(`"stream":"KV_`+sljs.NamesFor(p.st.Prefix).Leases+`"`)) {
			ackDropped = true // the next write acknowledgement of the lease bucket
			return true
		}
		return false
	})
	p.a.Proxy.Cut() // the manager reconnects through the filter
	harness.Eventually(t, 30*time.Second, "a serves after its reconnect", func() bool {
		return p.a.Serving() && p.a.nc.IsConnected()
	})
	l, err := c.Acquire(context.Background(), "gpu", 1, lease.WithRequestID("renewer"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	mu.Lock()
	armed = true
	mu.Unlock()
	select {
	case <-l.Done():
		_, err := p.kv.Get(context.Background(), key)
		t.Errorf("a live lease was refused on renewal: %v (its record still stored: %v)", l.Err(), err == nil)
	case <-time.After(p.st.LeaseTTL):
		t.Logf("lease kept across a renewal whose acknowledgement was lost")
	}
}
