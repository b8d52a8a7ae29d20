package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// A job with a further pool holds both, all or none: two jobs of pool p
// (capacity 2) that each also need the cluster's only api slot run one
// after the other, each record names its p lease, and nothing is held
// afterwards.
func TestJobHoldsItsFurtherPools(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	harness.StartManager(t, srv.URL, manager.Config{Node: lease.ClusterNode, TTL: 5 * time.Second,
		Pools: []manager.PoolConfig{{Name: "api", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	var ids []string
	for range 2 {
		s := spec("p", "sleep", "1")
		s.Pools = []jobs.PoolSlots{{Pool: "api", Slots: 1}}
		ids = append(ids, submit(t, q, s))
	}
	startServing(t, srv.URL, "n1", jobs.ServerConfig{AcquireWait: 10 * time.Second})
	var recs []*jobs.Record
	for _, id := range ids {
		recs = append(recs, waitState(t, q, id, jobs.StateSucceeded, 30*time.Second))
	}
	// Within the time each held its leases: started_at is stamped after
	// the grant and the run lasts duration_ms from a little later, and the
	// leases go back before finished_at is stamped, so finished_at cannot
	// tell (it can follow the other job's start).
	a, b := recs[0], recs[1]
	aEnd := a.StartedAt.Add(time.Duration(a.DurationMs) * time.Millisecond)
	bEnd := b.StartedAt.Add(time.Duration(b.DurationMs) * time.Millisecond)
	if a.StartedAt.Before(bEnd) && b.StartedAt.Before(aEnd) {
		t.Fatalf("two jobs held the only api slot at once: %v..%v and %v..%v", a.StartedAt, aEnd, b.StartedAt, bEnd)
	}
	for _, r := range recs {
		if r.LeaseID != r.ID+"-d1-p" && r.LeaseID != r.ID+"-d2-p" {
			t.Errorf("job %s's record names lease %s, want its pool p lease", r.ID, r.LeaseID)
		}
	}
	cc := harness.Client(t, srv.URL, lease.ClusterNode)
	harness.Eventually(t, 5*time.Second, "api free", func() bool {
		ps, err := cc.Stats(context.Background())
		return err == nil && len(ps) == 1 && ps[0].InUse == 0
	})
}
