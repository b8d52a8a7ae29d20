package candidacy_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/candidacy"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

func TestDisagreements(t *testing.T) {
	a := candidacy.Record{Node: "n1", Instance: "i1", Pools: map[string]int64{"api": 50, "embed": 20}}
	b := candidacy.Record{Node: "n2", Instance: "i2", Pools: map[string]int64{"api": 50, "embed": 20}}
	if d := candidacy.Disagreements([]candidacy.Record{a, b}); d != nil {
		t.Fatalf("agreeing candidates: %v", d)
	}
	c := candidacy.Record{Node: "n3", Instance: "i3", Pools: map[string]int64{"api": 40}}
	want := []string{
		"cluster pool api: capacity 40 on n3; capacity 50 on n1, n2",
		"cluster pool embed: capacity 20 on n1, n2; not listed on n3",
	}
	if d := candidacy.Disagreements([]candidacy.Record{c, b, a}); !slices.Equal(d, want) {
		t.Fatalf("got %q\nwant %q", d, want)
	}
	// A start rate is part of what they must agree on.
	r := candidacy.Record{Node: "n3", Instance: "i3", Pools: map[string]int64{"api": 50, "embed": 20}, Rates: map[string]string{"api": "60/m burst 5"}}
	want = []string{"cluster pool api: capacity 50 on n1, n2; capacity 50, rate 60/m burst 5 on n3"}
	if d := candidacy.Disagreements([]candidacy.Record{a, b, r}); !slices.Equal(d, want) {
		t.Fatalf("got %q\nwant %q", d, want)
	}
	a.Rates, b.Rates = r.Rates, r.Rates
	if d := candidacy.Disagreements([]candidacy.Record{a, b, r}); d != nil {
		t.Fatalf("agreeing rates: %v", d)
	}
	// So is a usage budget.
	r.Budgets = map[string]string{"api": "100000/m"}
	want = []string{"cluster pool api: capacity 50, rate 60/m burst 5 on n1, n2; capacity 50, rate 60/m burst 5, budget 100000/m on n3"}
	if d := candidacy.Disagreements([]candidacy.Record{a, b, r}); !slices.Equal(d, want) {
		t.Fatalf("got %q\nwant %q", d, want)
	}
	a.Budgets, b.Budgets = r.Budgets, r.Budgets
	if d := candidacy.Disagreements([]candidacy.Record{a, b, r}); d != nil {
		t.Fatalf("agreeing budgets: %v", d)
	}
}

// Two candidates with different capacities both learn of it; when one
// stops, its record goes and the other learns they agree again.
func TestCandidatesSeeEachOther(t *testing.T) {
	srv := harness.StartServer(t)
	store := harness.StartManagerStore(t, srv.URL)
	type seen struct {
		mu   sync.Mutex
		last []string
		n    int
	}
	start := func(node string, api int64) (*seen, func() error) {
		s := &seen{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- candidacy.Run(ctx, candidacy.Config{Store: store, Cluster: lease.ClusterNode, TTL: time.Second,
				Self:   candidacy.Record{Node: node, Instance: node + "-i", Pools: map[string]int64{"api": api}},
				Logger: harness.Logger(),
				OnChange: func(d []string) {
					s.mu.Lock()
					s.last, s.n = d, s.n+1
					s.mu.Unlock()
				}})
		}()
		stop := sync.OnceValue(func() error { cancel(); return <-done })
		t.Cleanup(func() { _ = stop() })
		return s, stop
	}
	get := func(s *seen) ([]string, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.last, s.n
	}
	s1, _ := start("n1", 50)
	s2, stop2 := start("n2", 40)
	want := "cluster pool api: capacity 40 on n2; capacity 50 on n1"
	for _, s := range []*seen{s1, s2} {
		harness.Eventually(t, 5*time.Second, "the disagreement reported", func() bool {
			d, _ := get(s)
			return slices.Equal(d, []string{want})
		})
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "agreement once n2 stopped", func() bool {
		d, n := get(s1)
		return d == nil && n >= 2
	})
}

