// Package manager serves the slot-lease protocol (package lease) for one
// node: it owns the node's pools, queues requests, stores grants in a Store
// before the holder hears of them, keeps them alive by renewals, frees them
// on release, expiry or a confirmed disconnect, and publishes every change
// to an EventSink. Package jetstream implements Store and EventSink over
// NATS JetStream; cmd/leasemgr wires them together.
//
// # Where things are
//
//   - manager.go: the type and its lifecycle (New, Start, Close);
//     managerconfig.go: its configuration's defaults and checks
//     (Config.Validate); run.go: Run, which owns Start and Close.
//   - request.go: a request's state on its way to a lease (reqState), the
//     per-pool state, and held leases.
//   - acquire.go: acquire requests: decode, validate, answer retries, queue.
//   - grant.go: writing a grant's record before the holder hears of it.
//   - cancel.go: requests that leave the queue without a lease (cancelled,
//     wait expired, abandoned by their client).
//   - renewal.go and renewseq.go: renewals by compare-and-set.
//   - release.go: releases, retried until stored, and freeing slots.
//   - queue.go: which queued requests get a stored queue entry, and when;
//     journal.go: writing and deleting those entries.
//   - rebuild.go: the lease record watch: the rebuild on start (leases, then
//     the queue), expiries, and grants of other instances; records.go:
//     which stored records are honoured.
//   - disconnect.go and closecheck.go: fast release on a confirmed close;
//     connqueue.go: a connection's queued requests.
//   - resize.go and pooldelta.go: runtime pool changes; rate.go: start
//     rates. fence.go and leader.go: leadership terms. stop.go: a clean
//     stop.
//   - respond.go, encode.go and replyto.go: replies, events and which reply
//     subjects are answered; decode.go and jsonscan.go: strict decoding;
//     errorf.go: bounded error messages.
//   - snapshot.go and history.go: the operator's snapshot and the pools'
//     utilisation history; discovery.go: NATS service discovery.
//   - store.go: the Store and EventSink interfaces.
package manager
