package jetstream

import "strings"

// Names are the JetStream buckets and stream of one subject prefix, as
// jobs.Names are the job queue's. Bucket and stream names cannot hold dots,
// so the prefix becomes a bucket prefix: every '_' doubled, then every '.'
// turned into '_' ("acme.lease" → "acme_lease", "my_co" → "my__co"), so
// that distinct prefixes ("a.b", "a_b") do not share a bucket; only a '_'
// next to a dot is ambiguous ("a_.b" and "a._b" are both "a___b").
type Names struct {
	Leases  string // <p>_leases: lease records and queue entries, one key per lease
	Leaders string // <p>_leaders: one leadership key per node
	Pools   string // <p>_pools: each node's runtime pool changes (resize)
	Events  string // <p>_events: the lease events, kept for replay
	JobsKey string // <p>_jobs_key: the job brokers' signing key (jobs/sign.go)
}

// NamesFor derives the names from a subject prefix.
func NamesFor(prefix string) Names {
	base := strings.ReplaceAll(strings.ReplaceAll(prefix, "_", "__"), ".", "_")
	return Names{Leases: base + "_leases", Leaders: base + "_leaders", Pools: base + "_pools", Events: base + "_events", JobsKey: base + "_jobs_key"}
}

// bucketDescription says what a bucket of NamesFor holds, as `nats kv ls`
// shows it.
func bucketDescription(bucket string) string {
	switch {
	case strings.HasSuffix(bucket, "_leases"):
		return "slotlease: lease records and queue entries, one key <node>.<pool>.<id> each, expiring with its TTL"
	case strings.HasSuffix(bucket, "_leaders"):
		return "slotlease: one leadership key per node; the lease manager holding it serves the node"
	case strings.HasSuffix(bucket, "_pools"):
		return "slotlease: each node's runtime pool changes (leasemgr resize), applied over its POOL_CAPACITIES"
	case strings.HasSuffix(bucket, "_jobs_key"):
		return "slotlease: the key the job brokers sign outcomes with; secret, for lease managers only"
	}
	return "slotlease"
}
