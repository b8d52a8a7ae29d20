package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// Issue 38: queued requests outlived their connection. Ten short
// connections of 1,000 requests each filled a pool's queue of 10,000;
// every real `executor run` was refused queue_full, and the fake requests
// were granted one by one, each holding the one-slot pool for a TTL:
// about 42 hours of denial. Now one credential queues at most
// MAX_QUEUED_PER_CREDENTIAL over all its connections, and a queued
// request leaves the queue a grace after its connection closes: the flood
// ends with its connections, and a real `executor run` queued after it is
// granted as soon as the slot frees.
func TestReconnectingQueueFloodEndsWithItsConnections(t *testing.T) {
	t.Parallel()
	const node = "qflood"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	// The bounds of the default (1000 a connection, 2500 a credential) at
	// a tenth, so that the flood passes quickly.
	const perConn, perCred = 100, 250
	env = append(env, fmt.Sprintf("MAX_QUEUED_PER_CONNECTION=%d", perConn), fmt.Sprintf("MAX_QUEUED_PER_CREDENTIAL=%d", perCred))
	startManager(t, env, httpAddr)
	url := natsURL(env)
	home := envValue(env, "HOME")

	holder, err := lease.NewClient(mustConnectAs(t, home, url, config.RoleExecutor), node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	held, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}

	// Ten connections, a connection's bound of requests each (none names
	// its connection, none promises a poll), all open at once; then
	// closed.
	const conns, each = 10, perConn
	count := map[string]int{}
	subject := lease.Subject(lease.DefaultPrefix, node, "gpu", lease.VerbAcquire)
	var flood []*nats.Conn
	for c := range conns {
		nc := mustConnectAs(t, home, url, config.RoleExecutor)
		flood = append(flood, nc)
		for k, n := range acquireFlood(t, ctx, nc, subject, fmt.Sprintf("fake-%d-", c), each) {
			count[k] += n
		}
	}
	t.Logf("answers to %d acquires over %d connections of one credential: %v", conns*each, conns, count)
	if count[string(lease.StatusQueued)] != perCred || count[string(lease.CodeQueueFull)] != conns*each-perCred {
		t.Fatalf("answers %v: want %d queued (MAX_QUEUED_PER_CREDENTIAL) and the rest queue_full", count, perCred)
	}
	if q := httpPools(t, httpAddr)["gpu"].QueuedRequests; q != perCred {
		t.Fatalf("%d requests queued after the flood, want %d", q, perCred)
	}
	for _, nc := range flood {
		nc.Close()
	}

	// The flood's connections are gone: so are its requests, a grace
	// after each close (fast release's check of the server's word).
	began := time.Now()
	eventually(t, 2*time.Minute, "the closed connections' requests to leave the queue", func() bool {
		return httpPools(t, httpAddr)["gpu"].QueuedRequests == 0
	})
	t.Logf("the flood's %d requests left the queue %v after its last connection closed", perCred, time.Since(began).Round(10*time.Millisecond))

	// A real executor run queues behind the holder and is granted when it
	// lets go.
	run := start(t, env, "executor", "run", "--pool", "gpu", "--", "echo", "ran")
	eventually(t, time.Minute, "the real run to queue", func() bool {
		return httpPools(t, httpAddr)["gpu"].QueuedRequests == 1
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := run.Wait(t, time.Minute); code != 0 {
		t.Fatalf("executor run after the flood: exit %d\n%s", code, run.Output())
	}
}
