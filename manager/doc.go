// Package manager serves the slot-lease protocol (package lease) for one
// node: it owns the node's pools, queues requests, stores grants in a Store
// before the holder hears of them, keeps them alive by renewals, frees them
// on release, expiry or a confirmed disconnect, and publishes every change
// to an EventSink. Package jetstream implements Store and EventSink over
// NATS JetStream; cmd/leasemgr wires them together.
//
// # Where things are
//
// The Manager coordinates owners: it keeps the pools and the leases under
// its lock (mu), and each other concern is a type of its own, with its own
// methods and, where it holds state or goroutines of its own, its own lock
// and lifecycle. An owner's lock is taken after mu, never before; owners
// whose state must change with the pools in one step stay under mu and say
// so.
//
//   - manager.go: the Manager and its lifecycle (New, Start, Close);
//     managerconfig.go: its configuration's defaults and checks
//     (Config.Validate); run.go: Run, which owns Start and Close.
//   - request.go: a request's state on its way to a lease (reqState), the
//     per-pool state, and held leases.
//   - A grant's path: acquire.go (decode, validate, answer retries, queue),
//     then grant.go (the record written before the holder hears of it, and
//     grantStore, its store protocol).
//   - cancel.go: requests that leave the queue without a lease (cancelled,
//     wait expired, abandoned by their client).
//   - renewal.go and renewseq.go: renewals by compare-and-set.
//   - release.go: releases, retried until stored, and freeing slots.
//   - connqueue.go: waiters, the pools' waiting requests counted by
//     connection (under mu).
//   - queue.go and journal.go: the journal, which queued requests get a
//     stored queue entry, when, and writing and deleting them (under mu,
//     with writer goroutines of its own).
//   - watch.go: recordWatch, the lease record watch and the rebuild's
//     progress; rebuild.go: what its changes do (leases, then the queue,
//     expiries, grants of other instances); records.go: recordCheck,
//     which stored records are honoured (its own lock).
//   - disconnect.go and closecheck.go: disconnects, fast release on a
//     confirmed close (its own lock and goroutines; what a close frees is
//     the Manager's, through bindings).
//   - resize.go: runtime pool changes; pooldelta.go: deltaStore, their
//     stored form. rate.go: rates, the start-rate timers (under mu).
//   - fence.go: leadership, the term served and the fence (atomic);
//     leader.go: leadership terms (RunLeader). stop.go: a clean stop.
//   - respond.go: outbox, the subscriptions, replies and events (its own
//     lock); encode.go: the hot path's encoders; replyto.go: which reply
//     subjects are answered; decode.go and jsonscan.go: strict decoding;
//     errorf.go: bounded error messages.
//   - discovery.go: the admin endpoints and NATS service discovery, which
//     own history.go's utilisation history and its sampling goroutine;
//     stats.go and snapshot.go: what they report of the pools.
//   - store.go: the Store and EventSink interfaces.
//
// # Following an acquire
//
// One acquire, from the client to its answer, in the order it runs. Each
// stage answers with an error where it stops; the stage after it never
// looks back.
//
//  1. The client (lease/client.go): Client.Acquire sends an AcquireRequest
//     to <prefix>.<node>.<pool>.acquire with an inbox of its own, and
//     re-sends it (resend: true) at its poll interval or on a timeout
//     until an answer ends it.
//  2. Admission (acquire.go): the outbox's guard drops a request whose
//     reply subject is no inbox (respond.go, replyto.go); handleAcquire
//     decodes and checks it (decodeAcquire in decode.go, validateAcquire),
//     finds the pool, answers a re-send from what is known (retried: the
//     lease it was granted, or its place; ended.go: the end of a request
//     that ended for good), and newRequestLocked refuses what the pool
//     could never grant and a request whose connection has closed.
//  3. Commit (acquire.go, then grant.go): enqueueLocked applies the
//     connection's and credential's bounds on queue places (connqueue.go)
//     and asks the pool (pools.Pool.Admit, which drops the oldest waiter
//     of a full drop_oldest queue first; TryAcquireRequest for a try). In
//     the pools package the request passes its checks (pools/grant.go:
//     checkRequest) and is granted if it is next in service order and the
//     slots, the start rate's tokens (pools/bucket.go) and the budget
//     (pools/budget.go) allow; otherwise it is queued by the policy's
//     queue (fifo.go, lifo.go, priority.go, fair.go). A granted request's
//     record is written by grant (grant.go, grantStore.put: sent, then
//     confirmed by the record watch's echo, echoes.go) before anyone hears
//     of it; a queued one gets its entry from the journal (queue.go)
//     after QueueEntryDelay.
//  4. The exit: the answer the handler returns leaves through the outbox
//     (outbox.serve); a later one through exit.go: outbox.granted once
//     the record is stored (grantStoredLocked), outbox.tellQueued for a
//     request that waits, endLocked for one that leaves without a lease.
//     Each sends the holder's answer and the pool's event together.
package manager
