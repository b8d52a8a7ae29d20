// Package natstrace is the vocabulary of slotlease's traces and how their
// context crosses NATS: span names, attribute keys, the W3C trace-context
// carrier for NATS headers, and the span helpers a client needs. It depends
// on the OpenTelemetry trace and propagation API only, so the client library
// (package lease) can trace without the global provider's package; package
// telemetry adds the global provider and the manager's spans.
package natstrace

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every span and instrument this
// project creates.
const ScopeName = "github.com/slotlease/slotlease"

// Span names.
const (
	SpanAcquire       = "lease.acquire"        // client: the whole Acquire call; server: one acquire request
	SpanAcquireQueued = "lease.acquire.queued" // server: the time an acquire waits in the queue
	SpanGrant         = "lease.grant"          // server: storing the grant and replying; linked to the queued span
	SpanRenew         = "lease.renew"          // client and server: one renewal
	SpanRelease       = "lease.release"        // client and server: one release
	SpanExpire        = "lease.expire"         // server: a lease whose TTL lapsed was freed
	SpanExecutorRun   = "executor.run"         // executor: acquire, run the command, release
)

// Attribute keys. Lease attributes are namespaced "lease."; the NATS subject
// uses the messaging semantic convention.
const (
	KeyNode      = attribute.Key("lease.node")
	KeyPool      = attribute.Key("lease.pool")
	KeySlots     = attribute.Key("lease.slots")
	KeyLeaseID   = attribute.Key("lease.id")
	KeyRequestID = attribute.Key("lease.request_id")
	KeyHolder    = attribute.Key("lease.holder")
	KeyToken     = attribute.Key("lease.token")
	KeyCode      = attribute.Key("lease.code")
	KeyPosition  = attribute.Key("lease.queue_position")
	KeySubject   = attribute.Key("messaging.destination.name")
	KeyExitCode  = attribute.Key("process.exit.code")
)

// Node is the node id attribute.
func Node(node string) attribute.KeyValue { return KeyNode.String(node) }

// Pool is the pool name attribute.
func Pool(pool string) attribute.KeyValue { return KeyPool.String(pool) }

// Slots is the slot count attribute.
func Slots(n int64) attribute.KeyValue { return KeySlots.Int64(n) }

// LeaseID is the lease id attribute (the acquire's request id).
func LeaseID(id string) attribute.KeyValue { return KeyLeaseID.String(id) }

// RequestID is the acquire's request id attribute.
func RequestID(id string) attribute.KeyValue { return KeyRequestID.String(id) }

// Holder is the lease holder attribute.
func Holder(h string) attribute.KeyValue { return KeyHolder.String(h) }

// Token is the fencing token attribute. Tokens are JetStream sequences, far
// below 2^63.
func Token(t uint64) attribute.KeyValue { return KeyToken.Int64(int64(t)) }

// Code is a wire error code attribute (pass string(lease.Code)).
func Code(code string) attribute.KeyValue { return KeyCode.String(code) }

// Position is a queue position attribute.
func Position(p int) attribute.KeyValue { return KeyPosition.Int(p) }

// Subject is the NATS subject attribute.
func Subject(s string) attribute.KeyValue { return KeySubject.String(s) }

// ExitCode is the exit code of a command an executor ran.
func ExitCode(code int) attribute.KeyValue { return KeyExitCode.Int(code) }
