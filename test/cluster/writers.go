package cluster

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// checkWriters flags every lease, leadership and pool record no manager of
// the run wrote (issue 28: the server could be made to write them for a
// client): a lease record or queue entry without a TTL, naming a manager
// the run did not start, or under a key that is not its node, pool and
// id (a grant: of its node and pool); a leadership key without a TTL or naming an unknown instance; a
// cluster pool candidate's record without a TTL or under another
// instance's key; a pool bucket value (pool changes, pool counts) not
// under <node>.delta or <node>.counts, or naming no manager of the run. It checks nothing without in.Instances.
func checkWriters(in AuditInput, r *Report) {
	if in.Instances == nil {
		return
	}
	for _, o := range in.Leases {
		if o.Op != jetstream.KeyValuePut {
			continue
		}
		var v storedRecord
		err := json.Unmarshal(o.Data, &v)
		switch {
		case err != nil:
			// buildKVLeases reports it
		case o.TTL <= 0:
			r.violate("KV: %s revision %d was stored without a TTL: no manager wrote it", o.Key, o.Rev)
		case !in.Instances[v.Manager]:
			r.violate("KV: %s revision %d names manager %q, none of the run's", o.Key, o.Rev, v.Manager)
		case !strings.HasPrefix(o.Key, v.Node+"."+v.Pool+".") || (v.Queued && o.Key != v.Node+"."+v.Pool+"."+v.ID):
			// A grant may be at another lease's key of its pool (a slot
			// handed over to it); a queue entry only at its own.
			r.violate("KV: %s revision %d holds the record of %s.%s.%s", o.Key, o.Rev, v.Node, v.Pool, v.ID)
		}
	}
	for _, o := range in.Leaders {
		if o.Op != jetstream.KeyValuePut {
			continue
		}
		var v leaderRecord
		err := json.Unmarshal(o.Data, &v)
		_, rest, _ := strings.Cut(o.Key, ".")
		candidate, isCandidate := strings.CutPrefix(rest, "candidates.")
		switch {
		case err != nil:
			// buildLeadership reports it
		case o.TTL <= 0:
			r.violate("KV: leadership key %s revision %d was stored without a TTL: no manager wrote it", o.Key, o.Rev)
		case isCandidate && v.Instance != candidate:
			r.violate("KV: candidate record %s revision %d names instance %q", o.Key, o.Rev, v.Instance)
		case rest != "" && !isCandidate:
			r.violate("KV: %s revision %d in the leadership bucket is neither a node's key nor a candidate's", o.Key, o.Rev)
		case rest == "" && !in.Instances[v.Instance]:
			r.violate("KV: leadership key %s revision %d names instance %q, none of the run's", o.Key, o.Rev, v.Instance)
		}
	}
	for _, o := range in.Pools {
		if o.Op != jetstream.KeyValuePut {
			continue
		}
		var v struct {
			Manager string `json:"manager"`
		}
		pooled := strings.HasSuffix(o.Key, ".delta") || strings.HasSuffix(o.Key, ".counts")
		if !pooled || json.Unmarshal(o.Data, &v) != nil || !in.Instances[v.Manager] {
			r.violate("KV: pool bucket value %s revision %d was not written by a manager of the run: %.100s", o.Key, o.Rev, o.Data)
		}
	}
}

// storedTTL reads a Nats-TTL header value: a duration ("15s"), or a number
// of seconds; 0 for none or "never".
func storedTTL(v string) time.Duration {
	if v == "" || v == "never" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	var s int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0
		}
		s = s*10 + int64(c-'0')
	}
	return time.Duration(s) * time.Second
}
