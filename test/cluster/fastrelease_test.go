package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// Fast release on a 3-server cluster: a holder connected to one server
// whose connection closes gives its slot to a waiter on another server
// within about the disconnect grace, far sooner than the TTL. Then the
// holder's server is restarted under a live holder: the server's stop
// frees nothing; the holder reconnects to another server and keeps its
// lease, or, if it could not move it within the grace, gives it up before
// the slot goes to the waiter (then only at the TTL). Never both at once.
func TestFastReleaseAcrossTheCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := Settings{LeaseTTL: 8 * time.Second, Logger: harness.Logger()}
	cl := provisionedCluster(ctx, t, &st)
	c, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: "node1", Instance: "m",
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}, Terms: &Terms{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	harness.Eventually(t, 2*time.Minute, "the manager serves", c.Serving) // only catches one that never does

	client := func(i int) (*lease.Client, *nats.Conn) {
		t.Helper()
		// Server i first, then the others: a restart of i moves it on.
		urls := ""
		for k, a := range cl.LiveAddrs(i) {
			if k > 0 {
				urls += ","
			}
			urls += "nats://" + a
		}
		nc, err := natsconn.Connect(urls, cl.Auth(config.RoleExecutor), t.Name(), nats.DontRandomize())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		lc, err := lease.NewClient(nc, "node1", lease.WithPrefix(st.Prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lc.Close() })
		return lc, nc
	}
	// waitFor starts lc's acquire of the held slot and returns once the
	// manager answered that it is queued.
	waitFor := func(lc *lease.Client) (<-chan *lease.Lease, <-chan time.Time) {
		got, at := make(chan *lease.Lease, 1), make(chan time.Time, 1)
		queued := make(chan struct{})
		var once sync.Once
		go func() {
			l, err := lc.Acquire(ctx, "gpu", 1, lease.OnQueued(func(int) { once.Do(func() { close(queued) }) }))
			if err != nil {
				t.Errorf("waiter: %v", err)
				close(got)
				return
			}
			at <- time.Now()
			got <- l
		}()
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not queued")
		}
		return got, at
	}

	// 1. The holder's connection closes, on server 1; the waiter is on 2.
	holder, hnc := client(1)
	l, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	if l.FastRelease() == 0 {
		t.Fatal("the suite's manager granted without fast release")
	}
	waiter, _ := client(2)
	harness.Eventually(t, 5*time.Second, "holder holds", func() bool { return statsOf(t, waiter).InUse == 1 })
	// How the holder's lease ends shows which path freed it: fast release
	// says so in its released event (holder_disconnected), the TTL's would
	// be an expired event. (A bound of half the TTL on the time told the
	// same on a quiet machine, and failed beside a second copy of the
	// suite, load 12.)
	rnc, err := dial(ctx, cl.URL(), "events", cl.Auth(config.RoleReader))
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	sub, err := rnc.SubscribeSync(lease.EventFilter(st.Prefix, "node1", "gpu", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		t.Fatal(err)
	}
	events := harness.ReadEvents(sub)
	got, _ := waitFor(waiter)
	closed := time.Now()
	hnc.Close()
	var w *lease.Lease
	select {
	case w = <-got:
		t.Logf("a closed holder's slot went to a waiter on another server %v later (TTL %v, grace %v)",
			time.Since(closed).Round(time.Millisecond), st.LeaseTTL, l.FastRelease())
	case <-time.After(time.Minute): // only a release that never comes
		t.Fatal("a closed holder's slot was not granted")
	}
	for {
		ev, _, err := events.Next(30 * time.Second)
		if err != nil {
			t.Fatalf("the end of the closed holder's lease: %v", err)
		}
		if ev.LeaseID != l.ID() {
			continue
		}
		if ev.Kind == lease.EventReleased && ev.Code == lease.CodeHolderDisconnected {
			break
		}
		if ev.Kind == lease.EventExpired || ev.Kind == lease.EventReleased {
			t.Fatalf("the closed holder's lease ended %s (%s): the TTL path, not fast release", ev.Kind, ev.Code)
		}
	}

	// 2. The holder's server restarts under it: w is held from server 2,
	// a new waiter queues on server 0.
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	holder2, h2nc := client(1)
	l2, err := holder2.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	if h2nc.ConnectedUrl() != "nats://"+cl.ClientAddr(1) {
		t.Fatalf("holder on %s, want server 1", h2nc.ConnectedUrl())
	}
	waiter2, _ := client(0)
	got2, at2 := waitFor(waiter2)
	cl.Kill(1)
	if err := cl.Restart(1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Done():
		lostAt := time.Now()
		t.Logf("holder gave its lease up over the restart: %v", l2.Err())
		select {
		case w2 := <-got2:
			if granted := <-at2; granted.Before(lostAt) {
				t.Fatalf("the waiter was granted at %v, before the holder gave up at %v", granted, lostAt)
			}
			_ = w2.Release(ctx)
		case <-time.After(st.LeaseTTL + 5*time.Second):
			t.Fatal("the waiter was not granted after the holder gave up")
		}
	case w2 := <-got2:
		t.Fatalf("the waiter was granted while the holder kept its lease: %s", fmt.Sprint(w2.Record()))
	case <-time.After(3 * l2.FastRelease()):
		t.Logf("holder kept its lease over the restart, now on %s", h2nc.ConnectedUrl())
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case w2 := <-got2:
			_ = w2.Release(ctx)
		case <-time.After(time.Minute): // only a grant that never comes
			t.Fatal("the waiter was not granted after the release")
		}
	}
}

func statsOf(t *testing.T, c *lease.Client) lease.PoolStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.Stats(ctx)
	if err != nil {
		return lease.PoolStats{}
	}
	for _, p := range s {
		if p.Name == "gpu" {
			return p
		}
	}
	return lease.PoolStats{}
}
