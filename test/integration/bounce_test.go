package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// The confused-deputy attack (issue 28): JetStream answers an API request
// or a direct get on whatever reply subject the requester wrote, as the
// server, inside the requester's account, and a direct get's answer
// carries the stored message's headers. So an attacker stores bodies and
// headers it chooses in a bucket it may write, and bounces them with
// direct gets onto every subject the managers' state lives on.

// forgedHeader marks every message the attacks store, so a spy in the
// managers' account can tell them from the managers' own traffic.
const forgedHeader = "X-Slotlease-Forged"

// forgedMsgs are what the attacker stores: a resize that would grow,
// remove and starve pools, a lease record, and the KV operation and
// rollup headers that delete or wipe a bucket. (The job buckets refuse a
// per-message TTL, so the stored record carries none.)
func forgedMsgs(node, pool string) []*nats.Msg {
	resize := fmt.Sprintf(`{"set":{%q:99},"remove":["default"],"force":true,"rates":{%q:{"rate":"1/h"}}}`, pool, pool)
	record := fmt.Sprintf(`{"id":"forged","node":%q,"pool":%q,"holder":"mallory","slots":1,"token":1,"manager":"forged","ttl_ms":15000}`, node, pool)
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	return []*nats.Msg{
		{Data: []byte(resize), Header: hdr()},
		{Data: []byte(record), Header: hdr()},
		{Header: hdr("KV-Operation", "DEL")},
		{Header: hdr("KV-Operation", "PURGE")},
		{Header: hdr("Nats-Rollup", "sub")},
		{Header: hdr("Nats-Rollup", "all")},
	}
}

// bounceTargets are the subjects an attacker aims JetStream's answers at:
// the lease, leadership and pool keys, the control and request subjects,
// the events and the executors' disconnect advisories.
func bounceTargets(node, pool, heldID string) []string {
	n := jetstream.NamesFor(lease.DefaultPrefix)
	out := []string{
		"$KV." + n.Leases + "." + lease.RecordKey(node, pool, heldID),
		"$KV." + n.Leases + "." + lease.RecordKey(node, pool, "forged"),
		"$KV." + n.Leaders + "." + node,
		"$KV." + n.Leaders + "." + lease.ClusterNode,
		"$KV." + n.Leaders + ".cluster.candidates.forged",
		"$KV." + n.Pools + "." + node,
		lease.ResizeSubject(lease.DefaultPrefix, node),
		lease.StatsSubject(lease.DefaultPrefix, node),
		lease.EventSubject(lease.DefaultPrefix, node, pool, lease.EventGranted),
		jetstream.ExecutorDisconnectSubject,
		"$JS.API.STREAM.PURGE.KV_" + n.Leases,
	}
	return append(out, verbSubjects(node, pool)...)
}

