package manager_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// acquireRaw sends an acquire for one slot of pool p with request id id,
// with hdr, and returns the manager's first answer.
func acquireRaw(t *testing.T, nc *nats.Conn, id string, hdr nats.Header) lease.Reply {
	t.Helper()
	data, _ := json.Marshal(lease.AcquireRequest{RequestID: id, Holder: "flood", Slots: 1})
	msg, err := nc.RequestMsg(&nats.Msg{Subject: lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire), Header: hdr, Data: data}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// One connection may have at most MaxQueuedPerConn requests waiting on a
// node (issue 28: 100,000 queued acquires from one credential were all
// accepted). The connection is the one the server vouches for: a client
// that sends a Nats-Request-Info header of its own, claiming another
// connection, is still counted as itself. Another connection still
// queues, and one more fits when a waiting request ends.
func TestQueuedRequestsPerConnectionAreBounded(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	const limit = 5
	n := harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}, MaxQueuedPerConn: limit})
	flooder := srv.Connect(t, config.RoleExecutor)
	if r := acquireRaw(t, flooder, "holder", nil); r.Status != lease.StatusGranted {
		t.Fatalf("first acquire: %+v", r)
	}
	for i := range limit {
		if r := acquireRaw(t, flooder, fmt.Sprintf("q%d", i), nil); r.Status != lease.StatusQueued {
			t.Fatalf("queued request %d: %+v", i, r)
		}
	}
	forged := nats.Header{"Nats-Request-Info": []string{`{"acc":"x","server":"y","id":424242}`}}
	for i, hdr := range []nats.Header{nil, forged} {
		r := acquireRaw(t, flooder, fmt.Sprintf("over%d", i), hdr)
		if r.Status != lease.StatusError || r.Error.Code != lease.CodeQueueFull || r.Error.RetryAfterMs <= 0 {
			t.Fatalf("request %d over the connection's bound (header %v): %+v", limit+1, hdr, r)
		}
		t.Logf("over the bound: %v", r.Error)
	}
	if q := harness.PoolStats(t, n.Manager, "p").QueuedRequests; q != limit {
		t.Fatalf("%d requests queued, want the bound %d", q, limit)
	}
	// Another connection is not held back by the first one's.
	if r := acquireRaw(t, srv.Connect(t, config.RoleExecutor), "other", nil); r.Status != lease.StatusQueued {
		t.Fatalf("another connection's request: %+v", r)
	}
	// A waiting request ends: one more fits.
	cancel, _ := json.Marshal(lease.CancelRequest{RequestID: "q0", Holder: "flood"})
	if _, err := flooder.Request(lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbCancel), cancel, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := acquireRaw(t, flooder, "after-cancel", nil); r.Status != lease.StatusQueued {
		t.Fatalf("after one of its requests ended: %+v", r)
	}
}
