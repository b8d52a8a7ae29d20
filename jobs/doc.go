// Package jobs is the durable job queue: jobs that outlive any one
// executor, drained by executors on many nodes, each job run under a lease
// of the node that takes it.
//
// Storage (Queue), all named from the subject prefix (see Names):
//   - a work-queue stream of Job messages, one subject per pool and
//     priority; a job leaves it when acknowledged, i.e. once its final
//     result is stored;
//   - a KV bucket of Records (state and latest result) by job id, with a
//     TTL (7 days by default);
//   - a KV bucket of dead letters: jobs whose attempts are used up, with
//     their last error (30 days by default).
//
// Taking and running jobs (Server) follows four rules, written out in
// docs/jobs.md:
//   - no hoarding: a job is taken only when this node has a free slot for
//     its pool and nobody on the node is queued for one, one job at a time;
//   - at least once: a job is acknowledged only after its result is
//     stored; an executor that dies leaves it to be delivered again once
//     its claim (AckWait) lapses;
//   - retries: a failed attempt is retried with exponential backoff until
//     max_attempts, then dead-lettered; deliveries given back unrun do not
//     count;
//   - priority with aging: see Order.
//
// The package uses nats.go's jetstream API directly: its semantics (acks,
// redelivery counts, delayed naks) are the queue's semantics. It depends on
// lease for the client and sandbox to run the work, and on nothing in cmd.
package jobs
