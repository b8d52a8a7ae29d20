package manager

import (
	"crypto/rand"

	"github.com/slotlease/slotlease/lease"
)

// leaseTable holds the node's live leases. A lease's record is stored at
// its own key, <node>.<pool>.<lease id>, unless its slots were handed over
// to it (handover.go): its record then replaced the releasing lease's, at
// that lease's key. byKey holds every live record by the key it is stored
// at; aliases the leases stored at another key than their own, by their
// own, so that a renewal, release or retried acquire naming the lease id
// finds them. Guarded by the Manager's lock.
type leaseTable struct {
	node    string
	byKey   map[string]*held
	aliases map[string]*held
}

func newLeaseTable(node string) leaseTable {
	return leaseTable{node: node, byKey: make(map[string]*held), aliases: make(map[string]*held)}
}

// byID returns the live lease id of pool, wherever it is stored; nil if
// none. A record at id's own key is another lease's when a slot was
// handed over there: id names it only if the record says so.
func (t *leaseTable) byID(pool, id string) *held {
	k := lease.RecordKey(t.node, pool, id)
	if h := t.aliases[k]; h != nil {
		return h
	}
	if h := t.byKey[k]; h != nil && h.rec.ID == id {
		return h
	}
	return nil
}

// add counts h, stored at h.key.
func (t *leaseTable) add(h *held) {
	t.byKey[h.key] = h
	if own := lease.RecordKey(t.node, h.rec.Pool, h.rec.ID); own != h.key {
		t.aliases[own] = h
	}
}

// drop forgets h, whose record is gone or replaced.
func (t *leaseTable) drop(h *held) {
	if t.byKey[h.key] == h {
		delete(t.byKey, h.key)
	}
	if own := lease.RecordKey(t.node, h.rec.Pool, h.rec.ID); t.aliases[own] == h {
		delete(t.aliases, own)
	}
}

// adopt reports whether h is still live here and not being released, and
// then takes rev, read from the store, as its latest revision if it is
// newer (a renewal whose acknowledgement was lost moved it).
func (t *leaseTable) adopt(h *held, rev uint64) bool {
	if t.byKey[h.key] != h || h.releasing {
		return false
	}
	h.rev = max(h.rev, rev)
	return true
}

// storeKey is the key r's grant is stored at: its own, over its queue
// entry if it has one (own true); or, when its own key holds another
// lease's record (a slot handed over to a lease at the key of an id r
// reuses), a fresh key of the pool, where no entry can be.
func (t *leaseTable) storeKey(r *request) (key string, own bool) {
	key = lease.RecordKey(t.node, r.pool.name, r.id)
	if h := t.byKey[key]; h != nil && h.rec.ID != r.id {
		return lease.RecordKey(t.node, r.pool.name, "k-"+rand.Text()), false
	}
	return key, true
}
