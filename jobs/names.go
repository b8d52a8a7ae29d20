package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Names are the subjects, stream, buckets and consumers of the job queue
// for one subject prefix (LEASE_SUBJECT_PREFIX, "lease" by default).
//
// Job subjects are <prefix>.jobs.queue.<pool>.<priority> for jobs without
// a tenant and <prefix>.jobs.queue.<pool>.<priority>.<tenant key> for jobs
// with one (TenantKey): four or five tokens after the prefix, so they never
// match a lease request subject (<prefix>.<node>.<pool>.<verb>, three
// tokens) even on a node named "jobs", nor the event space
// (<prefix>.events.>). One subject per tenant lets an executor choose whose
// job runs next (turns.go), which one subject in submission order could not.
type Names struct {
	Prefix  string
	Stream  string // <p>_jobs: work-queue stream of Job messages
	Results string // <p>_job_results: KV bucket of Records by job id
	Dead    string // <p>_job_dead: KV bucket of dead Records by job id
}

// NamesFor derives the names from a subject prefix. Stream and bucket names
// cannot hold dots, so a multi-token prefix is joined with '_'.
func NamesFor(prefix string) Names {
	base := strings.ReplaceAll(prefix, ".", "_")
	return Names{Prefix: prefix, Stream: base + "_jobs", Results: base + "_job_results", Dead: base + "_job_dead"}
}

// Subject is where jobs of one pool, priority and tenant ("" for none) are
// published.
func (n Names) Subject(pool string, p Priority, tenant string) string {
	return n.subjectOf(pool, p, tenantKey(tenant))
}

// subjectOf is Subject by tenant key.
func (n Names) subjectOf(pool string, p Priority, tkey string) string {
	return n.Prefix + ".jobs.queue." + pool + "." + string(p) + orNone(".", tkey)
}

// PoolSubjects matches every job subject of a pool.
func (n Names) PoolSubjects(pool string) string { return n.Prefix + ".jobs.queue." + pool + ".>" }

// AllSubjects matches every job subject (and nothing else the stream or the
// lease protocol uses): for subscriptions and permissions.
func (n Names) AllSubjects() string { return n.Prefix + ".jobs.queue.>" }

// StreamSubjects are the job stream's subjects: without and with a tenant.
func (n Names) StreamSubjects() []string {
	return []string{n.Prefix + ".jobs.queue.*.*", n.Prefix + ".jobs.queue.*.*.*"}
}

// Consumer is the durable pull consumer for one pool, priority and tenant
// key ("" for jobs without a tenant), shared by every executor serving the
// pool. Pools are tokens of letters, digits, '-' and '_', the priority is
// always the last part before an optional "~" and tenant key, so names
// cannot collide.
func (n Names) Consumer(pool string, p Priority, tkey string) string {
	c := pool + "_" + string(p)
	if tkey != "" {
		c += "~" + tkey
	}
	return c
}

// TenantKey is a tenant's subject token: "t_" and the tenant when it is a
// short name of letters, digits, '-' and '_', else "h_" and a hash of it
// (tenants are any UTF-8 up to lease.MaxTenantLen bytes, which a subject
// token cannot always carry). Two tenants sharing a hash would share turns,
// never slots or jobs.
func TenantKey(tenant string) string {
	if len(tenant) <= 64 && plainToken(tenant) {
		return "t_" + tenant
	}
	sum := sha256.Sum256([]byte(tenant))
	return "h_" + hex.EncodeToString(sum[:16])
}

func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return s != ""
}

// parseSubject returns the pool, priority and tenant key ("" for none) of
// a job subject.
func (n Names) parseSubject(subject string) (pool string, p Priority, tkey string, ok bool) {
	rest, found := strings.CutPrefix(subject, n.Prefix+".jobs.queue.")
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || Priority(parts[1]).rank() < 0 {
		return "", "", "", false
	}
	if len(parts) == 3 {
		tkey = parts[2]
		if len(tkey) < 3 || (tkey[:2] != "t_" && tkey[:2] != "h_") {
			return "", "", "", false
		}
	}
	return parts[0], Priority(parts[1]), tkey, true
}
