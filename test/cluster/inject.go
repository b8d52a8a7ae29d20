package cluster

// The faults a run injects: its agenda of scheduled actions, the loop
// that picks a random fault at random pauses, and each fault's doing and
// undoing (apply), with the checks that the cluster is back after one.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/slotlease/slotlease/jetstream"
)

func (s *suite) schedule(after time.Duration, what string, do func(ctx context.Context)) {
	s.agenda = append(s.agenda, action{at: time.Now().Add(after), what: what, do: do})
}

// runAgenda runs the due actions, or all of them when all is set.
func (s *suite) runAgenda(ctx context.Context, all bool) {
	for {
		sort.SliceStable(s.agenda, func(i, j int) bool { return s.agenda[i].at.Before(s.agenda[j].at) })
		if len(s.agenda) == 0 || (!all && time.Now().Before(s.agenda[0].at)) {
			return
		}
		a := s.agenda[0]
		s.agenda = s.agenda[1:]
		s.logf("%s", a.what)
		a.do(ctx)
	}
}

func (s *suite) faultLoop(ctx context.Context) {
	end := s.start.Add(s.cfg.Duration)
	next := time.Now().Add(s.pause())
	hung := map[string]bool{}
	for time.Now().Before(end) && ctx.Err() == nil {
		s.runAgenda(ctx, false)
		for _, c := range s.rec.Overdue(time.Now(), 2*time.Second) {
			if !hung[c.RequestID] {
				hung[c.RequestID] = true
				s.logf("HANG: acquire %s by %s started %v ago with a %v bound", c.RequestID, c.Executor, time.Since(c.Start).Round(time.Millisecond), c.Bound)
			}
		}
		if s.serverOut >= 0 {
			f := &s.servers[len(s.servers)-1]
			if slices.Contains(f.Led, jetstream.NamesFor(s.cfg.Prefix).Leases) && f.LeaseLeaderAt.IsZero() && s.cluster.StreamLeader("KV_"+jetstream.NamesFor(s.cfg.Prefix).Leases) >= 0 {
				f.LeaseLeaderAt = time.Now()
			}
			if s.cluster.Up(s.serverOut) {
				s.checkServerBack(ctx)
			}
		}
		if time.Now().After(next) {
			s.inject(ctx)
			next = time.Now().Add(s.pause())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *suite) pause() time.Duration {
	return s.cfg.FaultEvery/2 + time.Duration(s.rng.Int64N(int64(s.cfg.FaultEvery)))
}

func (s *suite) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// inject picks a fault by weight and applies it if its preconditions hold.
func (s *suite) inject(ctx context.Context) {
	total := 0
	for _, k := range faultKinds {
		total += s.cfg.Weights[k]
	}
	if total == 0 {
		return
	}
	pick := s.rng.IntN(total)
	kind := ""
	for _, k := range faultKinds {
		if pick < s.cfg.Weights[k] {
			kind = k
			break
		}
		pick -= s.cfg.Weights[k]
	}
	if s.apply(ctx, kind) {
		s.faults[kind]++
	}
}

func (s *suite) apply(ctx context.Context, kind string) bool {
	switch kind {
	case "exec-kill":
		// Try a few executors: only one that holds a lease can be killed.
		for range 4 {
			e := s.execs[s.rng.IntN(len(s.execs))]
			if e.Kill(ctx) {
				s.logf("exec-kill %s", e.ID())
				return true
			}
		}
	case "exec-cut":
		e := s.execs[s.rng.IntN(len(s.execs))]
		if p := e.Proxy(); p != nil && !s.holed[p] {
			s.rec.AddNetFault(e.ID(), "", "cut", time.Now())
			p.Cut()
			s.logf("exec-cut %s", e.ID())
			return true
		}
	case "exec-blackhole":
		e := s.execs[s.rng.IntN(len(s.execs))]
		p := e.Proxy()
		if p == nil || s.holed[p] {
			return false
		}
		d := s.between(500*time.Millisecond, 5*time.Second)
		done := s.rec.AddNetFault(e.ID(), "", "blackhole", time.Now())
		p.Blackhole()
		s.holed[p] = true
		s.logf("exec-blackhole %s for %v", e.ID(), d.Round(time.Millisecond))
		s.schedule(d, "heal executor "+e.ID(), func(context.Context) {
			p.Heal()
			delete(s.holed, p)
			done(time.Now())
		})
		return true
	case "mgr-crash", "mgr-stop", "mgr-blackhole", "mgr-cut":
		node := s.nodes[s.rng.IntN(len(s.nodes))]
		c := s.pickCandidate(node)
		if c == nil {
			return false
		}
		if kind != "mgr-cut" && !s.hasHealthyStandby(node, c) {
			return false // with no standby the node's leases are lost: not what this fault tests
		}
		serving := c.Serving()
		switch kind {
		case "mgr-cut":
			s.rec.AddNetFault(c.Instance, node, "cut", time.Now())
			c.Proxy.Cut()
			s.logf("mgr-cut %s (active: %v)", c.Instance, serving)
		case "mgr-blackhole":
			d := s.between(500*time.Millisecond, 4*time.Second)
			healed := s.rec.AddNetFault(c.Instance, node, "blackhole", time.Now())
			c.Proxy.Blackhole()
			s.holed[c.Proxy] = true
			if serving {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: c.Instance, at: time.Now()})
			}
			s.logf("mgr-blackhole %s (active: %v) for %v", c.Instance, serving, d.Round(time.Millisecond))
			p := c.Proxy
			s.schedule(d, "heal candidate "+c.Instance, func(context.Context) {
				p.Heal()
				delete(s.holed, p)
				healed(time.Now())
			})
		case "mgr-crash", "mgr-stop":
			at := time.Now()
			if kind == "mgr-crash" {
				c.Crash()
			} else {
				c.Stop()
			}
			s.removeCandidate(c)
			if serving {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: c.Instance, at: at, clean: kind == "mgr-stop"})
			}
			d := s.between(500*time.Millisecond, 3*time.Second)
			s.logf("%s %s (active: %v), restart in %v", kind, c.Instance, serving, d.Round(time.Millisecond))
			s.schedule(d, "restart a candidate for "+node, func(ctx context.Context) {
				if err := s.startCandidate(ctx, node); err != nil {
					s.fail("%v", err)
				}
			})
		}
		return true
	case "mgr-duplicate":
		node := s.nodes[s.rng.IntN(len(s.nodes))]
		if len(s.cands[node]) >= s.cfg.CandidatesPerNode+1 {
			return false
		}
		if err := s.startCandidate(ctx, node); err != nil {
			s.fail("%v", err)
			return false
		}
		dup := s.cands[node][len(s.cands[node])-1]
		crash := s.rng.IntN(2) == 0
		d := s.between(2*time.Second, 6*time.Second)
		s.logf("mgr-duplicate %s, to be %s in %v", dup.Instance, map[bool]string{true: "killed", false: "stopped"}[crash], d.Round(time.Millisecond))
		s.schedule(d, "end duplicate "+dup.Instance, func(context.Context) {
			if !slices.Contains(s.cands[node], dup) {
				return
			}
			if !s.hasHealthyStandby(node, dup) {
				return // it is the node's only healthy manager now; keep it
			}
			if dup.Serving() {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: dup.Instance, at: time.Now(), clean: !crash})
			}
			if crash {
				dup.Crash()
			} else {
				dup.Stop()
			}
			s.removeCandidate(dup)
		})
		return true
	case "exec-forge":
		// An advisory published in the managers' account, as any client of
		// a single-account NATS could make appear (manager/forgeddisconnect_test.go;
		// in the suite's account layout no executor can reach that subject):
		// one naming a live holder's connection must cost it nothing, the
		// close check stops it. The auditor excuses no lease lost to it (its
		// connection was not down).
		e := s.execs[s.rng.IntN(len(s.execs))]
		server, id, ok := e.ConnIdentity()
		if !ok || s.forger == nil {
			return false
		}
		adv := fmt.Appendf(nil, `{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"id":%q},"client":{"id":%d}}`, server, id)
		if s.forger.Publish(s.cluster.DisconnectSubject(), adv) != nil {
			return false
		}
		s.logf("exec-forge %s (conn %d on %s)", e.ID(), id, server)
		return true
	case "node-restart":
		return s.restartNode(ctx)
	case "server-kill":
		if s.serverOut >= 0 || time.Since(s.lastKill) < 3*time.Second {
			return false
		}
		i := s.rng.IntN(s.cluster.Size())
		led := s.led(i)
		at := time.Now()
		s.cluster.Kill(i)
		s.serverOut, s.lastKill = i, at
		s.servers = append(s.servers, ServerFault{Server: i, Start: at, Led: led})
		d := s.between(time.Second, 4*time.Second)
		s.logf("server-kill n%d (led %v), restart in %v", i, led, d.Round(time.Millisecond))
		s.schedule(d, fmt.Sprintf("restart server n%d", i), func(context.Context) {
			if err := s.cluster.Restart(i); err != nil {
				s.fail("%v", err)
			}
		})
		return true
	}
	return false
}

