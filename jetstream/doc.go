// Package jetstream is the adapter to NATS: an embedded nats-server with
// JetStream, the lease store over a JetStream KV bucket with a TTL per key,
// and the event publisher. It implements manager.Store and manager.EventSink and
// is the only package that imports nats-server.
package jetstream
