package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// The auditor must fail a run whose accounting is broken. These tests break
// it on purpose, two ways, and expect the auditor to report over-grants.

// A manager configured with more slots than the pool really has: the
// auditor, told the true capacity, sees the over-grant in the KV records
// and in the holders' own view.
func TestAuditorCatchesCapacityOvergrant(t *testing.T) {
	t.Parallel()
	rep := injectedRun(t, 3, nil)
	assertViolation(t, rep, "over-grant (KV view): node1.gpu")
	assertViolation(t, rep, "over-grant (holders' view): node1.gpu")
}

// A store that acknowledges deletes without doing them: the manager frees
// the slots of a released lease while its record lives on until its TTL.
// Holders release before the next one is granted, so only the KV view can
// see it.
func TestAuditorCatchesRecordOutlivingFreedSlots(t *testing.T) {
	t.Parallel()
	rep := injectedRun(t, 1, func(s manager.Store) manager.Store { return dropDeletes{s} })
	assertViolation(t, rep, "over-grant (KV view): node1.gpu")
	for _, v := range rep.Violations {
		if strings.Contains(v, "holders' view") {
			t.Errorf("holders' view over-grant reported, but holders never overlapped: %s", v)
		}
	}
}

type dropDeletes struct{ manager.Store }

func (d dropDeletes) Delete(context.Context, string, uint64) error { return nil }

// injectedRun runs one node whose manager believes gpu has managerCap
// slots, with three executors for a few seconds, and audits it against the
// true capacity of 1.
func injectedRun(t *testing.T, managerCap int64, wrap func(manager.Store) manager.Store) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := Settings{LeaseTTL: 2 * time.Second, Logger: harness.Logger()}
	cl := provisionedCluster(ctx, t, &st)
	aud, err := StartAuditor(ctx, cl.URL(), cl.Auth(config.RoleManager), st.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	terms := &Terms{}
	c, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: "node1", Instance: "liar",
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: managerCap}}, Terms: terms, WrapStore: wrap})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	harness.Eventually(t, 2*time.Minute, "the manager serves", c.Serving) // only catches one that never does

	rec := &Recorder{}
	runCtx, stop := context.WithTimeout(ctx, 4*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 3 {
		e := NewExecutor(ExecutorConfig{Settings: st, Cluster: cl, ID: "e" + string(rune('a'+i)), Node: "node1", Pool: "gpu",
			Upstream: i, Seed: uint64(i), Recorder: rec, MaxWait: 2 * time.Second, MaxHold: 400 * time.Millisecond})
		wg.Go(func() {
			if err := e.Run(runCtx); err != nil {
				t.Errorf("executor: %v", err)
			}
		})
	}
	wg.Wait()
	runEnd := time.Now()
	// Let the lingering records expire, so the auditor sees their end.
	// (Queue entries have no TTL: with deletes dropped, they stay.)
	harness.Eventually(t, st.LeaseTTL+5*time.Second, "lease records gone", func() bool {
		l, _ := aud.Live()
		return len(l) == 0
	})
	aud.Stop()
	leases, leaders, events := aud.Observations()
	holds, calls, nf := rec.Snapshot()
	if len(holds) < 3 {
		t.Fatalf("only %d leases held: the run proves nothing", len(holds))
	}
	rep := Audit(AuditInput{
		Capacity: map[string]map[string]int64{"node1": {"gpu": 1}}, LeaseTTL: st.LeaseTTL,
		Leases: leases, Leaders: leaders, Events: events, Holds: holds, Calls: calls, NetFaults: nf,
		Terms: terms.All(), Overlaps: terms.Overlaps(), RunEnd: runEnd, HangGrace: 2 * time.Second,
	})
	for _, v := range rep.Violations {
		t.Logf("auditor: %s", v)
	}
	return rep
}

func assertViolation(t *testing.T, rep *Report, prefix string) {
	t.Helper()
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, prefix) {
			return
		}
	}
	t.Errorf("the auditor did not report %q; it reported %d violations", prefix, len(rep.Violations))
}
