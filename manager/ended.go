package manager

import (
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Acquires and cancels arrive on subscriptions of their own (so that a
// flood of one cannot hold up the other), and a client re-sends an
// acquire while it waits: a re-send sent before its request ended can be
// handled after that end. Taken as a new request it would queue a request
// nobody waits for, holding its place (and, granted, its slots for a
// TTL) until its turn showed it abandoned. So the manager remembers, for
// a while, the requests that ended for good in its term: cancelled or
// released by their holder, or refused with an error a client does not
// retry. A re-send (resend: true) of one, from the same holder with the
// same secret, is answered with its end. A first send is never refused so:
// a request id may be used again once its request has ended.

const (
	// endedFor is how long an end is remembered: longer than a re-send
	// stays in flight on a loaded machine.
	endedFor = 30 * time.Second
	// maxEnded bounds the ends remembered (the oldest is forgotten first):
	// at most about 8 MB at the protocol's longest request ids and
	// messages (TestEndedRequestsAreBounded measures it).
	maxEnded = 16384
)

type endedKey struct{ pool, id string }

type endedEnd struct {
	who uint64 // the holder's and secret's hash (sender)
	e   *lease.Error
	at  int64 // unix ns
}

type endedAt struct {
	k  endedKey
	at int64
}

// endedRequests is the memory of ended requests: by pool and id, and in
// the order they ended (order[head:]). The Manager's lock guards it.
type endedRequests struct {
	byKey map[endedKey]endedEnd
	order []endedAt
	head  int
	seed  maphash.Seed // of the who hashes: random, so nobody can aim at one
}

// add remembers that the request id of pool, sent by holder with secret,
// ended with e (nil: its lease was released by its holder).
func (n *endedRequests) add(pool, id, holder, secret string, e *lease.Error, now time.Time) {
	at := now.UnixNano()
	for n.head < len(n.order) && (len(n.order)-n.head >= maxEnded || at-n.order[n.head].at > int64(endedFor)) {
		n.forgetOldest()
	}
	if n.head > 0 && n.head >= len(n.order)/2 {
		n.order = append(n.order[:0], n.order[n.head:]...)
		n.head = 0
	}
	if n.byKey == nil {
		n.byKey = make(map[endedKey]endedEnd)
	}
	k := endedKey{pool, id}
	n.byKey[k] = endedEnd{who: n.sender(holder, secret), e: e, at: at}
	n.order = append(n.order, endedAt{k, at})
}

// forgetOldest forgets the oldest end, unless its key has ended again
// since.
func (n *endedRequests) forgetOldest() {
	o := n.order[n.head]
	if e, ok := n.byKey[o.k]; ok && e.at == o.at {
		delete(n.byKey, o.k)
	}
	n.order[n.head] = endedAt{}
	n.head++
}

// forget forgets the end of id in pool: a first send of a new request
// with that id.
func (n *endedRequests) forget(pool, id string) {
	if len(n.byKey) > 0 {
		delete(n.byKey, endedKey{pool, id})
	}
}

// recall answers a re-send of req in pool whose request ended: with its
// end, if it is remembered and the re-send comes from the same holder
// with the same secret.
func (n *endedRequests) recall(pool string, req *lease.AcquireRequest, now time.Time) (lease.Reply, bool) {
	e, ok := n.byKey[endedKey{pool, req.RequestID}]
	if !ok || now.UnixNano()-e.at > int64(endedFor) || e.who != n.sender(req.Holder, req.Secret) {
		return lease.Reply{}, false
	}
	if e.e == nil {
		return errReply(errorf(lease.CodeLeaseNotFound, "request %q was granted, and its lease has been released; acquire again with a new request id", req.RequestID)), true
	}
	return errReply(e.e), true
}

// sender is the hash of a request's holder and secret: what a re-send must
// match, kept instead of the strings themselves.
func (n *endedRequests) sender(holder, secret string) uint64 {
	if n.seed == (maphash.Seed{}) {
		n.seed = maphash.MakeSeed()
	}
	var h maphash.Hash
	h.SetSeed(n.seed)
	// The holder's length first: holder "ab" with secret "c" is not
	// holder "a" with secret "bc".
	_ = binary.Write(&h, binary.LittleEndian, uint64(len(holder)))
	_, _ = h.WriteString(holder)
	_, _ = h.WriteString(secret)
	return h.Sum64()
}
