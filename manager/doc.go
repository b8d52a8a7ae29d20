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
package manager
