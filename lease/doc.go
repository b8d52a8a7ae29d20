// Package lease is the client of the slot-lease manager and its wire
// contract: lease records, request and reply types, error codes, subject
// names, snapshots and events, and the Client executors and programs use
// to hold slots. The manager that serves the protocol is package manager.
//
// It depends on nats.go and the OpenTelemetry trace and propagation API
// only (at most 40 non-standard packages, TestClientDependencies): never on
// the manager, the NATS server, an OpenTelemetry SDK or global provider, or
// the environment parser. WithTracing gives the client a tracer provider.
// docs/protocol.md describes the protocol for clients in other languages.
//
// # Where things are
//
// The wire contract: protocol.go (subjects, requests, replies, records,
// limits), errors.go (codes and typed errors), resizerequest.go and
// snapshotrequest.go (the operator's requests), service.go (discovery),
// conn.go (the connection a lease is bound to, fast release's grace).
//
// The Client: client.go (acquire), acquireall.go and leaseset.go (several
// pools at once), lease.go and renew.go (a held lease and its heartbeats),
// liveness.go (the holder's own clocks on its connection), wake.go (renew
// now), tracing.go (spans and trace context).
package lease
