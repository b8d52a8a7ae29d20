package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// ClusterPoolsSource is a Source that also knows of the cluster pools
// (CLUSTER_POOLS): /v1/pools shows them beside the node's, apart, and
// /readyz and /v1/status add the warnings of this process's candidacy.
type ClusterPoolsSource interface {
	// ClusterPools returns the cluster pools as their serving manager
	// reports them, or nil when no manager serves any.
	ClusterPools(ctx context.Context) (*lease.NodePools, error)
	// Warnings lists what an operator should know (the cluster pool
	// candidates' disagreements); nil when nothing.
	Warnings() []string
}

// clusterPoolsWait bounds the cluster pools' stats request of one HTTP
// request.
const clusterPoolsWait = 2 * time.Second

// WithWarnings gives the source its warnings (ClusterPoolsSource).
func WithWarnings(f func() []string) SourceOption {
	return func(s *NATSSource) { s.warnings = f }
}

// WithLocalCluster gives the source the manager of the cluster pools when
// this process serves them (nil when it does not), and what their stats
// say besides the pools (the serving node, the candidates' warnings):
// asked over NATS, that manager would refuse to answer on its own
// process's connection, so the source asks it in process.
func WithLocalCluster[M interface {
	comparable
	Manager
}](manager func() M, servedBy string) SourceOption {
	return func(s *NATSSource) { s.clusterManager, s.servedBy = managerFunc(manager), servedBy }
}

var _ ClusterPoolsSource = (*NATSSource)(nil)

// ClusterPools implements ClusterPoolsSource by asking the cluster pools'
// manager, whichever process serves them.
func (s *NATSSource) ClusterPools(ctx context.Context) (*lease.NodePools, error) {
	if m := s.localManager(lease.ClusterNode); m != nil {
		return &lease.NodePools{Node: lease.ClusterNode, Pools: m.Stats(), ServedBy: s.servedBy, Warnings: s.Warnings()}, nil
	}
	c, err := lease.NewClient(s.nc, lease.ClusterNode, lease.WithPrefix(s.prefix))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, clusterPoolsWait)
	defer cancel()
	np, err := c.NodePools(ctx)
	if errors.Is(err, lease.ErrUnavailable) {
		return nil, nil // no manager serves cluster pools
	}
	if err != nil {
		return nil, err
	}
	return &np, nil
}

// Warnings implements ClusterPoolsSource.
func (s *NATSSource) Warnings() []string {
	if s.warnings == nil {
		return nil
	}
	return s.warnings()
}

// warnings returns the source's warnings, if it has any.
func (h *Handler) warnings() []string {
	if cs, ok := h.src.(ClusterPoolsSource); ok {
		return cs.Warnings()
	}
	return nil
}

// withCluster adds the cluster pools to np when the source knows them; a
// failure to ask leaves them out (the node's own pools are the answer).
func (h *Handler) withCluster(ctx context.Context, np *lease.NodePools) {
	cs, ok := h.src.(ClusterPoolsSource)
	if !ok || np.Node == lease.ClusterNode {
		return
	}
	if cp, err := cs.ClusterPools(ctx); err == nil {
		np.Cluster = cp
	} else {
		h.log.Warn("asking for the cluster pools", "err", err)
	}
}
