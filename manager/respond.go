package manager

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
)

func (m *Manager) handleStats(msg *nats.Msg) {
	np := m.NodePools()
	m.respond(msg.Reply, lease.Reply{Status: lease.StatusOK, Node: np.Node, Pools: np.Pools, ServedBy: np.ServedBy, Warnings: np.Warnings, ClusterPools: np.ClusterPools})
}

// NodePools is what the manager's stats reply carries, in the shape of
// NodePools: one content for its stats subject and the HTTP API's /v1/pools.
func (m *Manager) NodePools() lease.NodePools {
	np := lease.NodePools{Node: m.cfg.Node, Pools: m.Stats(), ServedBy: m.cfg.ServedBy}
	if np.Pools == nil {
		np.Pools = []lease.PoolStats{} // "[]", not "null"
	}
	if m.cfg.Warnings != nil {
		np.Warnings = m.cfg.Warnings()
	}
	if m.cfg.ClusterPools != nil {
		if names := m.cfg.ClusterPools(); names != nil {
			np.ClusterPools = &names
		}
	}
	return np
}

func (m *Manager) emit(p *pool, ev lease.Event) {
	if !m.lead.serving() {
		return // fenced: a deposed manager announces nothing
	}
	ev.Time = time.Now().UTC()
	ev.Node = m.cfg.Node
	ev.Pool = p.name
	ev.Stats = p.p.Stats()
	m.cfg.Events.Publish(ev)
}

func (m *Manager) respond(reply string, r lease.Reply) {
	if reply == "" {
		return // no one to answer
	}
	if s := m.stopServer.Load(); s != nil && r.Lease != nil {
		r.ServerStopping = *s // stop.go
	}
	b := replyBuffers.Get()
	data, err := appendReply(*b, &r)
	if err != nil {
		m.log.Error("encoding a reply", "err", err)
		return
	}
	m.publishReply(reply, nil, data)
	replyBuffers.Put(b, data)
}

// publishReply sends data (with hdr, if any) to reply, a reply subject, if
// the reply rule allows it and the fence is valid: every answer, discovery
// and resize errors included, goes through here. Requests were checked on
// arrival (guard); this check also covers reply subjects restored from
// stored queue entries.
func (m *Manager) publishReply(reply string, hdr nats.Header, data []byte) {
	if !m.lead.serving() {
		return // fenced: a deposed manager answers nothing
	}
	if !m.replies.allowed(reply) {
		m.replies.refuse(m.log, "", reply)
		return
	}
	var err error
	if hdr == nil {
		err = m.cfg.Conn.Publish(reply, data)
	} else {
		err = m.cfg.Conn.PublishMsg(&nats.Msg{Subject: reply, Header: hdr, Data: data})
	}
	if err != nil {
		m.log.Warn("sending a reply", "subject", reply, "err", err)
	}
}

var replyBuffers Buffers

func errReply(e *lease.Error) lease.Reply { return lease.Reply{Status: lease.StatusError, Error: e} }
