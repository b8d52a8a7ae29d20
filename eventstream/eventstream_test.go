package eventstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slotlease/slotlease/eventstream"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/test/harness"
)

const stream = "lease_events"

func publish(t *testing.T, nc interface {
	Publish(string, []byte) error
	Flush() error
}, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := nc.Publish(fmt.Sprintf("lease.events.n%d.p.granted", i%2), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Follow replays the stored events matching its filter, across several
// batches, then follows new ones: each once, in order.
func TestFollow(t *testing.T) {
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := jetstream.EnsureAuditStream(ctx, nc, jetstream.AuditConfig{Stream: stream, Subjects: "lease.events.>", MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	publish(t, nc, 0, 700) // more than two batches of n0's events
	got := make(chan string, 2000)
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		done <- eventstream.Follow(fctx, harness.Connect(t, srv.URL), stream, "lease.events.n0.>", time.Now().Add(-time.Hour),
			func(subject string, data []byte) { got <- string(data) })
	}()
	want := 0
	next := func(what string) {
		t.Helper()
		select {
		case d := <-got:
			if d != fmt.Sprint(want) {
				t.Fatalf("%s: event %s, want %d", what, d, want)
			}
			want += 2 // only n0's
		case <-ctx.Done():
			t.Fatalf("%s: no event %d", what, want)
		}
	}
	for want < 700 {
		next("replay")
	}
	publish(t, nc, 700, 720)
	for want < 720 {
		next("follow")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		t.Fatalf("an event twice or out of the filter: %s", d)
	default:
	}
	last, err := eventstream.Last(ctx, nc, stream, "lease.events.>", 3)
	if err != nil || len(last) != 3 || string(last[0]) != "717" || string(last[2]) != "719" {
		t.Fatalf("Last(3) = %q, %v; want 717 718 719", last, err)
	}
}

// Without the stream, both say so.
func TestNoEventStream(t *testing.T) {
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := eventstream.Follow(ctx, nc, stream, "lease.events.>", time.Now(), func(string, []byte) {}); !errors.Is(err, eventstream.ErrNoEventStream) {
		t.Fatalf("Follow: %v", err)
	}
	if _, err := eventstream.Last(ctx, nc, stream, "lease.events.>", 5); !errors.Is(err, eventstream.ErrNoEventStream) {
		t.Fatalf("Last: %v", err)
	}
}
