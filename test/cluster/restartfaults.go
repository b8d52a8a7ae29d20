package cluster

import (
	"context"
	"slices"
	"time"
)

// Restarts (issue 30): a lease manager stopped cleanly (SIGTERM) and
// started again under held leases, with no standby to take over meanwhile,
// and a rolling restart of every NATS server and every manager, one at a
// time. Neither may cost a lease: a clean stop tells the holders, who
// renew at once and ride the restart out on their TTL; a stopped server
// closes its clients' connections itself, which frees nothing, and they
// move to another server.

// restartNode stops every candidate of a node cleanly, the standbys first,
// so that no one serves the node until they are started again 0.5-3s
// later. It reports whether it ran.
func (s *suite) restartNode(ctx context.Context) bool {
	node := s.nodes[s.rng.IntN(len(s.nodes))]
	cs := slices.Clone(s.cands[node])
	if len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		if s.holed[c.Proxy] {
			return false // a partitioned one is not a clean stop
		}
	}
	// The active one last: until then it serves.
	slices.SortStableFunc(cs, func(a, b *Candidate) int {
		switch {
		case a.Serving() == b.Serving():
			return 0
		case b.Serving():
			return -1
		}
		return 1
	})
	// Not a handover (nobody serves until the restart): not counted in
	// the summary's takeovers.
	at := time.Now()
	for _, c := range cs {
		c.Stop()
		s.removeCandidate(c)
	}
	d := s.between(500*time.Millisecond, 3*time.Second)
	s.logf("node-restart %s: %d candidates stopped cleanly in %v, restart in %v", node, len(cs), time.Since(at).Round(time.Millisecond), d.Round(time.Millisecond))
	s.schedule(d, "restart the candidates of "+node, func(ctx context.Context) {
		for range cs {
			if err := s.startCandidate(ctx, node); err != nil {
				s.fail("%v", err)
			}
		}
	})
	return true
}

// rollingRestart restarts every NATS server, one at a time (stopped,
// started again a second later, the cluster healthy again before the
// next), then every manager candidate, one at a time (stopped cleanly, a
// new one started and standing by or serving before the next), while the
// executors work.
func (s *suite) rollingRestart(ctx context.Context) {
	for i := range s.cluster.Size() {
		led := s.led(i)
		at := time.Now()
		s.logf("rolling: stop server n%d (led %v)", i, led)
		s.cluster.Stop(i)
		s.logf("rolling: server n%d stopped in lame duck mode in %v", i, time.Since(at).Round(time.Millisecond))
		s.servers = append(s.servers, ServerFault{Server: i, Start: at, Led: led})
		s.faults["rolling-server"]++
		time.Sleep(time.Second)
		if err := s.cluster.Restart(i); err != nil {
			s.fail("rolling: %v", err)
			return
		}
		s.serverOut = i
		s.waitServerBack(ctx)
		if err := s.waitServing(ctx, 30*time.Second); err != nil {
			s.fail("rolling, after restarting n%d: %v", i, err)
		}
	}
	for _, node := range s.nodes {
		for _, c := range slices.Clone(s.cands[node]) {
			if c.Serving() {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: c.Instance, at: time.Now(), clean: true})
			}
			s.logf("rolling: restart %s (active: %v)", c.Instance, c.Serving())
			c.Stop()
			s.removeCandidate(c)
			s.faults["rolling-manager"]++
			if err := s.startCandidate(ctx, node); err != nil {
				s.fail("rolling: %v", err)
				return
			}
			if err := s.waitServing(ctx, 30*time.Second); err != nil {
				s.fail("rolling, after restarting %s: %v", c.Instance, err)
			}
		}
	}
}
