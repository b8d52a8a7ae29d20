package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/harness"
)

// streamCaps reads a stream's byte and message caps.
func streamCaps(t *testing.T, js jetstream.JetStream, name string) (maxBytes, maxMsgs int64) {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	return c.MaxBytes, c.MaxMsgs
}

// A new queue's stream and buckets have their caps from the start: a
// quarter and a half of the job stream's for the buckets, and a key per
// 512 bytes.
func TestNewQueueIsCapped(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := jobs.Config{MaxBytes: jobs.MaxBytesFor(64 << 20)}
	if _, err := jobs.Open(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.StoreBytes(); got != 56<<20 {
		t.Errorf("a queue sized for 64 MiB reserves %d bytes, want 56 MiB", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := jobs.NamesFor("lease")
	for name, want := range map[string][2]int64{
		n.Stream:          {32 << 20, -1},
		"KV_" + n.Results: {16 << 20, 16 << 20 / 512},
		"KV_" + n.Dead:    {8 << 20, 8 << 20 / 512},
	} {
		if b, m := streamCaps(t, js, name); b != want[0] || m != want[1] {
			t.Errorf("%s: caps %d bytes, %d messages; want %d, %d", name, b, m, want[0], want[1])
		}
	}

	// A full bucket refuses a new key, and still takes a new revision
	// of a key it holds, no larger: recorded jobs can still finish.
	kv, err := js.KeyValue(ctx, n.Results)
	if err != nil {
		t.Fatal(err)
	}
	var full error
	i := 0
	for ; full == nil; i++ {
		_, full = kv.Put(ctx, fmt.Sprintf("k%d", i), make([]byte, 400_000))
	}
	if !strings.Contains(full.Error(), "maximum bytes exceeded") {
		t.Fatalf("a full bucket: %v", full)
	}
	if _, err := kv.Put(ctx, "k0", make([]byte, 300_000)); err != nil {
		t.Fatalf("a new revision of a key the full bucket holds: %v", err)
	}
}

// A store made before the buckets had caps (an upgraded node) gets them
// from ApplyCaps, which keeps every job: the queued job's message and its
// record are still there. A second ApplyCaps changes nothing; a smaller
// store cap lowers the caps again.
func TestApplyCapsKeepsAnUpgradedQueue(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	nc := harness.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := jobs.NamesFor("lease")
	// The buckets as the version before made them: no MaxBytes.
	for _, b := range []string{n.Results, n.Dead} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1, TTL: time.Hour, MaxValueSize: 2 * jobs.MaxSpecBytes, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := jobs.Open(ctx, nc, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := streamCaps(t, js, "KV_"+n.Results); b != -1 {
		t.Fatalf("Open changed an existing bucket's cap to %d: only ApplyCaps may", b)
	}
	s := spec("gpu", "true")
	s.ID = "queued-before-the-caps"
	if _, err := q.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}

	for _, store := range []int64{2 << 30, 2 << 30, 64 << 20} {
		cfg := jobs.Config{MaxBytes: jobs.MaxBytesFor(store)}
		if err := q.ApplyCaps(ctx, cfg); err != nil {
			t.Fatalf("ApplyCaps for a store of %d: %v", store, err)
		}
		if b, m := streamCaps(t, js, "KV_"+n.Results); b != store/4 || m != store/4/512 {
			t.Errorf("store %d: results capped at %d bytes, %d messages", store, b, m)
		}
		if b, m := streamCaps(t, js, "KV_"+n.Dead); b != store/8 || m != store/8/512 {
			t.Errorf("store %d: dead letters capped at %d bytes, %d messages", store, b, m)
		}
		if b, _ := streamCaps(t, js, n.Stream); b != store/2 {
			t.Errorf("store %d: job stream capped at %d bytes", store, b)
		}
		rec, err := q.Get(ctx, s.ID)
		if err != nil || rec.State != jobs.StateQueued {
			t.Fatalf("the job queued before the caps: %+v, %v", rec, err)
		}
		st, err := js.Stream(ctx, n.Stream)
		if err != nil || st.CachedInfo().State.Msgs != 1 {
			t.Fatalf("the job stream after the caps: %v, %v", st, err)
		}
	}
}
