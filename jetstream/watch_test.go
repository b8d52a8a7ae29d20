package jetstream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/manager"
)

// The watch reports the TTL each value was stored with, in the initial
// state and in later changes, and 0 for a value stored without one.
func TestWatchReportsTTL(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Create(ctx, "n.p.before", []byte("a"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "n.p.nottl", []byte("b")); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "n.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	got := map[string]time.Duration{}
	next := func() manager.Change {
		t.Helper()
		select {
		case ch, ok := <-w.Changes():
			if !ok {
				t.Fatal("watch ended")
			}
			return ch
		case <-ctx.Done():
			t.Fatalf("watch: %v; seen %v", ctx.Err(), got)
		}
		return manager.Change{}
	}
	for ch := next(); ch.Op != manager.ChangeCaughtUp; ch = next() {
		got[ch.Key] = ch.TTL
	}
	rev, err := s.Create(ctx, "n.p.after", []byte("c"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, "n.p.after", []byte("d"), 7*time.Second, rev); err != nil {
		t.Fatal(err)
	}
	for len(got) < 3 || got["n.p.after"] != 7*time.Second {
		ch := next()
		got[ch.Key] = ch.TTL
	}
	want := map[string]time.Duration{"n.p.before": time.Minute, "n.p.nottl": 0, "n.p.after": 7 * time.Second}
	for k, d := range want {
		if got[k] != d {
			t.Errorf("%s: TTL %v, want %v", k, got[k], d)
		}
	}
}

// A Watch whose context is already done sets nothing up.
func TestWatchHonoursContext(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w, err := s.Watch(ctx, "n.>"); err == nil {
		_ = w.Stop()
		t.Fatal("Watch with a cancelled context succeeded")
	}
}

func TestMsgTTL(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"": 0, "never": 0, "NEVER": 0, "garbage": 0, "-5s": 0, "-1": 0,
		"15s": 15 * time.Second, "1m0s": time.Minute, "30": 30 * time.Second,
	} {
		h := nats.Header{}
		if v != "" {
			h.Set("Nats-TTL", v)
		}
		if got := MsgTTL(h); got != want {
			t.Errorf("Nats-TTL %q: %v, want %v", v, got, want)
		}
	}
}

// Stop ends the watch even while its delivery is blocked on a full
// Changes channel nobody reads, and Changes is closed after it.
func TestWatchStopEndsBlockedDelivery(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 600 {
		if _, err := s.Create(ctx, "n.p.k"+strconv.Itoa(i), []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	w, err := s.Watch(ctx, "n.>")
	if err != nil {
		t.Fatal(err)
	}
	// Let the buffer fill: the delivery then blocks on the next send.
	deadline := time.Now().Add(10 * time.Second)
	for len(w.Changes()) < cap(w.(*watcher).out) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		select {
		case _, ok := <-w.Changes():
			if !ok {
				if n >= 600+1 {
					t.Fatalf("%d changes after Stop, want the delivery cut short", n)
				}
				return
			}
			n++
		case <-ctx.Done():
			t.Fatalf("Changes not closed after Stop (%d read)", n)
		}
	}
}

// Stop succeeds when the server already dropped the watch's consumer:
// Unsubscribe deletes it and gets "consumer not found", which made a
// leasemgr stopped by SIGTERM exit 1 now and then.
func TestWatchStopAfterConsumerGone(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := s.Watch(ctx, "n.>")
	if err != nil {
		t.Fatal(err)
	}
	ww := w.(*watcher)
	info, err := ww.sub.ConsumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	js, err := s.nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(info.Stream, info.Name); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("Stop after the consumer was deleted: %v", err)
	}
}

// The initial state is complete only once the stream leader's last
// sequence of the filter was delivered: a consumer on a follower still
// catching up says "nothing pending" early (its messages carry
// NumPending 0) while the leader holds records it has not delivered yet.
func TestWatchCaughtUpWaitsForTheLeadersLastSequence(t *testing.T) {
	w := &watcher{out: make(chan manager.Change, 8), stop: make(chan struct{}), prefix: len("$KV.b."), last: 7}
	msg := func(key string, seq uint64) *nats.Msg {
		// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
		return &nats.Msg{Subject: "$KV.b." + key, Reply: "$JS.ACK.KV_b.c.1." + strconv.FormatUint(seq, 10) + ".1.1700000000000000000.0",
			Header: nats.Header{}, Data: []byte("v"), Sub: &nats.Subscription{}} // bound, as a delivered message is
	}
	w.deliver(msg("n.p.a", 3)) // the lagging follower's last: pending 0
	if got := drain(w.out); len(got) != 1 || got[0].Op != manager.ChangePut {
		t.Fatalf("after seq 3 of a last 7: %+v, want one put and no caught-up marker", got)
	}
	w.deliver(msg("n.p.b", 7)) // caught up with the leader
	if got := drain(w.out); len(got) != 2 || got[1].Op != manager.ChangeCaughtUp {
		t.Fatalf("after seq 7 of a last 7: %+v, want the put and the caught-up marker", got)
	}
}

func drain(ch chan manager.Change) []manager.Change {
	var out []manager.Change
	for {
		select {
		case c := <-ch:
			out = append(out, c)
		default:
			return out
		}
	}
}

// leaderLastSeq is the last sequence of the filter on the stream leader,
// and 0 when nothing matches.
func TestLeaderLastSeq(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := s.leaderLastSeq(ctx, s.subject+"n.>"); err != nil || got != 0 {
		t.Fatalf("empty: %d, %v; want 0", got, err)
	}
	rev, err := s.Create(ctx, "n.p.a", []byte("a"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "m.p.a", []byte("a"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := s.leaderLastSeq(ctx, s.subject+"n.>"); err != nil || got != rev {
		t.Fatalf("after one put: %d, %v; want %d (another filter's later put not counted)", got, err, rev)
	}
}