// led names the raft groups server i leads: the meta group and the streams
// of the buckets.
func (s *suite) led(i int) []string {
	var out []string
	if s.cluster.MetaLeader() == i {
		out = append(out, "meta")
	}
	for _, b := range []string{jetstream.NamesFor(s.cfg.Prefix).Leases, jetstream.NamesFor(s.cfg.Prefix).Leaders} {
		if s.cluster.StreamLeader("KV_"+b) == i {
			out = append(out, b)
		}
	}
	return out
}

// checkServerBack closes the server fault once the cluster is healthy.
func (s *suite) checkServerBack(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if s.cluster.WaitHealthy(hctx) == nil {
		f := &s.servers[len(s.servers)-1]
		f.End = time.Now()
		s.logf("server n%d back, cluster healthy %v after the kill", f.Server, f.End.Sub(f.Start).Round(time.Millisecond))
		s.serverOut = -1
	}
}

func (s *suite) waitServerBack(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.cluster.WaitHealthy(hctx); err != nil {
		s.fail("%v", err)
	}
	s.checkServerBack(ctx)
}

// pickCandidate picks a live, unpartitioned candidate of node, the active
// one two times in three.
func (s *suite) pickCandidate(node string) *Candidate {
	cs := slices.DeleteFunc(slices.Clone(s.cands[node]), func(c *Candidate) bool { return s.holed[c.Proxy] })
	if len(cs) == 0 {
		return nil
	}
	if s.rng.IntN(3) < 2 {
		for _, c := range cs {
			if c.Serving() {
				return c
			}
		}
	}
	return cs[s.rng.IntN(len(cs))]
}

// hasHealthyStandby reports whether node has a live candidate other than
// c that is not partitioned.
func (s *suite) hasHealthyStandby(node string, c *Candidate) bool {
	for _, o := range s.cands[node] {
		if o != c && !s.holed[o.Proxy] {
			return true
		}
	}
	return false
}
