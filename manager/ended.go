package manager

import (
	"crypto/subtle"
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
	// stays in flight on a loaded machine, shorter than anyone waits to
	// reuse an id for a request sent as a re-send.
	endedFor = 30 * time.Second
	// maxEnded bounds the ends remembered (the oldest is forgotten first):
	// about 3 MB at the protocol's longest ids, holders and secrets.
	maxEnded = 16384
)

type endedKey struct{ pool, id string }

type endedEnd struct {
	holder, secret string
	e              *lease.Error
	at             int64 // unix ns
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
	n.byKey[k] = endedEnd{holder: holder, secret: secret, e: e, at: at}
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
	if !ok || now.UnixNano()-e.at > int64(endedFor) || e.holder != req.Holder ||
		subtle.ConstantTimeCompare([]byte(e.secret), []byte(req.Secret)) != 1 {
		return lease.Reply{}, false
	}
	if e.e == nil {
		return errReply(errorf(lease.CodeLeaseNotFound, "request %q was granted, and its lease has been released; acquire again with a new request id", req.RequestID)), true
	}
	return errReply(e.e), true
}
