package manager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// Stored pool changes are applied only if a manager could have made them
// (issue 28: a forged delta was applied at the next takeover). An earlier
// version's unmarked changes are carried over once; after that, an
// unmarked value, one naming no manager, one a resize could not make or
// one that does not decode strictly is refused, logged and counted, and
// the node serves its configured pools.
func TestStoredPoolChangesNoManagerWrote(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pools, err := jetstream.OpenLeaseStore(ctx, harness.Connect(t, srv.URL), jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Pools})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	refused := map[string]int{}
	capacity := func() int64 {
		t.Helper()
		n := harness.StartManager(t, srv.URL, manager.Config{Node: node, Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}},
			RecordRefused: func(reason string) { mu.Lock(); refused[reason]++; mu.Unlock() }})
		defer n.Manager.Close()
		return harness.PoolStats(t, n.Manager, "gpu").Capacity
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := pools.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}

	// An earlier version's changes are carried over, marked, once.
	put(node, `{"set":{"gpu":3}}`)
	if c := capacity(); c != 3 {
		t.Fatalf("the earlier version's resize to 3 was not carried over: capacity %d", c)
	}
	if _, _, err := pools.Get(ctx, node+".delta"); err != nil {
		t.Fatalf("the carried-over changes were not stored under the new key: %v", err)
	}
	put(node, `{"set":{"gpu":99}}`)
	if c := capacity(); c != 3 {
		t.Fatalf("an unmarked value written after the carry-over was read: capacity %d", c)
	}

	for _, forged := range []string{
		`{"set":{"gpu":99}}`,                             // names no manager
		`{"manager":"","set":{"gpu":99}}`,                // the same
		`{"manager":"m","set":{"gpu":-5}}`,               // no resize makes it
		`{"manager":"m","set":{"bad name":2}}`,           // nor this
		`{"manager":"m","rates":{"gpu":{"rate":"1/y"}}}`, // nor this
		`{"manager":"m","set":{"gpu":99},"evil":true}`,   // not strict
		`{"manager":"m","set":{"gpu":99}} {}`,            // trailing data
		`not json`,
	} {
		before := refused[manager.RefusedPoolDelta]
		put(node+".delta", forged)
		if c := capacity(); c != 1 {
			t.Errorf("stored %s: capacity %d, want the configured 1", forged, c)
		}
		mu.Lock()
		if refused[manager.RefusedPoolDelta] != before+1 {
			t.Errorf("stored %s: not counted as refused", forged)
		}
		mu.Unlock()
	}

	// What a manager stores is applied.
	put(node+".delta", `{"manager":"m","term":7,"set":{"gpu":2},"rates":{"gpu":{"rate":"60/m","burst":2}}}`)
	if c := capacity(); c != 2 {
		t.Fatalf("a manager's stored changes: capacity %d, want 2", c)
	}
}
