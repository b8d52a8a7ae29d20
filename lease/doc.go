// Package lease is the domain and wire contract of the slot-lease manager:
// lease records, request and reply types, error codes, subject names, the
// Manager that serves the protocol for one node, and the Client executors
// use.
//
// It depends on pools for slot accounting and defines the two small
// interfaces it needs from the outside, Store (lease records with a TTL) and
// EventSink (lease events); package jetstream implements both over NATS.
// docs/protocol.md describes the protocol for clients in other languages.
package lease
