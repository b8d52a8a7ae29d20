package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
)

// The names docs/protocol.md (section 10) promises, and distinct prefixes
// never share a bucket or stream.
func TestNamesFor(t *testing.T) {
	for prefix, want := range map[string]Names{
		"lease":      {Leases: "lease_leases", Leaders: "lease_leaders", Pools: "lease_pools", Events: "lease_events", JobsKey: "lease_jobs_key"},
		"acme.lease": {Leases: "acme_lease_leases", Leaders: "acme_lease_leaders", Pools: "acme_lease_pools", Events: "acme_lease_events", JobsKey: "acme_lease_jobs_key"},
		"my_co":      {Leases: "my__co_leases", Leaders: "my__co_leaders", Pools: "my__co_pools", Events: "my__co_events", JobsKey: "my__co_jobs_key"},
	} {
		if got := NamesFor(prefix); got != want {
			t.Errorf("NamesFor(%q) = %+v, want %+v", prefix, got, want)
		}
	}
	owner := map[string]string{}
	for _, prefix := range []string{"a.b", "a_b", "a__b", "a.b.c", "a_b.c", "a.b_c", "a_b_c", "a", "a.leases", "a_leases"} {
		n := NamesFor(prefix)
		for _, name := range []string{n.Leases, n.Leaders, n.Pools, n.Events, n.JobsKey} {
			if other, taken := owner[name]; taken {
				t.Errorf("prefixes %q and %q share %s", other, prefix, name)
			}
			owner[name] = prefix
		}
	}
}

// Every bucket and stream slotlease creates says what it holds, each its
// own description, as `nats kv ls` and `nats stream ls` show them.
func TestBucketDescriptions(t *testing.T) {
	nc := testConn(t)
	ctx := t.Context()
	const prefix = "acme.lease"
	n, jn := NamesFor(prefix), jobs.NamesFor(prefix)
	for _, b := range []string{n.Leases, n.Leaders, n.Pools} {
		if _, err := OpenLeaseStore(ctx, nc, BucketConfig{Name: b}); err != nil {
			t.Fatal(err)
		}
	}
	if err := EnsureAuditStream(ctx, nc, AuditConfig{Stream: n.Events, Subjects: prefix + ".events.>", MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Open(ctx, nc, jobs.Config{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := JobsKey(ctx, nc, prefix, 1); err != nil {
		t.Fatal(err)
	}

	// Each stream (a bucket is stream KV_<bucket>) and a word its
	// description must hold.
	want := map[string]string{
		"KV_" + n.Leases:   "lease records",
		"KV_" + n.Leaders:  "leadership",
		"KV_" + n.Pools:    "pool changes",
		"KV_" + n.JobsKey:  "sign outcomes",
		n.Events:           "lease events",
		jn.Stream:          "jobs",
		"KV_" + jn.Results: "results",
		"KV_" + jn.Dead:    "dead letters",
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		name, d := info.Config.Name, info.Config.Description
		word, ok := want[name]
		if !ok {
			t.Errorf("unexpected stream %s", name)
			continue
		}
		delete(want, name)
		if !strings.HasPrefix(d, "slotlease") || !strings.Contains(d, word) {
			t.Errorf("%s: description %q, want slotlease's, saying %q", name, d, word)
		}
		if other, dup := seen[d]; dup {
			t.Errorf("%s and %s share the description %q", name, other, d)
		}
		seen[d] = name
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		t.Errorf("stream %s not created", name)
	}
}
