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
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// Submitting a job again, by id or by idempotency key, returns the job
// submitted first, in whatever state it is now (here still queued);
// another spec under the same id is refused.
func TestResubmitReturnsTheExistingJob(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	c := serveSleepers(t, pools.Options{Policy: pools.PolicyFair, TenantCap: 1}, func(s *jobs.Spec, name string) { s.Tenant = name })
	harness.Eventually(t, 15*time.Second, "one job of each tenant running", func() bool {
		stats, err := c.Stats(context.Background())
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

// A job's fairness key is its lease's: on a fair pool with a key limit of
// 1, one job of each key runs (without keys the limit would let one job
// of the tenant "" run).
func TestJobKeyReachesTheLease(t *testing.T) {
	t.Parallel()
	c := serveSleepers(t, pools.Options{Policy: pools.PolicyFair, KeyCap: 1}, func(s *jobs.Spec, name string) { s.Key = name })
	harness.Eventually(t, 15*time.Second, "one job of each key running", func() bool {
		stats, err := c.Stats(context.Background())
		if err != nil || len(stats) != 1 || stats[0].Scheduler == nil {
			return false
		}
		held := map[string]int64{}
		for _, k := range stats[0].Scheduler.Keys {
			held[k.Key] = k.InUse
		}
		return held["a"] == 1 && held["b"] == 1 && stats[0].InUse == 2
	})
}

// serveSleepers submits three jobs that sleep 2 s, named a, a and b by
// name, to pool p (2 slots, options o) of node n1, serves them, and
// returns a client of n1.
func serveSleepers(t *testing.T, o pools.Options, name func(*jobs.Spec, string)) *lease.Client {
	t.Helper()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 2, Options: o}}})
	q := openQueue(t, srv.URL)
	for _, n := range []string{"a", "a", "b"} {
		spec := jobs.NewSpec()
		spec.Pool, spec.Command = "p", []string{"sleep", "2"}
		name(&spec, n)
		if _, err := q.Submit(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	return harness.Client(t, srv.URL, "n1")
}

// A stream made before jobs had tenant subjects: a queue bound without
// creating refuses a tenant's job with an error naming the fix, and
// opening it as leasemgr does adds the subjects, after which the job is
// stored under its tenant's subject.
func TestOldStreamGetsTenantSubjects(t *testing.T) {
	t.Parallel()
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

// Job ids and idempotency keys are scoped by tenant (issue 28): tenant a
// cannot take the ids tenant b will use, nor learn from a submit's answer
// whether b's job exists or what state it is in. Ids that look like a
// tenant's scope are refused for jobs without a tenant.
func TestJobIDsAreScopedByTenant(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	ctx := context.Background()
	spec := func(tenant string, set func(*jobs.Spec)) jobs.Spec {
		s := jobs.NewSpec()
		s.Command, s.Tenant = []string{"true"}, tenant
		set(&s)
		return s
	}
	for _, tc := range []struct {
		name string
		set  func(*jobs.Spec)
	}{
		{"id", func(s *jobs.Spec) { s.ID = "build-42" }},
		{"idempotency key", func(s *jobs.Spec) { s.IdempotencyKey = "nightly" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := q.Submit(ctx, spec("a", tc.set))
			if err != nil || a.Existing || !strings.HasPrefix(a.ID, jobs.TenantScope("a")) {
				t.Fatalf("tenant a: %+v %v, want a new job in a's scope %s", a, err, jobs.TenantScope("a"))
			}
			// b's submit with the same id or key, and another spec, is a
			// job of its own: no duplicate, no existing job of a's.
			other := spec("b", tc.set)
			other.Command = []string{"false"}
			b, err := q.Submit(ctx, other)
			if err != nil || b.Existing || b.ID == a.ID || !strings.HasPrefix(b.ID, jobs.TenantScope("b")) {
				t.Fatalf("tenant b after a: %+v %v", b, err)
			}
			// Within a's scope, the id still deduplicates.
			again, err := q.Submit(ctx, spec("a", tc.set))
			if err != nil || !again.Existing || again.ID != a.ID {
				t.Fatalf("a again: %+v %v", again, err)
			}
			// b naming a's full id gets a job in its own scope, or is
			// refused for the id's length: never a's job.
			probe := spec("b", func(s *jobs.Spec) { s.ID = a.ID })
			p, err := q.Submit(ctx, probe)
			if err == nil && (p.Existing || !strings.HasPrefix(p.ID, jobs.TenantScope("b"))) || err != nil && !errors.Is(err, jobs.ErrInvalidSpec) {
				t.Fatalf("b naming a's id %s: %+v %v", a.ID, p, err)
			}
			// So does a job without a tenant, which may not name a's id.
			if _, err := q.Submit(ctx, spec("", func(s *jobs.Spec) { s.ID = a.ID })); !errors.Is(err, jobs.ErrInvalidSpec) {
				t.Fatalf("no tenant naming a's id %s: %v, want ErrInvalidSpec", a.ID, err)
			}
		})
	}
	// a's own scoped id, given back, names the same job.
	s := spec("a", func(s *jobs.Spec) { s.ID = jobs.TenantScope("a") + "build-42" })
	if r, err := q.Submit(ctx, s); err != nil || !r.Existing {
		t.Fatalf("a with its scoped id: %+v %v", r, err)
	}
	long := spec("a", func(s *jobs.Spec) { s.ID = strings.Repeat("x", 60) })
	if _, err := q.Submit(ctx, long); !errors.Is(err, jobs.ErrInvalidSpec) || !strings.Contains(err.Error(), "give at most 46") {
		t.Fatalf("a 60-character id in a tenant's scope: %v", err)
	}
}
