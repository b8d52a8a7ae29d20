package manager

import (
	"time"

	"github.com/slotlease/slotlease/lease"
)

// A clean stop. A manager told to stop (Run's context ended: SIGTERM to
// leasemgr, an upgrade, a restart) is not one that crashed: it can tell
// its holders, so that the time until it or its successor serves costs
// them nothing. Before it closes:
//
//   - it frees nothing more because a connection closed: the frees
//     pending are dropped, and closes confirmed from now on are ignored
//     (disconnect.go). A holder that dies meanwhile is freed by its TTL.
//   - it publishes EventStopping on every pool. A Client holding leases of
//     the node renews them at once (wake.go), so each holder's deadline
//     starts about a full TTL (less the margin) from now: the restart has
//     that long before any running work is stopped.
//   - it waits for those renewals, at most stopWait, and answers them
//     with ServerStopping when its NATS server runs in its process and
//     stops with it (Config.EmbeddedServer: leasemgr's embedded
//     server). A holder told so does not hold the close of its connection
//     to that server against its lease (liveness.go): the only manager
//     that could have freed the lease on that close has stopped freeing,
//     and no manager can have that server confirm a close once it is
//     gone (closecheck.go asks the connection's own server).
//
// A manager deposed, or whose fence lapsed, announces nothing: it may no
// longer speak for the node.

// stopWaitMax bounds how long a clean stop waits for its holders'
// renewals; stopWait also keeps it under a tenth of the TTL.
const stopWaitMax = time.Second

func stopWait(ttl time.Duration) time.Duration { return min(stopWaitMax, ttl/10) }

// stopState is a clean stop's progress: whether it was announced, and
// which leases are still to be renewed. Guarded by Manager.mu: it changes
// with the leases (a renewal, a free), in the same step.
type stopState struct {
	announced bool // EventStopping went out; no more frees on a close
	// waiting holds the leases not renewed since the announcement, and
	// done closes when it is empty.
	waiting map[*held]struct{}
	done    chan struct{}
}

// announceStop runs a clean stop's announcement and waits, bounded, for
// the holders' renewals. The manager keeps serving meanwhile.
func (m *Manager) announceStop() {
	m.mu.Lock()
	if m.closed || m.stop.announced || !m.lead.serving() {
		m.mu.Unlock()
		return
	}
	m.stop.announced = true
	m.gone.stopFreeingLocked()
	if m.cfg.EmbeddedServer {
		if id := m.cfg.Conn.ConnectedServerId(); id != "" {
			m.out.stopServer.Store(&id)
		}
	}
	done := m.stop.awaitLocked(m.leases.byKey)
	for _, p := range m.pools {
		m.out.emit(p, lease.Event{Kind: lease.EventStopping, Message: "the lease manager is stopping: holders renew now"})
	}
	leases := len(m.stop.waiting)
	m.mu.Unlock()

	started := time.Now()
	limit := time.NewTimer(stopWait(m.cfg.TTL))
	defer limit.Stop()
	tick := time.NewTicker(25 * time.Millisecond) // the fence can lapse meanwhile
	defer tick.Stop()
	for {
		select {
		case <-done:
			m.log.Info("stopping: holders renewed", "leases", leases, "took", time.Since(started).Round(time.Millisecond))
			return
		case <-limit.C:
			m.mu.Lock()
			left := len(m.stop.waiting)
			m.mu.Unlock()
			m.log.Info("stopping: not every holder renewed in time; the others keep the deadline of their last renewal", "leases", leases, "not_renewed", left)
			return
		case <-tick.C:
			if !m.lead.serving() {
				return
			}
		}
	}
}

// awaitLocked starts waiting for the renewals of leases, but those being
// released; the channel closes once each was renewed or ended.
func (s *stopState) awaitLocked(leases map[string]*held) <-chan struct{} {
	s.waiting = make(map[*held]struct{}, len(leases))
	for _, h := range leases {
		if !h.releasing {
			s.waiting[h] = struct{}{}
		}
	}
	s.done = make(chan struct{})
	if len(s.waiting) == 0 {
		close(s.done)
	}
	return s.done
}

// renewedLocked notes that h was renewed, or ended, since a clean stop's
// announcement.
func (s *stopState) renewedLocked(h *held) {
	if s.waiting == nil {
		return
	}
	if _, ok := s.waiting[h]; !ok {
		return
	}
	delete(s.waiting, h)
	if len(s.waiting) == 0 {
		close(s.done)
	}
}
