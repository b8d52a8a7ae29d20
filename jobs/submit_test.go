package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
