package manager_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

func TestMicroServiceFindsEveryNode(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	for _, n := range []string{"n1", "n2"} {
		harness.StartManager(t, srv.URL, manager.Config{Node: n, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	}
	// Another prefix's manager is not ours.
	harness.StartManager(t, srv.URL, manager.Config{Node: "n3", Prefix: "other", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	nc := harness.Connect(t, srv.URL)
	// Discovery hears the nodes that answer within the window it is given
	// (the CLI gives 500ms). A loaded machine can answer later than that,
	// so the window doubles until both nodes are heard, up to a minute
	// (only a stuck run gets that far); no window may hear another
	// prefix's node.
	for window := 500 * time.Millisecond; ; window *= 2 {
		ctx, cancel := context.WithTimeout(context.Background(), window)
		nodes, err := lease.DiscoverNodes(ctx, nc, "lease")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(nodes, func(n string) bool { return n != "n1" && n != "n2" }) {
			t.Fatalf("discovered %v, want only [n1 n2]", nodes)
		}
		if len(nodes) == 2 {
			break
		}
		if window >= time.Minute {
			t.Fatalf("discovered %v in a %v window, want [n1 n2]", nodes, window)
		}
		t.Logf("discovered %v in a %v window; a longer one", nodes, window)
	}

	msg, err := nc.Request("$SRV.INFO."+lease.ServiceName, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range info.Endpoints {
		names = append(names, e.Name)
	}
	if info.Name != lease.ServiceName || !slices.Contains(names, "stats") || !slices.Contains(names, "resize") || info.Metadata["node"] == "" {
		t.Fatalf("service info %+v", info)
	}
	// The stats endpoint answers through the micro service, and counts.
	c := harness.Client(t, srv.URL, "n1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if stats, err := c.Stats(ctx); err != nil || len(stats) != 1 || stats[0].Name != "p" {
		t.Fatalf("stats %+v %v", stats, err)
	}
}
