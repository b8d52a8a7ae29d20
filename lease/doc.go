// Package lease is the domain and wire contract of the slot-lease manager:
// lease records, request and reply types, error codes, subject names, the
// Manager that serves the protocol for one node, and the Client executors
// use.
//
// It depends on nats.go, the OpenTelemetry API (trace propagation, package
// telemetry), pools for slot accounting and rules for the names and limits
// it shares with config; never on the NATS server, an OpenTelemetry SDK or
// the environment parser (TestClientDependencies). It defines the two small
// interfaces it needs from the outside, Store (lease records with a TTL) and
// EventSink (lease events); package jetstream implements both over NATS.
// docs/protocol.md describes the protocol for clients in other languages.
//
// # Where things are
//
// The wire contract: protocol.go (subjects, requests, replies, records),
// errors.go, decode.go, jsonscan.go and encode.go (strict decoding,
// hand-written encoders), echo.go (bounded echoes of client input), records.go (which
// stored records are honoured).
//
// The Manager, one file per job:
//   - manager.go: the type and its lifecycle (NewManager, Start, Close);
//     managerconfig.go: its configuration's defaults and checks
//     (ManagerConfig.Validate); run.go: Run, which owns Start and Close.
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
//     the queue), expiries, and grants of other instances.
//   - resize.go: runtime pool changes. fence.go and leader.go: leadership
//     terms. respond.go and replyto.go: replies, events and which reply
//     subjects are answered. discovery.go: NATS service discovery.
//
// The Client: client.go (acquire), lease.go and renew.go (a held lease and
// its heartbeats).
package lease
