package lease_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// The client marks every send of an acquire after its first as a re-send
// (resend: true), and only those: a manager tells a late re-send of a
// request that has ended so, and never refuses a first send that way.
func TestAcquireMarksItsResends(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	got := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire), got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = c.Acquire(ctx, "p", 1) }()
	for i := range 3 {
		var req lease.AcquireRequest
		select {
		case m := <-got:
			if err := json.Unmarshal(m.Data, &req); err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("send %d not seen", i+1)
		}
		if req.Resend != (i > 0) {
			t.Fatalf("send %d: resend %v, want %v", i+1, req.Resend, i > 0)
		}
	}
}
