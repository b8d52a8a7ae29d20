package jobmetrics_test

import (
	"fmt"
	"testing"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/metrics/jobmetrics"
)

// Tenant labels are bounded: the MaxTenants tenants with the most jobs keep
// their names, the others are summed under "other", nothing is lost; and
// a known pool with no job has its zero series.
func TestFoldBoundsTenantsAndAddsZeroSeries(t *testing.T) {
	l := jobs.PoolLoad{Pool: "p"}
	total := 0
	for i := range jobmetrics.MaxTenants + 5 {
		n := 100 - i // tenant t00 has the most
		l.Queued = append(l.Queued, jobs.TenantCount{Priority: jobs.High, Tenant: fmt.Sprintf("t%02d", i), Jobs: n})
		total += n
	}
	l.Queued = append(l.Queued, jobs.TenantCount{Priority: jobs.Low, Tenant: "", Jobs: 1})
	l.Running = []jobs.TenantCount{{Tenant: "t20", Jobs: 3}, {Tenant: "t00", Jobs: 1}}
	stranger := jobs.PoolLoad{Pool: "not-on-this-node", Queued: []jobs.TenantCount{{Priority: jobs.High, Jobs: 1}}}
	got := jobmetrics.Fold([]jobs.PoolLoad{l, stranger}, []string{"p", "empty"})
	if len(got) != 2 || got[0].Pool != "empty" || got[1].Pool != "p" {
		t.Fatalf("pools %+v, want empty and p only (not a pool of another node)", got)
	}
	empty := got[0]
	if len(empty.Queued) != 3 || len(empty.Running) != 1 || empty.Running[0] != (jobs.TenantCount{}) {
		t.Fatalf("empty pool: %+v, want a zero series per priority and one running", empty)
	}
	names, sum := map[string]int{}, 0
	for _, c := range got[1].Queued {
		if c.Priority == jobs.High {
			names[c.Tenant] += c.Jobs
			sum += c.Jobs
		}
	}
	// MaxTenants names, other, and the zero series of the unnamed tenant.
	if len(names) != jobmetrics.MaxTenants+2 || names[""] != 0 || sum != total || names["t00"] != 100 || names[jobmetrics.OtherTenant] != 84+83+82+81+80 {
		t.Fatalf("high queue by tenant %v (sum %d), want t00..t15 and other (84+83+82+81+80), sum %d", names, sum, total)
	}
	running := map[string]int{}
	for _, c := range got[1].Running {
		running[c.Tenant] = c.Jobs
	}
	if running["t00"] != 1 || running[jobmetrics.OtherTenant] != 3 || running[""] != 0 || len(running) != 3 {
		t.Fatalf("running %v, want t00 1, other 3 (t20), and the zero series", running)
	}
}
