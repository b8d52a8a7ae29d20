package cluster

// The store's history as the analysis reads it: the lease bucket's
// entries as leases with their stored lifetimes, the leadership bucket's
// as terms, and the times the watches saw nothing.

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// storedRecord is the auditor's own reading of a lease bucket value: a
// lease record (docs/protocol.md section 3) or a queue entry (section 7).
type storedRecord struct {
	ID        string    `json:"id"`
	GrantedAt time.Time `json:"granted_at"`
	Node      string    `json:"node"`
	Pool      string    `json:"pool"`
	Slots     int64     `json:"slots"`
	Token     uint64    `json:"token"`
	TTLMs     int64     `json:"ttl_ms"`
	Manager   string    `json:"manager"`
	Queued    bool      `json:"queued"`
}

type leaderRecord struct {
	Instance string `json:"instance"`
}

// kvLease is one lease as the KV records show it: from its grant's write
// until its record was deleted or expired.
type kvLease struct {
	Key        string
	ID         string // the lease id the record names: its key's, or another's after a handover
	Node, Pool string
	Slots      int64
	Token      uint64
	Instance   string
	Start      time.Time // the grant's write
	GrantedAt  time.Time // the granting manager's stamp (record granted_at)
	End        time.Time // the delete or expiry marker; RunEnd if still live
	EndKnown   bool      // false: still live at the end, or the end was missed
	LastPut    time.Time
	TTL        time.Duration
	// FromGrant: Start is the grant's own write. False when the watch
	// delivered a later renewal first (the grant was overwritten before
	// delivery, e.g. by the holder's confirming renewal): Start is late.
	FromGrant bool
}

type interval struct {
	start, end time.Time
	slots      int64
	what       string
}

// buildKVLeases turns the lease bucket's entries into leases with their
// stored lifetimes.
func buildKVLeases(in AuditInput, r *Report) []kvLease {
	var out []kvLease
	open := map[string]*kvLease{}
	closeLease := func(l *kvLease, at time.Time, known bool) {
		l.End, l.EndKnown = at, known
		out = append(out, *l)
		delete(open, l.Key)
	}
	for _, o := range in.Leases {
		cur := open[o.Key]
		if o.Op != jetstream.KeyValuePut {
			if cur != nil {
				if o.Expired && cur.TTL > 0 {
					r.ExpiryLags = append(r.ExpiryLags, o.TS.Sub(cur.LastPut.Add(cur.TTL)))
				}
				closeLease(cur, o.TS, true)
			}
			continue
		}
		var v storedRecord
		if err := json.Unmarshal(o.Data, &v); err != nil {
			r.violate("KV: %s revision %d is not a lease record: %v", o.Key, o.Rev, err)
			continue
		}
		if v.Queued {
			if cur != nil {
				r.violate("KV: %s token %d was overwritten by a queue entry at %s", o.Key, cur.Token, o.TS.Format(tsFormat))
				closeLease(cur, o.TS, true)
			}
			continue
		}
		token := v.Token
		if token == 0 {
			token = o.Rev
		}
		if cur != nil {
			if cur.Token == token {
				cur.LastPut = o.TS
				continue
			}
			if v.Token == 0 && v.ID != cur.ID {
				// A handover: the next lease's grant replaced the
				// released one's record in one write, so the one ended
				// as the other began.
				closeLease(cur, o.TS, true)
				cur = nil
			}
		}
		if cur != nil {
			// The watch missed the record's end (a delete marker replaced
			// before delivery): it ended some time after its last write.
			// Take the earliest, so the capacity check cannot blame it.
			r.note("KV: %s token %d replaced by token %d without a delete seen; assuming it ended at its last write", o.Key, cur.Token, token)
			closeLease(cur, cur.LastPut, false)
		}
		if v.Token != 0 {
			// A renewal of a lease whose grant the watch did not deliver
			// (written and renewed before delivery): count it from here.
			r.note("KV: first write seen of %s token %d is a renewal at %s", o.Key, token, o.TS.Format(tsFormat))
		}
		open[o.Key] = &kvLease{Key: o.Key, ID: v.ID, Node: v.Node, Pool: v.Pool, Slots: v.Slots, Token: token, Instance: v.Manager, Start: o.TS, GrantedAt: v.GrantedAt, LastPut: o.TS, FromGrant: v.Token == 0,
			TTL: time.Duration(v.TTLMs) * time.Millisecond}
	}
	for _, l := range open {
		closeLease(l, in.RunEnd, false)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

type leaderTerm struct {
	instance   string
	start, end time.Time // end zero: still leading
	lastPut    time.Time
}

// buildLeadership turns the leadership bucket's entries into terms per
// node, from the key's creation until its delete or expiry. Where the watch
// missed the change of hands (the old key's expiry and the new key's
// creation were overwritten before delivery), both terms are stretched over
// the unseen interval, so neither instance's grants in it are blamed.
func buildLeadership(in AuditInput, r *Report) map[string][]leaderTerm {
	out := map[string][]leaderTerm{}
	open := map[string]*leaderTerm{}
	for _, o := range in.Leaders {
		cur := open[o.Key]
		if o.Op != jetstream.KeyValuePut {
			if cur != nil {
				cur.end = o.TS
				out[o.Key] = append(out[o.Key], *cur)
				delete(open, o.Key)
			}
			continue
		}
		var v leaderRecord
		if err := json.Unmarshal(o.Data, &v); err != nil {
			r.violate("KV: leadership key %s revision %d undecodable: %v", o.Key, o.Rev, err)
			continue
		}
		if cur != nil && cur.instance == v.Instance {
			cur.lastPut = o.TS
			continue
		}
		start := o.TS
		if cur != nil {
			r.note("leadership of %s passed from %s to %s between %s and %s without a delete seen", o.Key, cur.instance, v.Instance, cur.lastPut.Format(tsFormat), o.TS.Format(tsFormat))
			cur.end = o.TS
			out[o.Key] = append(out[o.Key], *cur)
			start = cur.lastPut
		}
		open[o.Key] = &leaderTerm{instance: v.Instance, start: start, lastPut: o.TS}
	}
	for k, t := range open {
		out[k] = append(out[k], *t)
	}
	return out
}

// blindWindows returns the intervals in which the watch delivered nothing
// although the stream stored something: a jump in the stream sequence
// between two consecutive deliveries.
func blindWindows(obs []Observation) [][2]time.Time {
	var out [][2]time.Time
	for i := 1; i < len(obs); i++ {
		if obs[i].Rev > obs[i-1].Rev+1 {
			out = append(out, [2]time.Time{obs[i-1].TS, obs[i].TS})
		}
	}
	return out
}

func inWindow(ws [][2]time.Time, at time.Time) bool {
	for _, w := range ws {
		if !at.Before(w[0]) && !at.After(w[1]) {
			return true
		}
	}
	return false
}
