package integration

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/lease"
)

// clusterView is GET /v1/cluster of the leasemgr at httpAddr.
func clusterView(t *testing.T, httpAddr string) httpapi.Cluster {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c httpapi.Cluster
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/cluster: %s, %v", resp.Status, err)
	}
	return c
}

// fresh reports whether c lists node, answered now with its pools.
func fresh(c httpapi.Cluster, node string) bool {
	for _, n := range c.Nodes {
		if n.Node == node {
			return !n.Stale && len(n.Pools) > 0
		}
	}
	return false
}

// The cluster view shows the node serving it (issue 31: the manager
// refused its own snapshot request, so /v1/cluster marked its own node
// stale, the page of a single node was empty, and every look counted as a
// refused reply), first; with cluster pools, the serving manager shows
// them too. Through the real leasemgr binaries, on one node and on two
// that share NATS.
func TestClusterViewShowsItsOwnNode(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "solo", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	c := clusterView(t, httpAddr)
	if len(c.Nodes) != 1 || !fresh(c, "solo") {
		t.Fatalf("a single node's cluster view: %+v", c.Nodes)
	}
	if n := refusedReplies(t, httpAddr, "solo"); n != 0 {
		t.Fatalf("looking at the cluster view counted %d refused replies", n)
	}

	// A second node, sharing the first's embedded NATS, serving the
	// cluster pools: each view shows both nodes and the cluster pools, its
	// own node first.
	envB, addrB, _ := clusterNode(t, env, "duo", "gpu=1", "api=2")
	eventually(t, 20*time.Second, "node duo to serve the cluster pools", func() bool { return servedBy(t, envB) == "duo" })
	eventually(t, 10*time.Second, "node duo's view to show both nodes and the cluster pools", func() bool {
		c := clusterView(t, addrB)
		return len(c.Nodes) == 3 && c.Nodes[0].Node == "duo" && fresh(c, "duo") && fresh(c, "solo") && fresh(c, lease.ClusterNode)
	})
	if c := clusterView(t, httpAddr); c.Nodes[0].Node != "solo" || !fresh(c, "duo") || !fresh(c, lease.ClusterNode) {
		t.Fatalf("node solo's view: %+v", c.Nodes)
	}
	for node, addr := range map[string]string{"solo": httpAddr, "duo": addrB} {
		if n := refusedReplies(t, addr, node); n != 0 {
			t.Errorf("node %s counted %d refused replies", node, n)
		}
		if n := int(metricValue(t, addr, "lease_replies_refused_total", "node", lease.ClusterNode)); node == "duo" && n > 0 {
			t.Errorf("the cluster pools' manager counted %d refused replies", n)
		}
	}
}
