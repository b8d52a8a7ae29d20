package jobs

import "strings"

// Names are the subjects, stream, buckets and consumers of the job queue
// for one subject prefix (LEASE_SUBJECT_PREFIX, "lease" by default).
//
// Job subjects are <prefix>.jobs.queue.<pool>.<priority>: four tokens after
// the prefix, so they never match a lease request subject
// (<prefix>.<node>.<pool>.<verb>, three tokens) even on a node named
// "jobs", nor the event space (<prefix>.events.>).
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

// Subject is where jobs of one pool and priority are published.
func (n Names) Subject(pool string, p Priority) string {
	return n.Prefix + ".jobs.queue." + pool + "." + string(p)
}

// PoolSubjects matches every job subject of a pool.
func (n Names) PoolSubjects(pool string) string { return n.Prefix + ".jobs.queue." + pool + ".*" }

// AllSubjects matches every job subject: the stream's subject.
func (n Names) AllSubjects() string { return n.Prefix + ".jobs.queue.*.*" }

// Consumer is the durable pull consumer for one pool and priority, shared by
// every executor serving the pool. Pools are tokens without '.', and the
// priority is always the last part, so names cannot collide.
func (n Names) Consumer(pool string, p Priority) string { return pool + "_" + string(p) }

// parseSubject returns the pool and priority of a job subject.
func (n Names) parseSubject(subject string) (pool string, p Priority, ok bool) {
	rest, found := strings.CutPrefix(subject, n.Prefix+".jobs.queue.")
	if !found {
		return "", "", false
	}
	pool, pr, found := strings.Cut(rest, ".")
	if !found || pool == "" || Priority(pr).rank() < 0 {
		return "", "", false
	}
	return pool, Priority(pr), true
}
