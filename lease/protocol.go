package lease

import (
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// DefaultPrefix is the subject prefix when none is configured
// (rules.DefaultSubjectPrefix, LEASE_SUBJECT_PREFIX's default).
const DefaultPrefix = rules.DefaultSubjectPrefix

// Verbs: the last token of a request subject.
const (
	VerbAcquire = "acquire"
	VerbRenew   = "renew"
	VerbRelease = "release"
	VerbCancel  = "cancel"
)

// Subject returns the request subject for verb on a node's pool:
// <prefix>.<node>.<pool>.<verb>.
func Subject(prefix, node, pool, verb string) string {
	return prefix + "." + node + "." + pool + "." + verb
}

// StatsSubject is where a node's manager answers stats requests:
// <prefix>.<node>.stats.
func StatsSubject(prefix, node string) string {
	return prefix + "." + node + ".stats"
}

// ReservedNode cannot be a node id: <prefix>.events.<pool>.<verb> would
// match subscriptions to <prefix>.events.>. It is refused in any case, as
// config refuses NODE_ID=EVENTS (rules.ReservedNodeID, the one definition).
const ReservedNode = rules.ReservedNodeID

// ClusterNode is the node id of cluster pools: a manager with this Node
// serves the pools every node shares (CLUSTER_POOLS), with the same
// protocol, records and standby takeover as a node's own manager.
const ClusterNode = rules.ClusterNodeID

// EventSubject is where events of one kind for one pool go:
// <prefix>.events.<node>.<pool>.<kind>.
func EventSubject(prefix, node, pool string, kind EventKind) string {
	return prefix + ".events." + node + "." + pool + "." + string(kind)
}

// EventFilter returns a subscription subject for events, with "*" for any
// node, pool or kind left empty.
func EventFilter(prefix, node, pool string, kind EventKind) string {
	star := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	return prefix + ".events." + star(node) + "." + star(pool) + "." + star(string(kind))
}

// RecordKey is a lease record's own KV key: <node>.<pool>.<lease id>. The
// lease id is the acquire's request id. A grant handed a released lease's
// slots is stored at that lease's key instead (docs/protocol.md, section
// 5.6); the record's id says whose it is.
func RecordKey(node, pool, id string) string {
	return node + "." + pool + "." + id
}

// NodeKeys is the KV key filter for every lease record of a node.
func NodeKeys(node string) string { return node + ".>" }

// Limits on client-chosen identifiers. Request ids become KV key tokens, so
// they are restricted to characters valid there.
const (
	MaxRequestIDLen = rules.MaxRequestIDLen
	MaxHolderLen    = 256
	MaxSecretLen    = 128
	MaxTenantLen    = 128
	// MaxKeyLen bounds AcquireRequest.Key, as MaxTenantLen the tenant.
	MaxKeyLen = 128
	// MaxConnServerLen bounds ConnServer: a server id is a 56-character
	// public nkey.
	MaxConnServerLen = 64
	// MaxPollMs bounds AcquireRequest.PollMs: 24 hours.
	MaxPollMs = 24 * 60 * 60 * 1000
	// MaxWaitMs bounds AcquireRequest.WaitMs: 30 days. Far longer waits
	// overflowed the deadline, which then lay in the past.
	MaxWaitMs = 30 * 24 * 60 * 60 * 1000
)

// AcquireRequest asks for slots. Retrying with the same RequestID and Holder
// is safe: it finds the queued request or the granted lease.
type AcquireRequest struct {
	RequestID string `json:"request_id"`
	Holder    string `json:"holder"`
	Slots     int64  `json:"slots"`
	// Secret, if given, must accompany every renew, release and cancel of
	// this request and its lease. It never appears in events or in the HTTP
	// API, so another executor that sees the lease id and token cannot
	// release or renew the lease. The Go client always sends one.
	Secret string `json:"secret,omitempty"`
	// WaitMs bounds the time spent queued, measured by the manager from the
	// first time it saw the request. 0 waits until granted or cancelled.
	WaitMs int64 `json:"wait_ms,omitempty"`
	// PollMs is the client's promise to re-send this acquire (same request
	// id) at least every PollMs while it is queued. A queued request that
	// was not re-sent for 3 x PollMs + 1s when its turn comes is dropped as
	// abandoned (its client crashed or lost the manager) instead of being
	// granted slots nobody will use. 0 makes no promise: never dropped. The
	// Go client sends its poll interval.
	PollMs int64 `json:"poll_ms,omitempty"`
	// Priority orders requests in a pool with the priority policy: higher
	// first (e.g. low -1, normal 0, high 1), FIFO within a priority, with
	// aging. Ignored by other policies.
	Priority int `json:"priority,omitempty"`
	// Tenant is the share key of a pool with the fair policy; every pool
	// counts slots per tenant. Empty is a tenant too.
	Tenant string `json:"tenant,omitempty"`
	// Key is the request's fairness key: a pool with the fair policy
	// shares its slots across the keys of a tenant (a tenant's requests
	// without a key are its own share), and POOL_KEY_LIMITS caps the slots
	// in flight per key. Ignored by other policies. Empty is no key.
	Key string `json:"key,omitempty"`
	// NoWait refuses with would_wait instead of queueing (try-acquire).
	NoWait bool `json:"no_wait,omitempty"`
	// Units is the request's estimate of its usage (tokens, cents: the
	// budget's unit), 1..MaxUnits: a pool with a budget (POOL_BUDGETS)
	// requires it, reserves it while the lease is held, and the release
	// settles the actual (ReleaseRequest.Units). Pools without a budget
	// ignore it.
	Units int64 `json:"units,omitempty"`
	// ConnServer and ConnID name the NATS connection the request was sent
	// on (the server's id and the client id it gave the connection). With
	// them, a manager with fast release frees the lease soon after that
	// connection closes, and says so in the record (DisconnectGraceMs);
	// docs/guarantees.md, "Fast release". Without them, the TTL alone.
	ConnServer string `json:"conn_server,omitempty"`
	ConnID     uint64 `json:"conn_id,omitempty"`
	// Group names the request's concurrency group (at most MaxGroupLen
	// bytes), scoped to its pool on this manager, its tenant and the
	// credential it came with (group.go); OnGroup says what a new request
	// of the group does to the group's older ones: OnGroupCancelInProgress
	// or OnGroupCancelPending, or "" (nothing: it queues as any request).
	Group   string `json:"group,omitempty"`
	OnGroup string `json:"on_group,omitempty"`
	// Resend marks a re-send of an acquire this client has sent before (a
	// poll, or a retry after no answer); a first send never carries it. A
	// manager that saw the request end for good (cancelled or released by
	// its holder; refused with wait_expired, dropped or superseded) answers
	// a re-send of it with that end instead of queueing it anew, so that
	// a re-send delayed past its request's end does not queue a request
	// nobody waits for (docs/protocol.md, section 2.1).
	Resend bool `json:"resend,omitempty"`
}

// RenewRequest extends a lease by its TTL; ReleaseRequest gives it back.
// Both name the lease and its fencing token.
type RenewRequest struct {
	LeaseID string `json:"lease_id"`
	Token   uint64 `json:"token"`
	Secret  string `json:"secret,omitempty"`
	// ConnServer and ConnID, as in AcquireRequest: a renewal sent on
	// another connection than the lease's (after a reconnect) moves the
	// lease to it.
	ConnServer string `json:"conn_server,omitempty"`
	ConnID     uint64 `json:"conn_id,omitempty"`
	// LameDuck says that the server of ConnServer/ConnID is in lame duck
	// mode and will close the connection itself: a lease bound to that
	// connection is unbound from it (a close of it frees nothing), and
	// stays so until a renewal on another connection binds it there
	// (lameduck.go).
	LameDuck bool `json:"lame_duck,omitempty"`
}

// ReleaseRequest gives a lease's slots back.
type ReleaseRequest struct {
	LeaseID string `json:"lease_id"`
	Token   uint64 `json:"token"`
	Secret  string `json:"secret,omitempty"`
	// Units, if given, is what the lease actually used, 0..MaxUnits, for
	// a pool with a budget: it replaces the estimate in the budget's
	// window (less is given back at once, more is debited). Left out, the
	// estimate is settled. Pools without a budget ignore it.
	Units *int64 `json:"units,omitempty"`
}

// MaxUnits bounds an estimate and an actual of units (pools.MaxUnits).
const MaxUnits = pools.MaxUnits

// CancelRequest withdraws an acquire: a queued request leaves the queue, and
// a grant that raced the cancel is released by the manager.
type CancelRequest struct {
	RequestID string `json:"request_id"`
	Holder    string `json:"holder"`
	Secret    string `json:"secret,omitempty"`
}

// Status values of a Reply.
const (
	StatusGranted   = "granted"
	StatusQueued    = "queued"
	StatusRenewed   = "renewed"
	StatusReleased  = "released"
	StatusCancelled = "cancelled"
	// StatusBound answers a renewal that moved a lease with fast release
	// to the connection it came on, at once, before the renewal's write;
	// the renewal's own answer follows on the same reply subject.
	StatusBound = "bound"
	StatusOK    = "ok"
	StatusError = "error"
)

// Reply is the one reply shape for every request. An acquire may get a
// "queued" reply first and a final "granted" or "error" later, on the same
// reply subject.
type Reply struct {
	Status   string      `json:"status"`
	Lease    *Record     `json:"lease,omitempty"`
	Position int         `json:"position,omitempty"`
	Node     string      `json:"node,omitempty"`
	Pools    []PoolStats `json:"pools,omitempty"`
	Error    *Error      `json:"error,omitempty"`
	// Existing marks a grant answered from an earlier write (a retried
	// request id): the record's TTL started before this request was sent,
	// so the holder must confirm it with a renewal and measure its deadline
	// from that renewal.
	Existing bool `json:"existing,omitempty"`
	// ServedBy and Warnings (stats replies): see manager.Config.
	ServedBy string   `json:"served_by,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// ServerStopping, on a grant or renewal, is the id of the NATS server
	// that stops together with the manager answering, which is stopping
	// cleanly (leasemgr's embedded server; stop.go). A holder told so does
	// not count that server closing its connection against its lease.
	ServerStopping string `json:"server_stopping,omitempty"`
	// ClusterPools (stats replies) names the cluster pools the live
	// candidates list, also while no manager serves them (a takeover):
	// a pool of neither list is unknown everywhere. Absent when the
	// manager does not know (manager.Config.ClusterPools).
	ClusterPools *[]string `json:"cluster_pools,omitempty"`
	// Stop, on a renewal's answer, says that a newer request of the
	// lease's group asked its holder to stop (group.go): stop the work,
	// then release.
	Stop *StopNotice `json:"stop,omitempty"`
}

// NodePools is one node's pools: the one JSON shape of `leasemgr pools
// --json` (a list of them with --all) and of the HTTP API's /v1/pools.
type NodePools struct {
	Node  string      `json:"node"`
	Pools []PoolStats `json:"pools"`
	// ServedBy and Warnings as the node's stats reply gave them.
	ServedBy string   `json:"served_by,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// ClusterPools as the node's stats reply gave them.
	ClusterPools *[]string `json:"cluster_pools,omitempty"`
	// Cluster is the cluster pools (node ClusterNode), shown beside a
	// node's own when a manager serves them; nil otherwise.
	Cluster *NodePools `json:"cluster,omitempty"`
}

// PoolStats is one pool's figures in a stats reply.
type PoolStats struct {
	Name string `json:"name"`
	pools.Stats
	// Tenants holding or waiting for slots, with their counts.
	Tenants []pools.TenantStats `json:"tenants,omitempty"`
	// Weights and DefaultWeight are a fair pool's configured tenant
	// weights (TENANT_WEIGHTS, TENANT_DEFAULT_WEIGHT), so that executors
	// taking jobs for the pool share them the same way.
	Weights       map[string]int `json:"weights,omitempty"`
	DefaultWeight int            `json:"default_weight,omitempty"`
	// Scheduler is a fair pool's scheduler: its quantum and starvation
	// age, and per share (a tenant's requests with one fairness key) its
	// weight, credit, slots in flight and queue; omitted for other pools.
	// One reply lists at most MaxStatsKeys shares over all its pools.
	Scheduler *pools.SchedulerStats `json:"scheduler,omitempty"`
	// Counts are how the pool's requests and leases ended (PoolCounts);
	// nil from a manager of a version before them.
	Counts *PoolCounts `json:"counts,omitempty"`
	// ShadowCounts are what the pool's limits would have done with the
	// requests it granted in shadow mode (POOL_SHADOW), kept like Counts;
	// omitted while there are none.
	ShadowCounts ShadowCounts `json:"shadow_counts,omitempty"`
}

// Record is a granted lease, as stored in KV and sent to the holder.
type Record struct {
	ID     string `json:"id"`
	Node   string `json:"node"`
	Pool   string `json:"pool"`
	Slots  int64  `json:"slots"`
	Holder string `json:"holder"`
	// Token is the fencing token: the KV revision of the grant, a JetStream
	// stream sequence, so it only grows, per pool and across restarts. The
	// first stored revision carries 0 here (its own revision is the token);
	// renewals carry it explicitly.
	Token     uint64    `json:"token"`
	TTLMs     int64     `json:"ttl_ms"`
	GrantedAt time.Time `json:"granted_at"`
	// ExpiresAt is the manager's estimate (write time + TTL). Holders must
	// not use it: their own deadline starts when they sent the request.
	ExpiresAt time.Time `json:"expires_at"`
	// Term is the leadership term of the manager that wrote the record
	// (the node's leadership key revision when its term began), 0 for a
	// standalone manager or a record written before terms existed. A
	// manager deletes another instance's record written after its own
	// term began only if the record's term is lower than its own, and a
	// record of a higher term deposes it (docs/guarantees.md, "Fencing").
	Term uint64 `json:"term,omitempty"`
	// Manager is the instance id of the manager that granted the lease. A
	// manager that took over a node deletes, never counts, grants that
	// another instance stored after its rebuild (a deposed manager's late
	// write, which that manager answered to nobody).
	Manager string `json:"manager,omitempty"`
	// Secret is the acquire's secret: shown only to the holder.
	Secret   string `json:"secret,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Key      string `json:"key,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Units is the acquire's estimate (AcquireRequest.Units), reserved
	// from the pool's budget while the lease is held.
	Units int64 `json:"units,omitempty"`
	// ConnServer and ConnID name the holder's connection the lease is
	// bound to, and DisconnectGraceMs (> 0 only then) is how long after
	// that connection closes the manager frees the lease: the holder must
	// have stopped its work by then (see Lease.Deadline).
	ConnServer        string `json:"conn_server,omitempty"`
	ConnID            uint64 `json:"conn_id,omitempty"`
	DisconnectGraceMs int64  `json:"disconnect_grace_ms,omitempty"`
	// Group is the lease's concurrency group, and GroupOwner a digest of
	// the credential that acquired it (empty where the server vouches
	// for none): only a request of the same pool, tenant and credential
	// can ask it to stop (group.go).
	Group      string `json:"group,omitempty"`
	GroupOwner string `json:"group_owner,omitempty"`
}

// Public returns the record without its secret, for anyone but its holder.
func (r Record) Public() Record {
	r.Secret = ""
	return r
}

// TTL returns the record's TTL.
func (r *Record) TTL() time.Duration { return time.Duration(r.TTLMs) * time.Millisecond }

// EventKind names a lease transition.
type EventKind string

const (
	EventRequested EventKind = "requested"
	EventQueued    EventKind = "queued"
	EventGranted   EventKind = "granted"
	EventReleased  EventKind = "released"
	EventExpired   EventKind = "expired"
	EventCancelled EventKind = "cancelled"
	EventRejected  EventKind = "rejected"
	// EventStopping is published on every pool when its manager stops
	// cleanly: holders renew at once (stop.go). It carries no lease.
	EventStopping EventKind = "stopping"
)

// EventKinds lists every kind of event, in the order of a lease's life
// (leasemgr watch --kind offers them; a test checks that no kind declared
// in this package is missing).
var EventKinds = []EventKind{
	EventRequested, EventQueued, EventGranted, EventReleased, EventExpired, EventCancelled, EventRejected,
	EventResized, EventStopping, EventStopRequested, EventSuperseded,
}

// Event is published for every transition, carrying the pool's stats after it.
type Event struct {
	Kind      EventKind `json:"kind"`
	Time      time.Time `json:"time"`
	Node      string    `json:"node"`
	Pool      string    `json:"pool"`
	RequestID string    `json:"request_id,omitempty"`
	LeaseID   string    `json:"lease_id,omitempty"`
	Holder    string    `json:"holder,omitempty"`
	Slots     int64     `json:"slots,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	// Key is the fairness key of the request or lease the event is about,
	// when it has one.
	Key      string `json:"key,omitempty"`
	Group    string `json:"group,omitempty"` // the request's or lease's concurrency group, if any
	Token    uint64 `json:"token,omitempty"`
	Position int    `json:"position,omitempty"`
	WaitMs   int64  `json:"wait_ms,omitempty"`
	// Units is, in a granted event, the estimate the grant reserved from
	// its pool's budget; Settled, in a released, cancelled or expired
	// event of a pool with a budget, the units the lease's end settled
	// (the actual the holder gave, else the estimate). Settled is a
	// pointer so that a settlement of 0 shows.
	Units   int64       `json:"units,omitempty"`
	Settled *int64      `json:"settled,omitempty"`
	Code    Code        `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
	Stats   pools.Stats `json:"stats"`
	// Shadow, on a granted event of a shadow pool (POOL_SHADOW), names the
	// limit that would have held the request back, and ShadowAction what
	// the pool would have done with it (pools.Shadowed); both empty when
	// its limits would have granted it too.
	Shadow       pools.ShadowReason `json:"shadow,omitempty"`
	ShadowAction pools.ShadowAction `json:"shadow_action,omitempty"`
}

// MaxReplyLen bounds a reply subject: an inbox with a request id after it
// is well under 300 bytes.
const MaxReplyLen = 512

// DefaultInboxPrefix is nats.go's inbox prefix, always answered.
const DefaultInboxPrefix = "_INBOX"

// ServiceReplyPrefix is the prefix of the reply subjects the server makes
// for requests that cross a service import, always answered: the answer
// goes back to the requester's own reply subject in its own account.
const ServiceReplyPrefix = "_R_"

// Body limits: a lease verb's body holds at most a few hundred bytes of
// identifiers, even fully escaped; a resize names pools.
const (
	MaxRequestBody = 8 << 10
	MaxResizeBody  = 64 << 10
)

// MaxStatsWeights bounds the configured tenant weights one stats reply
// carries, over all its fair pools.
const MaxStatsWeights = 4096

// MaxStatsKeys bounds the shares (Scheduler.Keys) one stats reply lists
// over all its pools; a pool's further shares are counted in MoreKeys.
const MaxStatsKeys = 1024

// MaxEcho bounds how much of one client-chosen value (a request id, a
// holder, a pool name, a lease id, a JSON literal inside a decode error...)
// the manager copies into an error message, a log line or an event.
const MaxEcho = echo.Max
