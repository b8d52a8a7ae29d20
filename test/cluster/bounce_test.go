package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// The JetStream-answer attack of issue 28 on the 3-server cluster running
// the account layout: an executor connected to one server bounces stored
// bodies and headers at the managers' state, whose manager is connected
// to another; a reader aims its requests there. Nothing reaches the
// managers' account, the held lease keeps its slot and the waiter behind
// it is not granted.
func TestJetStreamAnswersOnTheCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := Settings{Replicas: 3, Logger: harness.Logger()}
	cl := provisionedCluster(ctx, t, &st)
	const node, pool = "node1", "gpu"
	c, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: node, Instance: "m", Pools: []manager.PoolConfig{{Name: pool, Capacity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	harness.Eventually(t, 2*time.Minute, "the manager serves", c.Serving) // only catches one that never does

	addr := func(i int) string { return "nats://" + cl.ClientAddr(i) }
	exeNC, err := dial(ctx, addr(1), "executor", cl.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	defer exeNC.Close()
	holder, err := lease.NewClient(exeNC, node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	held, err := holder.Acquire(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := lease.NewClient(exeNC, node)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	granted := make(chan *lease.Lease, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		if l, err := waiter.Acquire(wctx, pool, 1); err == nil {
			granted <- l
		}
	}()

	// The job queue, as leasemgr's administrator makes it.
	adminNC, err := dial(ctx, addr(2), "jobs admin", natsconn.Auth{}, cl.JobsAdmin())
	if err != nil {
		t.Fatal(err)
	}
	defer adminNC.Close()
	if _, err := jobs.Open(ctx, adminNC, jobs.Config{Prefix: st.Prefix, Replicas: 3, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}

	mgrNC, err := dial(ctx, addr(0), "spy", cl.Auth(config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	defer mgrNC.Close()
	nonce := nuid.Next()
	spy := harness.SpyOnManagers(t, mgrNC, nonce)
	targets := harness.BounceTargets(node, pool, held.Record().ID)
	attacker, err := dial(ctx, addr(2), "attacker", cl.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	harness.BounceWithDirectGets(t, attacker, jobs.NamesFor(st.Prefix).Results, nonce, harness.ForgedMsgs(node, pool), targets)
	spy.Check(t, "executor")
	reader, err := dial(ctx, addr(1), "reader", cl.Auth(config.RoleReader))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	harness.BounceWithRequests(t, reader, append([]string{
		lease.StatsSubject(st.Prefix, node), lease.SnapshotSubject(st.Prefix, node),
	}, harness.DiscoveryRequests()...), nonce, targets)
	// The manager still answers the reader. Asked again while it works
	// through the bounced requests: beside a second copy of the suite
	// (load 12) one request went unanswered for 10 s.
	harness.Eventually(t, 2*time.Minute, "the manager to answer the reader's stats request", func() bool {
		_, err := reader.Request(lease.StatsSubject(st.Prefix, node), nil, 5*time.Second)
		return err == nil
	})
	spy.Check(t, "reader")

	select {
	case l := <-granted:
		t.Fatalf("the waiter was granted %s while the slot was held", l.ID())
	case <-held.Done():
		t.Fatalf("the held lease was lost: %v", held.Err())
	default:
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("the held lease after the attacks: %v", err)
	}
	select {
	case l := <-granted:
		if l.Token() <= held.Token() {
			t.Fatalf("the waiter's token %d after the holder's %d", l.Token(), held.Token())
		}
	case <-time.After(time.Minute): // only a grant that never comes
		t.Fatal("the waiter was not granted the released slot")
	}
}