// bounceWithDirectGets stores forgedMsgs in bucket (one the attacker may
// write, in its own account) and aims a direct get of each, and a stream
// info request, at every target. It returns once the server answered all
// of them: a last direct get, on the attacker's own inbox, comes after.
func bounceWithDirectGets(t *testing.T, nc *nats.Conn, bucket, nonce string, msgs []*nats.Msg, targets []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	get := func(i int) string {
		return fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%s.forged%d", bucket, bucket, i)
	}
	// One at a time: a rollup of everything wipes what came before it.
	for i, m := range msgs {
		m.Subject = fmt.Sprintf("$KV.%s.forged%d", bucket, i)
		m.Header.Set(forgedHeader, nonce)
		if len(m.Data) == 0 {
			m.Data = []byte(nonce)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("storing forged message %d: %v", i, err)
		}
		for _, target := range targets {
			if err := nc.PublishRequest(get(i), target, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nc.Request(get(i), nil, 10*time.Second); err != nil {
			t.Fatalf("the direct gets were not answered: %v", err)
		}
	}
	for _, target := range targets {
		if err := nc.PublishRequest("$JS.API.STREAM.INFO.KV_"+bucket, target, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The last message survives the rollup of everything before it.
	if _, err := nc.Request(get(len(msgs)-1), nil, 10*time.Second); err != nil {
		t.Fatalf("the direct gets were not answered: %v", err)
	}
}

// bounceWithRequests aims every request the attacker may send (each
// answered by the server or a manager, in whatever account) at every
// target: for a role without JetStream of its own.
func bounceWithRequests(t *testing.T, nc *nats.Conn, subjects []string, nonce string, targets []string) {
	t.Helper()
	for _, target := range targets {
		for _, s := range subjects {
			if err := nc.PublishMsg(&nats.Msg{Subject: s, Reply: target, Header: nats.Header{forgedHeader: []string{nonce}}, Data: []byte(`{"seq":1,"last_by_subj":"lease.events.>"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// managersSpy watches the managers' account for anything the attacks
// bounced there.
type managersSpy struct {
	nc    *nats.Conn
	nonce string

	mu          sync.Mutex
	crossed     []string // forged messages that reached a protected subject
	noReply     int      // forged messages that reached a request subject, without a reply
	withReply   []string // forged messages that reached a request subject with a reply
	requestSubs map[string]bool
}

// spyOnManagers subscribes, with the managers' rights, to every subject
// of their state and to the imported request subjects.
func spyOnManagers(t *testing.T, mgr *nats.Conn, nonce string) *managersSpy {
	t.Helper()
	s := &managersSpy{nc: mgr, nonce: nonce}
	forged := func(m *nats.Msg) bool {
		return m.Header.Get(forgedHeader) == nonce || strings.Contains(string(m.Data), nonce)
	}
	for _, subj := range []string{"$KV.>", "$SYS.>", lease.DefaultPrefix + ".events.>", lease.DefaultPrefix + ".*.resize"} {
		if _, err := mgr.Subscribe(subj, func(m *nats.Msg) {
			if forged(m) {
				s.mu.Lock()
				s.crossed = append(s.crossed, m.Subject)
				s.mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{lease.DefaultPrefix + ".*.*.*", lease.DefaultPrefix + ".*.stats", "$SRV.>"} {
		if _, err := mgr.Subscribe(subj, func(m *nats.Msg) {
			if !forged(m) {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if m.Reply == "" {
				s.noReply++
			} else if !strings.HasPrefix(m.Reply, lease.ServiceReplyPrefix+".") {
				s.withReply = append(s.withReply, m.Subject+" reply "+m.Reply)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// check fails the test if a forged message reached the managers' state, or
// a request subject with a reply the attacker chose. It flushes first: a
// message the server delivered to the spy before comes before the PONG.
func (s *managersSpy) check(t *testing.T, who string) (noReply int) {
	t.Helper()
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.crossed) > 0 {
		t.Errorf("%s: forged messages reached the managers' state: %v", who, s.crossed)
	}
	if len(s.withReply) > 0 {
		t.Errorf("%s: forged requests reached the managers with a reply subject of the attacker's: %v", who, s.withReply)
	}
	n := s.noReply
	s.crossed, s.withReply, s.noReply = nil, nil, 0
	return n
}

// Every credential leasemgr's embedded server hands out, tried as an
// attacker would through JetStream's answers, against the real binary: an
// executor bounces stored bodies and headers (a resize, a lease record
// with a TTL, KV-Operation DEL and PURGE, Nats-Rollup sub and all) with
// direct gets and API requests onto the lease, leadership and pool keys,
// resize, the request subjects, the events and the advisories; a reader
// aims every request it may send at them. Nothing reaches the managers'
// state; what reaches a request subject comes without a reply and is
// ignored (and counted); the node keeps serving with the same pools, the
// held lease renews, and the waiter behind it is not granted.
func TestJetStreamAnswersCannotReachLeaseState(t *testing.T) {
	const node, pool = "bounce", "gpu"
	env, httpAddr := managerEnv(t, node, pool+"=1", "15s")
	startManager(t, env, httpAddr)
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)
	mgr := mustConnectAs(t, home, url, config.RoleManager)
	client, err := lease.NewClient(mustConnectAs(t, home, url, config.RoleExecutor), node)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held, err := client.Acquire(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := lease.NewClient(mustConnectAs(t, home, url, config.RoleExecutor), node)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	granted := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, pool, 1)
		if err == nil {
			err = fmt.Errorf("the waiter was granted %s while the slot is held", l.Record().ID)
		}
		granted <- err
	}()
	eventually(t, 10*time.Second, "the waiter to queue", func() bool { return queuedIn(t, httpAddr, pool) == 1 })
	before := managerState(t, mgr, node)

	nonce := nuid.Next()
	spy := spyOnManagers(t, mgr, nonce)
	targets := bounceTargets(node, pool, held.Record().ID)

	exe := mustConnectAs(t, home, url, config.RoleExecutor)
	bounceWithDirectGets(t, exe, jobs.NamesFor(lease.DefaultPrefix).Results, nonce, forgedMsgs(node, pool), targets)
	exeNoReply := spy.check(t, "executor")

	reader := mustConnectAs(t, home, url, config.RoleReader)
	bounceWithRequests(t, reader, []string{
		"$JS.API.DIRECT.GET." + jetstream.NamesFor(lease.DefaultPrefix).Events,
		lease.StatsSubject(lease.DefaultPrefix, node), lease.SnapshotSubject(lease.DefaultPrefix, node), "$SRV.PING." + lease.ServiceName,
	}, nonce, targets)
	// Barrier: the reader's own requests are answered after the others.
	if _, err := reader.Request(lease.StatsSubject(lease.DefaultPrefix, node), nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	spy.check(t, "reader")
	t.Logf("forged messages that reached a request subject without a reply: %d (executor)", exeNoReply)

	// Barriers on the manager's side: a request on the same subscription
	// is handled after everything that came before it.
	if r := rawRequest(t, exe, lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbRelease),
		map[string]any{"lease_id": held.Record().ID, "token": held.Record().Token + 1}); r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
		t.Fatalf("release barrier: %+v", r)
	}
	select {
	case err := <-granted:
		t.Fatal(err)
	case <-held.Done():
		t.Fatalf("the held lease was lost: %v", held.Err())
	default:
	}
	if got := managerState(t, mgr, node); got != before {
		t.Errorf("after the attacks:\n%s\nbefore:\n%s", got, before)
	}
	if n := refusedReplies(t, httpAddr, node); exeNoReply > 0 && n < exeNoReply {
		t.Errorf("lease_replies_refused_total %d: the %d requests without a reply were not all counted", n, exeNoReply)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; !strings.Contains(fmt.Sprint(err), "while the slot is held") {
		t.Fatalf("the waiter after the release: %v", err)
	}
}

// managerState is what the attacks must not change, read with the
// managers' rights: the node's pools and rates, its leadership key's
// holder, its pool delta, and the keys of the lease bucket.
func managerState(t *testing.T, mgr *nats.Conn, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	stats := rawRequest(t, mgr, lease.StatsSubject(lease.DefaultPrefix, node), map[string]any{})
	for _, p := range stats.Pools {
		fmt.Fprintf(&b, "pool %s capacity %d in use %d queued %d rate %q burst %d\n", p.Name, p.Capacity, p.InUse, p.QueuedRequests, p.Rate, p.Burst)
	}
	js, err := natsjs.New(mgr)
	if err != nil {
		t.Fatal(err)
	}
	n := jetstream.NamesFor(lease.DefaultPrefix)
	for _, bucket := range []string{n.Leases, n.Leaders, n.Pools} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := kv.Keys(ctx)
		fmt.Fprintf(&b, "%s keys %v\n", bucket, keys)
	}
	kv, _ := js.KeyValue(ctx, n.Leaders)
	if e, err := kv.Get(ctx, node); err == nil {
		var rec lease.LeaderRecord
		_ = json.Unmarshal(e.Value(), &rec)
		fmt.Fprintf(&b, "leader %s\n", rec.Instance)
	} else {
		fmt.Fprintf(&b, "leader: %v\n", err)
	}
	return b.String()
}
