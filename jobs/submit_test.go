package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// Submitting a job again, by id or by idempotency key, returns the job
// submitted first, in whatever state it is now (here still queued);
// another spec under the same id is refused.
func TestResubmitReturnsTheExistingJob(t *testing.T) {
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		set  func(*jobs.Spec)
	}{
		{"id", func(s *jobs.Spec) { s.ID = "build-42" }},
		{"idempotency key", func(s *jobs.Spec) { s.IdempotencyKey = "nightly build 2026-11-24 / main" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := jobs.NewSpec()
			spec.Command = []string{"true"}
			tc.set(&spec)
			first, err := q.Submit(ctx, spec)
			if err != nil || first.Existing {
				t.Fatalf("first submit: %+v %v", first, err)
			}
			again, err := q.Submit(ctx, spec)
			if err != nil || !again.Existing || again.ID != first.ID || again.State != jobs.StateQueued {
				t.Fatalf("resubmit: %+v %v, want the queued job %s", again, err, first.ID)
			}
			other := spec
			other.Command = []string{"false"}
			if _, err := q.Submit(ctx, other); !errors.Is(err, jobs.ErrDuplicate) {
				t.Fatalf("another spec under the same id: %v, want ErrDuplicate", err)
			}
		})
	}
	if _, err := q.Submit(ctx, jobs.Spec{ID: "x", IdempotencyKey: "y", Pool: "default", Slots: 1, Priority: jobs.DefaultPriority, MaxAttempts: 1, Command: []string{"true"}}); !errors.Is(err, jobs.ErrInvalidSpec) {
		t.Fatalf("id and a key that makes another id: %v, want ErrInvalidSpec", err)
	}
}

// A job's tenant is its lease's: on a fair pool with a tenant cap of 1, one
// job of each tenant runs (without tenants the pool would show two jobs of
// the tenant "").
func TestJobTenantReachesTheLease(t *testing.T) {
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, lease.ManagerConfig{Node: "n1", TTL: 5 * time.Second,
		Pools: []lease.PoolConfig{{Name: "p", Capacity: 2, Options: pools.Options{Policy: pools.PolicyFair, TenantCap: 1}}}})
	q := openQueue(t, srv.URL)
	ctx := context.Background()
	for _, tenant := range []string{"a", "a", "b"} {
		spec := jobs.NewSpec()
		spec.Pool, spec.Tenant, spec.Command = "p", tenant, []string{"sleep", "2"}
		if _, err := q.Submit(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	c := harness.Client(t, srv.URL, "n1")
	harness.Eventually(t, 15*time.Second, "one job of each tenant running", func() bool {
		stats, err := c.Stats(ctx)
		if err != nil || len(stats) != 1 {
			return false
		}
		held := map[string]int64{}
		for _, ts := range stats[0].Tenants {
			held[ts.Tenant] = ts.InUse
		}
		return held["a"] == 1 && held["b"] == 1
	})
}

// A stream made before jobs had tenant subjects: a queue bound without
// creating refuses a tenant's job with an error naming the fix, and
// opening it as leasemgr does adds the subjects, after which the job is
// stored under its tenant's subject.
func TestOldStreamGetsTenantSubjects(t *testing.T) {
	srv := harness.StartServer(t)
	ctx := context.Background()
	names := jobs.NamesFor(lease.DefaultPrefix)
	js, err := jetstream.New(harness.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	openQueue(t, srv.URL)
	st, err := js.Stream(ctx, names.Stream)
	if err != nil {
		t.Fatal(err)
	}
	old := st.CachedInfo().Config
	old.Subjects = []string{"lease.jobs.queue.*.*"}
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	spec := jobs.NewSpec()
	spec.Tenant, spec.Command = "acme", []string{"true"}

	bound, err := jobs.Bind(ctx, harness.Connect(t, srv.URL), lease.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bound.Submit(ctx, spec); err == nil || !strings.Contains(err.Error(), "start a leasemgr of this version once") {
		t.Fatalf("tenant job on an old stream: %v, want an error naming the fix", err)
	}
	q := openQueue(t, srv.URL)
	rec, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, rec.Seq)
	if err != nil || m.Subject != "lease.jobs.queue.default.normal.t_acme" {
		t.Fatalf("stored under %v (%v), want the tenant's subject", m, err)
	}
}
