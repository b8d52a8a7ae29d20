package manager

import (
	"crypto/rand"

	"github.com/slotlease/slotlease/lease"
)

// A lease's record is stored at its own key, <node>.<pool>.<lease id>,
// unless its slots were handed over to it (handover.go): its record then
// replaced the releasing lease's, at that lease's key. m.leases holds
// every live record by the key it is stored at; m.aliases the leases
// stored at another key than their own, by their own, so that a renewal,
// release or retried acquire naming the lease id finds them.

// leaseLocked returns the live lease id of pool, wherever it is stored;
// nil if none. A record at id's own key is another lease's when a slot
// was handed over there: id names it only if the record says so.
func (m *Manager) leaseLocked(pool, id string) *held {
	k := lease.RecordKey(m.cfg.Node, pool, id)
	if h := m.aliases[k]; h != nil {
		return h
	}
	if h := m.leases[k]; h != nil && h.rec.ID == id {
		return h
	}
	return nil
}

// addLeaseLocked counts h, stored at h.key.
func (m *Manager) addLeaseLocked(h *held) {
	m.leases[h.key] = h
	if own := lease.RecordKey(m.cfg.Node, h.rec.Pool, h.rec.ID); own != h.key {
		m.aliases[own] = h
	}
}

// dropLeaseLocked forgets h, whose record is gone or replaced.
func (m *Manager) dropLeaseLocked(h *held) {
	if m.leases[h.key] == h {
		delete(m.leases, h.key)
	}
	if own := lease.RecordKey(m.cfg.Node, h.rec.Pool, h.rec.ID); m.aliases[own] == h {
		delete(m.aliases, own)
	}
}

// storeKeyLocked is the key r's grant is stored at: its own, over its
// queue entry if it has one (own true); or, when its own key holds
// another lease's record (a slot handed over to a lease at the key of an
// id r reuses), a fresh key of the pool, where no entry can be.
func (m *Manager) storeKeyLocked(r *request) (key string, own bool) {
	key = lease.RecordKey(m.cfg.Node, r.pool.name, r.id)
	if h := m.leases[key]; h != nil && h.rec.ID != r.id {
		return lease.RecordKey(m.cfg.Node, r.pool.name, "k-"+rand.Text()), false
	}
	return key, true
}
