package cluster

import (
	"context"
	"testing"

	"github.com/slotlease/slotlease/config"
)

// provisionedCluster starts a 3-server cluster running the accounts
// layout, shut down when the test ends (after the cleanups registered
// later: the connections close first), and makes the buckets and streams
// of st, whose defaults it fills in.
func provisionedCluster(ctx context.Context, t *testing.T, st *Settings) *Cluster {
	t.Helper()
	cl, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	st.defaults()
	if err := Provision(ctx, cl.URL(), cl.Auth(config.RoleManager), *st); err != nil {
		t.Fatal(err)
	}
	return cl
}