// Records no candidate wrote (issue 28: a forged record without a TTL was
// reported forever) are refused and counted, never reported: without a
// TTL, under a key that does not name their instance, not strictly
// decoded, with a bad node or pool. A valid record with a TTL is.
func TestForgedCandidateRecordsAreRefused(t *testing.T) {
	srv := harness.StartServer(t)
	store := harness.StartManagerStore(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	forged := map[string]string{
		"notl":  `{"node":"x","instance":"notl","pools":{"api":1}}`, // written without a TTL below
		"other": `{"node":"x","instance":"someone","pools":{"api":1}}`,
		"extra": `{"node":"x","instance":"extra","pools":{"api":1},"evil":1}`,
		"badn":  `{"node":"bad node","instance":"badn","pools":{"api":1}}`,
		"badp":  `{"node":"x","instance":"badp","pools":{"api":-1}}`,
		"junk":  `junk`,
	}
	for inst, v := range forged {
		key := candidacy.Key(lease.ClusterNode, inst)
		var err error
		if inst == "notl" {
			_, err = store.Put(ctx, key, []byte(v))
		} else {
			_, err = store.Create(ctx, key, []byte(v), time.Minute)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A real disagreement, so OnChange is called once the watch caught up.
	if _, err := store.Create(ctx, candidacy.Key(lease.ClusterNode, "real"), []byte(`{"node":"r","instance":"real","pools":{"api":9}}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last []string
	refused := 0
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- candidacy.Run(rctx, candidacy.Config{Store: store, Cluster: lease.ClusterNode, TTL: time.Second,
			Self:     candidacy.Record{Node: "me", Instance: "me-i", Pools: map[string]int64{"api": 5}},
			Logger:   harness.Logger(),
			OnChange: func(d []string) { mu.Lock(); last = d; mu.Unlock() },
			Refused:  func(reason string) { mu.Lock(); refused++; mu.Unlock() }})
	}()
	defer func() { stop(); <-done }()
	want := []string{"cluster pool api: capacity 5 on me; capacity 9 on r"}
	harness.Eventually(t, 10*time.Second, "the real disagreement reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(last, want) && refused >= len(forged)
	})
	mu.Lock()
	defer mu.Unlock()
	if refused != len(forged) {
		t.Fatalf("refused %d records, want the %d forged ones", refused, len(forged))
	}
}

// A manager that is no candidate learns the cluster pools the live
// candidates list (Watch, OnPools): none at first, then a candidate's,
// then none again when it stops.
func TestWatchReportsTheClusterPools(t *testing.T) {
	srv := harness.StartServer(t)
	store := harness.StartManagerStore(t, srv.URL)
	var mu sync.Mutex
	var pools []string
	seen := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- candidacy.Watch(ctx, candidacy.Config{Store: store, Cluster: lease.ClusterNode, Logger: harness.Logger(),
			OnPools: func(p []string) { mu.Lock(); pools, seen = p, seen+1; mu.Unlock() }})
	}()
	defer func() { cancel(); <-done }()
	want := func(what string, names ...string) {
		t.Helper()
		harness.Eventually(t, 10*time.Second, what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen > 0 && pools != nil && slices.Equal(pools, append([]string{}, names...))
		})
	}
	want("no cluster pools")
	cctx, stop := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() {
		cdone <- candidacy.Run(cctx, candidacy.Config{Store: store, Cluster: lease.ClusterNode, TTL: time.Second, Logger: harness.Logger(),
			Self: candidacy.Record{Node: "n", Instance: "n-i", Pools: map[string]int64{"embed": 2, "api": 5}}, OnChange: func([]string) {}})
	}()
	want("the candidate's pools", "api", "embed")
	stop()
	<-cdone
	want("none once the candidate stopped")
}
