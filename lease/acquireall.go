package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/rules"
)

// Want is one pool of an AcquireAll: its name and how many slots.
type Want struct {
	Pool  string
	Slots int64
}

// MaxSetPools bounds the pools of one AcquireAll.
const MaxSetPools = 8

// Queued says where one acquire of an AcquireAll waits, and what the set
// holds meanwhile.
type Queued struct {
	Pool, Node string
	Slots      int64
	Position   int      // 1-based queue position
	Holding    []string // "<pool> on node <node>" for each lease already held
}

// OnQueuedIn is OnQueued for AcquireAll: it says which pool the position
// is in and what is held while waiting. (A plain OnQueued given to
// AcquireAll is called with the position in whichever pool is waited for.)
func OnQueuedIn(f func(Queued)) AcquireOption {
	return func(o *acquireOptions) { o.onQueuedIn = f }
}

// AcquireAll acquires slots of several pools at once: all of them or none.
// A pool is taken from the cluster (node ClusterNode) when the cluster
// pools' manager serves it, else from this client's node; a name is never
// both.
//
// The rule that keeps it from deadlocking: the pools are always acquired in
// one global order — this node's pools first, then the cluster's, each
// group by name — and what is granted is held while the next is waited
// for. Two sets waiting on each other would need one to wait for a pool
// before one it holds, which the order forbids. And node pools go first so
// that a set waits for a scarce cluster slot holding only slots of its own
// node, never a cluster slot while waiting for a node's.
//
// opts apply to each acquire. WithWait bounds the whole set; a request id
// (WithRequestID) is made per pool as "<id>-<pool>", so retrying the set
// with the same id finds its leases. On any refusal or error every lease
// already granted is released before AcquireAll returns the error, which
// names the pool and node.
func (c *Client) AcquireAll(ctx context.Context, wants []Want, opts ...AcquireOption) (*LeaseSet, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkWants(wants, o.requestID); err != nil {
		return nil, err
	}
	cluster, err := c.clusterPools(ctx, wants)
	if err != nil {
		return nil, err
	}
	type step struct {
		Want
		c *Client
	}
	steps := make([]step, 0, len(wants))
	for _, w := range wants {
		s := step{Want: w, c: c}
		if cluster[w.Pool] {
			if s.c, err = c.clusterClient(); err != nil {
				return nil, err
			}
		}
		steps = append(steps, s)
	}
	slices.SortFunc(steps, func(a, b step) int {
		return cmp.Or(cmp.Compare(boolRank(a.c.node == ClusterNode), boolRank(b.c.node == ClusterNode)), cmp.Compare(a.Pool, b.Pool))
	})

	var until time.Time
	if o.wait > 0 {
		until = time.Now().Add(o.wait)
	}
	var held []*Lease
	fail := func(s step, err error) (*LeaseSet, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = releaseAll(rctx, held)
		return nil, fmt.Errorf("%d slot(s) of pool %s on node %s: %w", s.Slots, s.Pool, s.c.node, err)
	}
	for _, s := range steps {
		popts := slices.Clone(opts)
		if o.requestID != "" {
			popts = append(popts, WithRequestID(o.requestID+"-"+s.Pool))
		}
		if !until.IsZero() {
			left := time.Until(until)
			if left <= 0 {
				return fail(s, errorf(CodeWaitExpired, "the set's wait of %v ran out", o.wait))
			}
			popts = append(popts, WithWait(left))
		}
		if o.onQueuedIn != nil {
			holding := make([]string, 0, len(held))
			for _, l := range held {
				holding = append(holding, l.Pool()+" on node "+l.Node())
			}
			popts = append(popts, OnQueued(func(pos int) {
				o.onQueuedIn(Queued{Pool: s.Pool, Node: s.c.node, Slots: s.Slots, Position: pos, Holding: holding})
			}))
		}
		l, err := s.c.Acquire(ctx, s.Pool, s.Slots, popts...)
		if err != nil {
			return fail(s, err)
		}
		held = append(held, l)
	}
	return newLeaseSet(held), nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkWants refuses, before anything is acquired, a set that could never
// be granted as asked.
func checkWants(wants []Want, requestID string) error {
	if len(wants) == 0 {
		return errorf(CodeBadRequest, "no pools to acquire")
	}
	if len(wants) > MaxSetPools {
		return errorf(CodeBadRequest, "%d pools in one acquire, at most %d", len(wants), MaxSetPools)
	}
	seen := map[string]bool{}
	for _, w := range wants {
		if err := rules.ValidToken(w.Pool); err != nil {
			return errorf(CodeBadRequest, "pool %q: %v", w.Pool, err)
		}
		if seen[w.Pool] {
			return errorf(CodeBadRequest, "pool %s named twice", w.Pool)
		}
		seen[w.Pool] = true
		if w.Slots < 1 {
			return errorf(CodeInvalidSlots, "%d slot(s) of pool %s: must be at least 1", w.Slots, w.Pool)
		}
		if requestID != "" {
			if err := rules.ValidRequestID(requestID + "-" + w.Pool); err != nil {
				return errorf(CodeBadRequest, "request id %q with pool %s: %v", requestID, w.Pool, err)
			}
		}
	}
	return nil
}

// clusterPools says which of wants are cluster pools, by asking the cluster
// pools' manager. While none answers (no cluster pools, or a takeover under
// way) it asks the node: a pool the node has is the node's; a pool the
// node's stats name among the live candidates' cluster pools is waited
// for, for as long as a takeover may take (WithNoManagerWait); any other
// is unknown everywhere and refused at once (CodeUnknownPool). A node
// whose manager does not answer either is asked as long, then refused
// (ErrUnavailable). A node that does not say which cluster pools there are
// (an older manager) leaves the pools it lacks to that wait too.
func (c *Client) clusterPools(ctx context.Context, wants []Want) (map[string]bool, error) {
	out := map[string]bool{}
	if c.node == ClusterNode {
		for _, w := range wants {
			out[w.Pool] = true
		}
		return out, nil
	}
	cc, err := c.clusterClient()
	if err != nil {
		return nil, err
	}
	giveUp := time.Now().Add(c.noManagerWait)
	nodeAnswered := false
	for {
		ps, err := cc.Stats(ctx)
		if err == nil {
			for _, p := range ps {
				out[p.Name] = true
			}
			return out, nil
		}
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return nil, fmt.Errorf("asking which pools are the cluster's: %w", err)
		}
		if np, err := c.NodePools(ctx); err == nil {
			nodeAnswered = true
			missing := missingPools(np.Pools, wants)
			if len(missing) == 0 {
				return out, nil
			}
			if np.ClusterPools != nil {
				for _, name := range missing {
					if !slices.Contains(*np.ClusterPools, name) {
						return nil, errorf(CodeUnknownPool, "pool %q is neither node %s's (%s) nor a cluster pool (%s)",
							name, c.node, poolList(np.Pools), echo.List(*np.ClusterPools))
					}
				}
			}
		}
		if time.Now().After(giveUp) {
			if !nodeAnswered {
				return nil, errorf(CodeUnavailable, "no lease manager answers for node %s (asked for %v)", c.node, c.noManagerWait.Round(time.Millisecond))
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// missingPools are the pools of wants ps does not have.
func missingPools(ps []PoolStats, wants []Want) []string {
	var out []string
	for _, w := range wants {
		if !slices.ContainsFunc(ps, func(p PoolStats) bool { return p.Name == w.Pool }) {
			out = append(out, w.Pool)
		}
	}
	return out
}

func poolList(ps []PoolStats) string {
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return echo.List(names)
}

// clusterClient is a client for the cluster pools on c's connection, with
// c's settings; made once, closed with c.
func (c *Client) clusterClient() (*Client, error) {
	if c.node == ClusterNode {
		return c, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("lease: client closed")
	}
	if c.cluster == nil {
		cc, err := NewClient(c.nc, ClusterNode, WithPrefix(c.prefix), WithHolder(c.holder), WithRequestTimeout(c.requestTimeout),
			WithPollInterval(c.pollInterval), WithNoManagerWait(c.noManagerWait))
		if err != nil {
			return nil, err
		}
		cc.live.serverDrops = c.live.serverDrops // the same connection
		cc.tracing = c.tracing
		c.cluster = cc
	}
	return c.cluster, nil
}
