package manager

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/slotlease/slotlease/rules"
)

// Only records this product's managers wrote are honoured. Anyone with
// write access to the lease bucket (a misconfigured account, a stolen
// credential, an operator's stray `nats kv put`) could otherwise store a
// record naming the current instance without a TTL: the next rebuild would
// count its slots, and they would never come back. A record is refused
// (not counted, not restored to the queue, and not deleted either: it is
// not provably this manager's to delete) when:
//
//   - it was stored without a TTL (RefusedNoTTL): every record a manager
//     writes, grant or queue entry, carries one, so nothing it honours can
//     hold slots forever;
//   - it does not decode as a lease record or queue entry (RefusedUnreadable);
//   - it decodes but is not one a manager writes: no slots, an invalid id
//     (RefusedShape);
//   - its key is not <node>.<pool>.<id> of its own content (a grant may be
//     at another id's key of its node and pool: a slot handed over to it,
//     handover.go), or it names another node (RefusedKey);
//   - it names no manager instance (RefusedForeign).
//
// Each refusal is logged and counted (Config.RecordRefused, the
// lease_records_refused_total{node,reason} metric).

// Reasons a stored record is refused, the reason label of
// lease_records_refused_total.
const (
	RefusedUnreadable = "unreadable"
	RefusedShape      = "shape"
	RefusedKey        = "key"
	RefusedNoTTL      = "no_ttl"
	RefusedForeign    = "foreign"
	// RefusedStaleLeader: a leadership key nobody renewed for longer than
	// the leadership TTL was taken over (leader.go).
	RefusedStaleLeader = "stale_leader"
	// RefusedPoolDelta: stored runtime pool changes that no manager wrote
	// (resize.go) were not applied.
	RefusedPoolDelta = "pool_delta"
	// RefusedPoolCounts: stored pool counts that no manager wrote
	// (tallystore.go) were not carried on; the counts start at zero.
	RefusedPoolCounts = "pool_counts"
	// RefusedCandidate: a cluster pool candidate's record that no
	// candidate wrote was not reported (package candidacy).
	RefusedCandidate = "candidate"
)

// RefusalReasons lists every refusal reason, for pre-creating metric series.
var RefusalReasons = []string{RefusedUnreadable, RefusedShape, RefusedKey, RefusedNoTTL, RefusedForeign, RefusedStaleLeader, RefusedPoolDelta, RefusedPoolCounts, RefusedCandidate}

// maxLoggedKey bounds a refused record's key in a log line: the key was
// chosen by whoever wrote the record.
const maxLoggedKey = 128

// recordCheck decides which stored records are honoured, and reports the
// ones it refuses: a count (Config.RecordRefused) and a log line bounded
// per reason. Its refusal log has its own lock (mu), taken with or without
// m.mu held (so always after it); it never calls back into the Manager.
type recordCheck struct {
	node    string
	lead    *leadership         // its instance's mark
	refused func(reason string) // Config.RecordRefused; nil if unset
	log     *slog.Logger

	mu sync.Mutex
	// last is when each reason was last logged, and skipped how many
	// refusals went unlogged since. Guarded by mu.
	last    map[string]time.Time
	skipped map[string]int
}

func newRecordCheck(node string, lead *leadership, refused func(string), log *slog.Logger) *recordCheck {
	return &recordCheck{node: node, lead: lead, refused: refused, log: log, last: map[string]time.Time{}, skipped: map[string]int{}}
}

// accept checks a stored put before anything else looks at it. It returns
// the decoded record and whether it may be honoured. known reports whether
// a key is one this instance holds a lease or a request for (the caller
// holds m.mu for it).
//
// A busy manager sees each of its own writes come back through the watch;
// decoding them all would cost a JSON decode per grant and renewal. So
// after the rebuild, a value that carries a TTL and this instance's mark
// under a key this instance holds a lease or a request for is taken as its
// own without decoding (nil, true). Anything else with the mark, such as a
// write for a lease already let go, or a forgery naming this instance
// (its id is public), is decoded and checked like any other record.
func (c *recordCheck) accept(ch Change, rebuilt bool, known func(key string) bool) (*storedValue, bool) {
	if ch.TTL <= 0 {
		c.refuse(ch.Key, RefusedNoTTL, "it was stored without a TTL, so it would never expire")
		return nil, false
	}
	if rebuilt && c.lead.wrote(ch.Value) && known(ch.Key) {
		return nil, true
	}
	var rec storedValue
	if err := json.Unmarshal(ch.Value, &rec); err != nil {
		c.refuse(ch.Key, RefusedUnreadable, "it is not a lease record: "+err.Error())
		return nil, false
	}
	switch {
	case rec.Slots <= 0:
		c.refuse(ch.Key, RefusedShape, "it holds no slots")
		return nil, false
	case rules.ValidRequestID(rec.ID) != nil || rec.Pool == "":
		c.refuse(ch.Key, RefusedShape, "its id or pool is invalid")
		return nil, false
	case rec.Node != c.node || !keyFits(ch.Key, &rec):
		c.refuse(ch.Key, RefusedKey, "its key does not match the node, pool and id it names")
		return nil, false
	case rec.Manager == "":
		c.refuse(ch.Key, RefusedForeign, "it names no manager instance: no manager wrote it")
		return nil, false
	}
	return &rec, true
}

// knownKey reports whether key is that of a lease this manager holds
// or of a request it has not finished: a write of its own is expected there.
func knownKey(node string, leases map[string]*held, ps map[string]*pool, key string) bool {
	if leases[key] != nil {
		return true
	}
	if len(key) <= len(node) || key[:len(node)] != node || key[len(node)] != '.' {
		return false
	}
	pool, id, ok := strings.Cut(key[len(node)+1:], ".")
	if !ok {
		return false
	}
	p := ps[pool]
	return p != nil && p.waiting[id] != nil
}

// keyFits reports whether rec may be stored at key: its own id's key of
// its node and pool, or, for a grant, another valid id's key of them (a
// slot handed over to it). A queue entry is always at its own.
func keyFits(key string, rec *storedValue) bool {
	id, ok := strings.CutPrefix(key, rec.Node+"."+rec.Pool+".")
	if !ok || rules.ValidRequestID(id) != nil {
		return false
	}
	return id == rec.ID || !rec.Queued
}

// refusalLogEvery bounds the log lines about refused records: whoever can
// write to the bucket could otherwise flood the log. The metric counts
// every refusal.
const refusalLogEvery = 10 * time.Second

// refuse reports a refused record: a count, and a log line unless one for
// the same reason was written in the last refusalLogEvery.
func (c *recordCheck) refuse(key, reason, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countLocked(reason)
	now := time.Now()
	if now.Sub(c.last[reason]) < refusalLogEvery {
		c.skipped[reason]++
		return
	}
	if len(key) > maxLoggedKey {
		key = key[:maxLoggedKey] + "...(truncated)"
	}
	c.log.Warn("refusing a lease record no manager wrote; it is not counted", "key", key, "reason", reason, "why", why,
		"unlogged_since_last", c.skipped[reason])
	c.last[reason] = now
	c.skipped[reason] = 0
}

// count counts one refusal of reason, one at a time with the others.
func (c *recordCheck) count(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countLocked(reason)
}

func (c *recordCheck) countLocked(reason string) {
	if c.refused != nil {
		c.refused(reason)
	}
}
