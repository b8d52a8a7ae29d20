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
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	nodes, err := lease.DiscoverNodes(ctx, nc, "lease")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Fatalf("discovered %v, want [n1 n2]", nodes)
	}

	msg, err := nc.Request("$SRV.INFO."+lease.ServiceName, nil, 2*time.Second)
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
	if stats, err := c.Stats(context.Background()); err != nil || len(stats) != 1 || stats[0].Name != "p" {
		t.Fatalf("stats %+v %v", stats, err)
	}
}
