package harness

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// PoolStats is the stats of m's pool name; the test fails if it has none.
func PoolStats(t *testing.T, m *manager.Manager, name string) lease.PoolStats {
	t.Helper()
	for _, s := range m.Stats() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no pool %q", name)
	return lease.PoolStats{}
}

// QueuedAcquire starts an Acquire in the background and returns once the
// manager has answered that it is queued.
func QueuedAcquire(t *testing.T, c *lease.Client, ctx context.Context, pool string, slots int64, opts ...lease.AcquireOption) (<-chan *lease.Lease, <-chan error, int) {
	t.Helper()
	got := make(chan *lease.Lease, 1)
	errc := make(chan error, 1)
	pos := make(chan int, 16)
	opts = append(opts, lease.OnQueued(func(p int) { pos <- p }))
	go func() {
		l, err := c.Acquire(ctx, pool, slots, opts...)
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	select {
	case p := <-pos:
		return got, errc, p
	case l := <-got:
		t.Fatalf("granted at once, want queued: %+v", l.Record())
	case err := <-errc:
		t.Fatalf("acquire failed, want queued: %v", err)
	case <-time.After(time.Minute): // only a stuck run: a loaded machine answers late
		t.Fatal("no queued answer")
	}
	return nil, nil, 0
}

// Request sends body (a string as it is, anything else as JSON) to subject
// and decodes the reply; the test fails on a timeout or an undecodable reply.
func Request(t *testing.T, nc *nats.Conn, subject string, body any) lease.Reply {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply %q: %v", msg.Data, err)
	}
	return r
}
