package jobs_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// A job submitted with cancel_pending cancels the older queued jobs of its
// group (its pool, tenant and group name) as it is stored, and no other:
// not another group's, another tenant's or another pool's, and not itself.
// Nothing serves the queue, so every job is queued.
func TestSubmitReplacesTheGroupsQueuedJobs(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	in := func(pool, tenant, group, onGroup string) jobs.Spec {
		s := spec(pool, "true")
		s.Tenant, s.Group, s.OnGroup = tenant, group, onGroup
		return s
	}
	old1 := submit(t, q, in("p", "a", "g", ""))
	old2 := submit(t, q, in("p", "a", "g", lease.OnGroupCancelPending)) // replaces old1
	others := []string{
		submit(t, q, in("p", "a", "h", "")), // another group
		submit(t, q, in("p", "b", "g", "")), // another tenant
		submit(t, q, in("o", "a", "g", "")), // another pool
	}
	rec, err := q.Submit(context.Background(), in("p", "a", "g", lease.OnGroupCancelPending))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Superseded, []string{old2}) {
		t.Errorf("Superseded = %v, want the group's one queued job %v (old1 was replaced by it)", rec.Superseded, old2)
	}
	for id, by := range map[string]string{old1: old2, old2: rec.ID} {
		if r := get(t, q, id); r.State != jobs.StateCancelled || !strings.Contains(r.Error, "superseded: job "+by+` of group "g"`) {
			t.Errorf("replaced job %s: %s, %q; want cancelled, superseded by %s", id, r.State, r.Error, by)
		}
	}
	for _, id := range append(others, rec.ID) {
		if r := get(t, q, id); r.State != jobs.StateQueued {
			t.Errorf("job %s: %s, %q; want still queued", id, r.State, r.Error)
		}
	}
}
