package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// Every credential leasemgr's embedded server hands out, tried as an
// attacker would through JetStream's answers (harness.BounceWithDirectGets)
// against the real binary: an executor bounces stored bodies and headers (a
// resize, a lease record, KV-Operation DEL and PURGE, Nats-Rollup sub and all) with
// direct gets and API requests onto the lease, leadership and pool keys,
// resize, the request subjects, the events and the advisories; a reader
// aims every request it may send at them. Nothing reaches the managers'
// state; what reaches a request subject comes without a reply and is
// ignored (and counted); the node keeps serving with the same pools, the
// held lease renews, and the waiter behind it is not granted.
func TestJetStreamAnswersCannotReachLeaseState(t *testing.T) {
	t.Parallel()
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
	// Its queue entry is written once it has waited 50 ms, and the pool
	// counts within a second of the grant: the state to keep is the one
	// with the entry stored beside the lease, and the counts stored.
	var before string
	eventually(t, 30*time.Second, "the waiter's queue entry and the pool counts stored", func() bool {
		before = managerState(t, mgr, node)
		return storedKeys(before, jetstream.NamesFor(lease.DefaultPrefix).Leases) == 2 && strings.Contains(before, node+".counts")
	})

	nonce := nuid.Next()
	spy := harness.SpyOnManagers(t, mgr, nonce)
	targets := harness.BounceTargets(node, pool, held.Record().ID)

	exe := mustConnectAs(t, home, url, config.RoleExecutor)
	harness.BounceWithDirectGets(t, exe, jobs.NamesFor(lease.DefaultPrefix).Results, nonce, harness.ForgedMsgs(node, pool), targets)
	exeNoReply := spy.Check(t, "executor")

	reader := mustConnectAs(t, home, url, config.RoleReader)
	harness.BounceWithRequests(t, reader, append([]string{
		"$JS.API.DIRECT.GET." + jetstream.NamesFor(lease.DefaultPrefix).Events,
		lease.StatsSubject(lease.DefaultPrefix, node), lease.SnapshotSubject(lease.DefaultPrefix, node),
	}, harness.DiscoveryRequests()...), nonce, targets)
	// Barrier: the reader's own requests are answered after the others.
	if _, err := reader.Request(lease.StatsSubject(lease.DefaultPrefix, node), nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	spy.Check(t, "reader")
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
		var rec manager.LeaderRecord
		_ = json.Unmarshal(e.Value(), &rec)
		fmt.Fprintf(&b, "leader %s\n", rec.Instance)
	} else {
		fmt.Fprintf(&b, "leader: %v\n", err)
	}
	return b.String()
}

// storedKeys counts the keys managerState lists for bucket.
func storedKeys(state, bucket string) int {
	_, rest, ok := strings.Cut(state, bucket+" keys [")
	if !ok {
		return 0
	}
	list, _, _ := strings.Cut(rest, "]")
	return len(strings.Fields(list))
}
