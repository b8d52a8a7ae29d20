package lease

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// PoolConfig names a pool, its capacity in slots, and its queue policy
// (the zero Options: strict FIFO, unbounded queue).
type PoolConfig struct {
	Name     string
	Capacity int64
	Options  pools.Options
}

// ManagerConfig wires a Manager. Conn, Store, Node and Pools are required.
type ManagerConfig struct {
	Node   string
	Prefix string // DefaultPrefix if empty
	Pools  []PoolConfig
	TTL    time.Duration // lease TTL, whole seconds; 15s if zero
	Conn   *nats.Conn
	Store  Store
	Events EventSink    // NopEvents if nil
	Logger *slog.Logger // slog.Default() if nil
	// StoreTimeout bounds one store call; 5s if zero.
	StoreTimeout time.Duration
	// Instance identifies this manager process in the records it writes; a
	// fresh unique id if empty.
	Instance string
	// RebuildStall is how long the start-up rebuild may go without a
	// record from the store before Start gives up (3s if zero); keep it
	// well under LEADER_TTL for quick takeovers.
	RebuildStall time.Duration
	// PoolStore keeps runtime pool changes (resize) across restarts, under
	// the node's key. Optional: without it, resizes last until the restart.
	PoolStore Store
	// GrantLatency, if set, is told the time from each acquire's arrival
	// until its grant was stored (leasemetrics.Metrics.ObserveGrantLatency).
	GrantLatency func(pool string, d time.Duration)
	// Fence, if set, is the leadership term this manager serves (from
	// RunLeader): every store write, reply and event is checked against it,
	// and records carry its term. nil for a standalone manager.
	Fence Fence
	// RecordRefused, if set, is told the reason of every stored record the
	// manager refuses (see acceptRecord; RefusalReasons lists them). It is
	// called with the manager's lock held and must not block.
	RecordRefused func(reason string)
	// ReplyPrefixes are the inbox prefixes, besides "_INBOX", whose reply
	// subjects the manager answers (NATS_REPLY_PREFIXES); see replyto.go.
	ReplyPrefixes []string
	// ReplyRefused, if set, counts each request refused for its reply
	// subject (leasemetrics.Metrics.ReplyRefusals).
	ReplyRefused func()
}

// Manager serves the lease protocol for one node: it owns the node's pools,
// queues requests FIFO, and keeps every grant in the Store with a TTL.
//
// Lease safety rests on three rules kept here:
//   - slots are taken from the pool before the record is written, and the
//     holder hears of a grant only after the Store acknowledged the write;
//   - slots come back only when the record is gone from the Store (deleted
//     by a release, or expired and seen by the watcher), never before;
//   - on start, every record in the Store is counted before any request is
//     served.
//
// So the slots counted in memory are always at least the slots held in the
// Store, and a pool never grants past its capacity.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger

	// ctx ends when Close begins; release retries stop with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	pools  map[string]*pool
	leases map[string]*held // by record key; every live record of this node
	closed bool
	// ownMark is how this instance's name appears in the values it
	// writes, for telling its own writes from others' without decoding.
	ownMark []byte
	// deposed is set, and deposedCh closed, once a record of a later
	// leadership term was seen: see Deposed.
	deposed   atomic.Bool
	deposedCh chan struct{}

	subs      []*nats.Subscription
	replies   *replyRule // which reply subjects are answered; see replyto.go
	disc      *discovery // $SRV answers; see discovery.go
	watcher   Watcher
	watchDone chan struct{}
	ready     chan struct{} // closed once the Store's records are counted
	ops       sync.WaitGroup

	delta     poolDelta              // runtime pool changes; guarded by mu
	lastOrder int64                  // guarded by mu; see nextOrderLocked
	progress  atomic.Int64           // unix ns of the watch's last change; see Start
	restored  map[string]restoredReq // queue entries seen while rebuilding; guarded by mu
	refusals  refusalLog             // log lines about refused records; guarded by mu

	// Queue entries waiting to be written, and the goroutines writing
	// them (at most maxEntryWriters); guarded by mu.
	entryQueue   []*request
	entryWriters int
}

// pool is one named pool's state. Guarded by Manager.mu.
type pool struct {
	name string
	p    *pools.Pool
	// waiting holds every acquire that has no stored lease yet: queued, or
	// granted in memory with its record being written. Keyed by request id.
	waiting map[string]*request
	// releasing counts the slots of leases whose delete is in flight.
	releasing int64
	// unpersisted are queued requests whose entry was not written because
	// releases in flight covered the whole queue (see persistQueuedLocked).
	unpersisted []*request
}

func newPool(name string, capacity int64, o pools.Options) (*pool, error) {
	pp, err := pools.NewWithOptions(capacity, o)
	if err != nil {
		return nil, fmt.Errorf("lease: pool %q: %w", name, err)
	}
	return &pool{name: name, p: pp, waiting: make(map[string]*request)}, nil
}

// request is an acquire from the moment it is accepted until its lease is
// stored, or it ends with an error. Guarded by Manager.mu.
type request struct {
	id, holder string
	secret     string
	tenant     string
	priority   int
	slots      int64
	pool       *pool
	reply      string // where answers go; a retried acquire may move it
	since      time.Time
	w          *pools.Waiter
	timer      *time.Timer // wait deadline, nil if none
	granting   bool        // slots granted in memory, record being written
	cancelled  bool        // a cancel arrived while granting: give the lease back once stored
	hasEntry   bool        // a queue entry was written or is being written
	// pollMs is the client's re-send promise (AcquireRequest.PollMs), and
	// lastSeen the unix ns of the latest send: see abandoned.
	pollMs, lastSeen int64
	// trace holds the acquire's spans (nil with tracing off). Once granting
	// is set, only the grant goroutine touches it.
	trace *telemetry.AcquireTrace

	// A request that has to wait is persisted as a queue entry under its
	// lease key, so a successor manager restores the queue in order.
	order     int64          // position in the node's enqueue order (queued_at)
	waitUntil int64          // wait deadline in unix ns, 0 if none
	writing   sync.WaitGroup // the entry write in flight, if any
	entryRev  uint64         // revision of the stored entry, 0 if none
}

// held is a live lease record. Guarded by Manager.mu.
type held struct {
	key       string
	rec       Record
	rev       uint64 // latest stored revision, for conditional renew and delete
	pool      *pool  // nil if the record names a pool this node no longer has
	releasing bool   // a delete is in flight; that path frees the slots
	renewal   renewSeq
}

// NewManager validates cfg and builds a Manager. Call Start to serve.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Conn == nil || cfg.Store == nil {
		return nil, errors.New("lease: manager needs a NATS connection and a store")
	}
	if cfg.Node == "" {
		return nil, errors.New("lease: manager needs a node id")
	}
	if strings.EqualFold(cfg.Node, ReservedNode) {
		return nil, fmt.Errorf("lease: node id %q is reserved: its request subjects would fall inside the event subjects", ReservedNode)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("lease: TTL %v: must be whole seconds, at least 1s", cfg.TTL)
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 5 * time.Second
	}
	if cfg.Events == nil {
		cfg.Events = NopEvents{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = nuid.Next()
	}
	if cfg.RebuildStall == 0 {
		cfg.RebuildStall = 3 * time.Second
	}
	if len(cfg.Pools) == 0 {
		return nil, errors.New("lease: manager needs at least one pool")
	}
	m := &Manager{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.Node),
		pools:     make(map[string]*pool, len(cfg.Pools)),
		leases:    make(map[string]*held),
		restored:  make(map[string]restoredReq),
		watchDone: make(chan struct{}),
		ready:     make(chan struct{}),
		deposedCh: make(chan struct{}),
	}
	m.ownMark = ownMark(cfg.Instance, m.term())
	if cfg.Fence != nil {
		// Every write is checked against the fence right before it is sent.
		m.cfg.Store = fencedStore{Store: cfg.Store, ok: m.serving}
		if cfg.PoolStore != nil {
			m.cfg.PoolStore = fencedStore{Store: cfg.PoolStore, ok: m.serving}
		}
	}
	for _, pc := range cfg.Pools {
		if pc.Capacity < 0 || pc.Capacity > pools.MaxCapacity {
			return nil, fmt.Errorf("lease: pool %q: capacity %d is not between 0 and %d", pc.Name, pc.Capacity, int64(pools.MaxCapacity))
		}
		if _, dup := m.pools[pc.Name]; dup {
			return nil, fmt.Errorf("lease: pool %q configured twice", pc.Name)
		}
		p, err := newPool(pc.Name, pc.Capacity, pc.Options)
		if err != nil {
			return nil, err
		}
		m.pools[pc.Name] = p
	}
	own := cfg.Conn.NewRespInbox()
	own = own[:strings.LastIndexByte(own, '.')]
	replies, err := newReplyRule(cfg.ReplyPrefixes, cfg.Prefix, own, cfg.ReplyRefused)
	if err != nil {
		return nil, err
	}
	m.replies = replies
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Start counts the leases already in the Store (so grants made before a
// restart stay valid and are respected), then subscribes to the node's
// request subjects. It returns once the manager is serving. If it fails,
// it has undone everything it started (the watch, grants of restored queue
// entries, subscriptions), as Close does: the Manager cannot be started
// again.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.start(ctx); err != nil {
		_ = m.Close()
		return err
	}
	return nil
}

func (m *Manager) start(ctx context.Context) error {
	if err := m.loadDelta(ctx); err != nil {
		return err
	}
	w, err := m.startWatch(ctx)
	if err != nil {
		return fmt.Errorf("lease: watch lease records: %w", err)
	}
	m.watcher = w
	m.progress.Store(time.Now().UnixNano())
	go m.watch(w)
	// The rebuild must keep moving: a watch that stalls (a connection reset
	// while it delivers; nats.go notices the gap only seconds later) would
	// hold a takeover while this manager keeps its leadership. Give up
	// instead, so the caller (RunLeader) retries with a fresh watch, or a
	// standby steps in.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-m.ready:
			waiting = false
		case <-ctx.Done():
			return fmt.Errorf("lease: rebuilding state from the store: %w", ctx.Err())
		case <-m.watchDone:
			return errors.New("lease: the lease record watch ended before the state was rebuilt")
		case <-tick.C:
			if stalled := time.Since(time.Unix(0, m.progress.Load())); stalled > m.cfg.RebuildStall {
				return fmt.Errorf("lease: rebuilding state from the store: the watch delivered nothing for %v", stalled.Round(time.Millisecond))
			}
		}
	}

	handlers := map[string]nats.MsgHandler{
		Subject(m.cfg.Prefix, m.cfg.Node, "*", VerbAcquire): m.handleAcquire,
		Subject(m.cfg.Prefix, m.cfg.Node, "*", VerbRenew):   m.handleRenew,
		Subject(m.cfg.Prefix, m.cfg.Node, "*", VerbRelease): m.handleRelease,
		Subject(m.cfg.Prefix, m.cfg.Node, "*", VerbCancel):  m.handleCancel,
	}
	for subj, h := range handlers {
		sub, err := m.cfg.Conn.Subscribe(subj, m.guard(h))
		if err != nil {
			return fmt.Errorf("lease: subscribe %s: %w", subj, err)
		}
		// A burst of requests must queue in the client, not be dropped as
		// a slow consumer.
		_ = sub.SetPendingLimits(1<<20, 1<<30)
		m.subs = append(m.subs, sub)
	}
	if err := m.serveDiscovery(); err != nil {
		m.unsubscribe()
		return err
	}
	if err := m.cfg.Conn.FlushTimeout(m.cfg.StoreTimeout); err != nil {
		return fmt.Errorf("lease: subscribe: %w", err)
	}
	m.log.Info("lease manager serving", "prefix", m.cfg.Prefix, "pools", len(m.pools), "leases_restored", m.leaseCount())
	return nil
}

// guard keeps a bug in one handler from taking the process down with
// input from the network: the requester gets an internal error instead.
// It also keeps the reply rule (replyto.go): a request whose reply subject
// is not an inbox is dropped before its handler sees it.
func (m *Manager) guard(h nats.MsgHandler) nats.MsgHandler {
	return func(msg *nats.Msg) {
		if msg.Reply != "" && !m.replies.allowed(msg.Reply) {
			m.replies.refuse(m.log, msg.Subject, msg.Reply)
			return
		}
		defer func() {
			if r := recover(); r != nil {
				m.log.Error("handler panic", "subject", clip(msg.Subject), "panic", r)
				m.respond(msg.Reply, Reply{Status: StatusError, Error: errorf(CodeInternal, "internal error")})
			}
		}()
		h(msg)
	}
}

func (m *Manager) unsubscribe() {
	for _, s := range m.subs {
		_ = s.Unsubscribe()
	}
	m.subs = nil
}

// Close stops serving: queued requests are told the manager is unavailable
// (their clients retry with the same request id), store operations in flight
// finish, and the watch stops. Leases stay in the Store and are picked up by
// the next manager for this node.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()

	m.unsubscribe()
	m.cancel()
	m.replies.flush(m.log)

	// Queued requests stay queued: their entries are in the store, and the
	// next manager for this node restores them in order. Their clients keep
	// polling with the same request id.
	m.mu.Lock()
	for _, p := range m.pools {
		for _, r := range p.waiting {
			m.stopTimer(r)
		}
	}
	m.mu.Unlock()

	m.ops.Wait()
	var err error
	if m.watcher != nil {
		err = m.watcher.Stop()
		<-m.watchDone
	}
	_ = m.cfg.Conn.FlushTimeout(time.Second) // bounded: a partition must not hold Close
	return err
}

// Stats returns every pool's figures, sorted by name.
func (m *Manager) Stats() []PoolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked()
}

func (m *Manager) statsLocked() []PoolStats {
	out := make([]PoolStats, 0, len(m.pools))
	for _, p := range m.pools {
		out = append(out, PoolStats{Name: p.name, Stats: p.p.Stats(), Tenants: p.p.Tenants()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Leases returns a copy of every live lease record of this node, without
// their secrets.
func (m *Manager) Leases() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.leases))
	for _, h := range m.leases {
		out = append(out, h.rec.Public())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}

func (m *Manager) leaseCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases)
}

// poolToken returns the pool token of a request subject
// <prefix>.<node>.<pool>.<verb>.
func poolToken(subject string) string {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return ""
	}
	s := subject[:i]
	return s[strings.LastIndexByte(s, '.')+1:]
}

func (m *Manager) handleAcquire(msg *nats.Msg) {
	poolName := poolToken(msg.Subject)
	ctx, span := telemetry.StartServerSpan(msg.Header, telemetry.SpanAcquire, telemetry.Node(m.cfg.Node), telemetry.Pool(poolName))
	defer span.End()
	var req AcquireRequest
	if e := decode(msg.Data, &req); e != nil {
		m.reject(span, msg.Reply, poolName, req, e)
		return
	}
	telemetry.SetAttributes(span, telemetry.RequestID(clip(req.RequestID)), telemetry.Holder(clip(req.Holder)), telemetry.Slots(req.Slots))
	if e := m.validateAcquire(&req); e != nil {
		m.reject(span, msg.Reply, poolName, req, e)
		return
	}
	if msg.Reply == "" {
		// Nobody could hear of the grant; it would only hold slots for a TTL.
		m.log.Debug("acquire without a reply subject ignored", "pool", poolName, "request", req.RequestID)
		return
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		// Close has begun: start no store operation it would not wait for.
		m.respond(msg.Reply, errReply(m.closingError()))
		return
	}
	p := m.pools[poolName]
	if p == nil {
		m.rejectLocked(span, msg.Reply, nil, poolName, req, errorf(CodeUnknownPool, "node %s has no pool %q", m.cfg.Node, poolName))
		return
	}
	// A retry: answer from what is already known, never grant twice.
	if h := m.leases[RecordKey(m.cfg.Node, p.name, req.RequestID)]; h != nil {
		if e := sameRequest(req, h.rec.Holder, h.rec.Secret, h.rec.Slots); e != nil {
			telemetry.Fail(span, string(e.Code), e.Message)
			m.respond(msg.Reply, errReply(e))
			return
		}
		if h.releasing {
			// Its slots are about to go to someone else: this is no grant.
			m.respond(msg.Reply, errReply(errorf(CodeUnavailable, "lease %q is being released; retry to acquire anew", h.rec.ID)))
			return
		}
		// Existing tells the holder the record was written before this
		// request was sent, so it must confirm with a renewal before
		// trusting a deadline measured from its own send time.
		rec := h.rec
		m.respond(msg.Reply, Reply{Status: StatusGranted, Lease: &rec, Existing: true})
		return
	}
	if r := p.waiting[req.RequestID]; r != nil {
		if e := sameRequest(req, r.holder, r.secret, r.slots); e != nil {
			telemetry.Fail(span, string(e.Code), e.Message)
			m.respond(msg.Reply, errReply(e))
			return
		}
		r.reply = msg.Reply
		r.lastSeen = time.Now().UnixNano() // its poll: see abandoned
		if !r.granting {
			m.respond(msg.Reply, Reply{Status: StatusQueued, Position: positionLocked(r)})
		}
		return
	}
	if capacity := p.p.Stats().Capacity; req.Slots > capacity {
		m.rejectLocked(span, msg.Reply, p, poolName, req, errorf(CodeExceedsCapacity, "%d slots requested, pool %q has capacity %d", req.Slots, poolName, capacity))
		return
	}

	r := &request{id: req.RequestID, holder: req.Holder, secret: req.Secret, tenant: req.Tenant, priority: req.Priority,
		slots: req.Slots, pool: p, reply: msg.Reply, since: time.Now(), pollMs: req.PollMs}
	r.lastSeen = r.since.UnixNano()
	r.trace = telemetry.NewAcquireTrace(ctx)
	m.emit(p, Event{Kind: EventRequested, RequestID: r.id, Holder: r.holder, Slots: r.slots, Tenant: r.tenant})
	var w *pools.Waiter
	var granted bool
	var position int
	var err error
	if req.NoWait {
		w, err = p.p.TryAcquireRequest(r.poolRequest())
		granted = err == nil
	} else {
		w, granted, position, err = p.p.EnqueueRequest(r.poolRequest())
	}
	if err != nil {
		m.rejectLocked(span, msg.Reply, p, poolName, req, m.enqueueError(p, req, err))
		return
	}
	r.w = w
	p.waiting[r.id] = r
	if granted {
		m.startGrantLocked(r)
		return
	}
	r.order = m.nextOrderLocked()
	if req.WaitMs > 0 {
		r.waitUntil = r.since.Add(time.Duration(req.WaitMs) * time.Millisecond).UnixNano()
	}
	r.trace.StartQueued(ctx, telemetry.Position(position))
	// A request covered by releases in flight is granted one store write
	// later: telling it that it waits would only cost messages. It is told
	// if it is still waiting once they no longer cover the queue.
	m.queuedLocked(r, position, !coveredLocked(p))
	m.persistQueuedLocked(r)
}

// queuedLocked tells the watchers (and the holder if tell) that r waits,
// and arms its wait deadline.
func (m *Manager) queuedLocked(r *request, position int, tell bool) {
	if tell {
		m.respond(r.reply, Reply{Status: StatusQueued, Position: position})
	}
	m.emit(r.pool, Event{Kind: EventQueued, RequestID: r.id, Holder: r.holder, Slots: r.slots, Position: position})
	if r.waitUntil != 0 {
		r.timer = time.AfterFunc(time.Until(time.Unix(0, r.waitUntil)), func() { m.waitExpired(r) })
	}
}

// sameRequest checks that a retry repeats the request it retries.
func sameRequest(req AcquireRequest, holder, secret string, slots int64) *Error {
	if holder != req.Holder || !secretMatches(secret, req.Secret) {
		return errorf(CodeConflict, "request id %q belongs to another holder", req.RequestID)
	}
	if slots != req.Slots {
		return errorf(CodeConflict, "request id %q was sent before for %d slots, not %d", req.RequestID, slots, req.Slots)
	}
	return nil
}

func (r *request) poolRequest() pools.Request {
	return pools.Request{Slots: r.slots, Priority: r.priority, Tenant: r.tenant, Value: r}
}

// enqueueError maps a pool's refusal to a wire error.
func (m *Manager) enqueueError(p *pool, req AcquireRequest, err error) *Error {
	s := p.p.Stats()
	switch {
	case errors.Is(err, pools.ErrWouldWait):
		return errorf(CodeWouldWait, "%d slots not free at once in pool %q (%d in use of %d, %d queued)", req.Slots, p.name, s.InUse, s.Capacity, s.QueuedRequests)
	case errors.Is(err, pools.ErrQueueFull):
		e := errorf(CodeQueueFull, "pool %q already has %d queued requests, its limit", p.name, s.QueuedRequests)
		// A hint, not a promise: about when a holder renews, by which time
		// the queue has likely moved.
		e.RetryAfterMs = (m.cfg.TTL / 3).Milliseconds()
		return e
	case errors.Is(err, pools.ErrExceedsCapacity):
		return errorf(CodeExceedsCapacity, "%v", err)
	default:
		return errorf(CodeInternal, "%v", err)
	}
}

func (m *Manager) validateAcquire(req *AcquireRequest) *Error {
	if err := validID(req.RequestID); err != nil {
		return errorf(CodeBadRequest, "%v", err)
	}
	if req.Holder == "" {
		return errorf(CodeBadRequest, "holder is required")
	}
	if len(req.Holder) > MaxHolderLen {
		return errorf(CodeBadRequest, "holder is longer than %d bytes", MaxHolderLen)
	}
	if len(req.Secret) > MaxSecretLen {
		return errorf(CodeBadRequest, "secret is longer than %d bytes", MaxSecretLen)
	}
	if len(req.Tenant) > MaxTenantLen {
		return errorf(CodeBadRequest, "tenant is longer than %d bytes", MaxTenantLen)
	}
	if req.Slots <= 0 {
		return errorf(CodeInvalidSlots, "slots must be a positive integer, got %d", req.Slots)
	}
	if req.PollMs < 0 || req.PollMs > MaxPollMs {
		return errorf(CodeBadRequest, "poll_ms must be between 0 and %d (24h), got %d", MaxPollMs, req.PollMs)
	}
	if req.WaitMs < 0 || req.WaitMs > MaxWaitMs {
		return errorf(CodeBadRequest, "wait_ms must be between 0 and %d (30 days), got %d", MaxWaitMs, req.WaitMs)
	}
	return nil
}

func (m *Manager) reject(span trace.Span, reply, poolName string, req AcquireRequest, e *Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rejectLocked(span, reply, m.pools[poolName], poolName, req, e)
}

// rejectLocked answers an acquire with an error and, for a pool this node
// has, publishes a rejected event. Unknown pools get no event: their name
// comes from the network and must not mint event subjects.
func (m *Manager) rejectLocked(span trace.Span, reply string, p *pool, poolName string, req AcquireRequest, e *Error) {
	telemetry.Fail(span, string(e.Code), e.Message)
	m.respond(reply, errReply(e))
	if p != nil {
		// The request failed validation, maybe for its size: echo a bounded part.
		m.emit(p, Event{Kind: EventRejected, RequestID: clip(req.RequestID), Holder: clip(req.Holder), Slots: req.Slots, Code: e.Code, Message: e.Message})
	} else {
		m.log.Debug("acquire rejected", "pool", clip(poolName), "code", e.Code, "message", e.Message)
	}
}

// startGrantLocked writes the lease record of a request whose slots were
// granted in memory. The holder hears of the grant only once the write is
// acknowledged.
func (m *Manager) startGrantLocked(r *request) {
	r.granting = true
	m.stopTimer(r)
	m.ops.Add(1)
	go m.grant(r)
}

// startGrantsLocked starts the grants of waiters the pool just granted,
// except those whose client abandoned them: their slots go to the next.
func (m *Manager) startGrantsLocked(rs []*pools.Waiter) {
	for len(rs) > 0 {
		var next []*pools.Waiter
		now := time.Now().UnixNano()
		for _, w := range rs {
			r := w.Value.(*request)
			if abandoned(r, now) {
				next = append(next, m.dropAbandonedLocked(r, now)...)
				continue
			}
			m.startGrantLocked(r)
		}
		rs = next
	}
}

// abandoned reports whether r's client broke its promise to re-send r at
// least every pollMs: no send for 3 x pollMs + 1s, so three polls in a row
// were lost, or the client is gone.
func abandoned(r *request, now int64) bool {
	return r.pollMs > 0 && now-r.lastSeen > 3*r.pollMs*int64(time.Millisecond)+int64(time.Second)
}

// dropAbandonedLocked ends r, whose turn came after its client stopped
// re-sending it, instead of granting it slots nobody would use until the
// TTL lapsed. A client that is alive after all hears "unavailable" (or, on
// its next re-send, nothing of r) and queues again at the tail. It returns
// the waiters granted the slots r had been given.
func (m *Manager) dropAbandonedLocked(r *request, now int64) []*pools.Waiter {
	p := r.pool
	delete(p.waiting, r.id)
	m.stopTimer(r)
	m.startDropLocked(r)
	r.trace.EndQueued("abandoned")
	e := errorf(CodeUnavailable, "abandoned: not re-sent for %v while queued (poll_ms %d); acquire again to queue at the tail",
		time.Duration(now-r.lastSeen).Round(time.Millisecond), r.pollMs)
	m.respond(r.reply, errReply(e))
	// The slots back first, so the event carries the figures after the
	// drop: no other event may follow it.
	granted := p.p.ReleaseFor(r.tenant, r.slots)
	m.emit(p, Event{Kind: EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
	return granted
}

func (m *Manager) grant(r *request) {
	defer m.ops.Done()
	_, span := r.trace.StartGrant(telemetry.Node(m.cfg.Node), telemetry.Pool(r.pool.name), telemetry.LeaseID(r.id), telemetry.Slots(r.slots))
	defer span.End()
	now := time.Now()
	rec := Record{
		ID: r.id, Node: m.cfg.Node, Pool: r.pool.name, Slots: r.slots, Holder: r.holder,
		TTLMs: m.cfg.TTL.Milliseconds(), GrantedAt: now.UTC(), ExpiresAt: now.Add(m.cfg.TTL).UTC(),
		Term: m.term(), Manager: m.cfg.Instance, Secret: r.secret, Tenant: r.tenant, Priority: r.priority,
	}
	key := RecordKey(m.cfg.Node, r.pool.name, r.id)
	data := appendRecord(make([]byte, 0, 384), &rec)
	var rev uint64
	var err error
	if m.ctx.Err() != nil {
		// Closing, perhaps because leadership is about to lapse: write
		// nothing new, so a successor's count stays complete.
		err = errors.New("lease manager is shutting down")
	}
	if err == nil {
		started := time.Now()
		rev, err = m.writeGrant(key, data, r.awaitPersisted())
		if err != nil && !errors.Is(err, ErrStoreExists) && !errors.Is(err, ErrStoreRevision) && !fencedOut(err) {
			// Ambiguous: the write may be stored though its acknowledgement
			// was lost. The slots stay taken until the store says.
			rev, err = m.resolveGrant(key, r.id, started, err)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	p := r.pool
	delete(p.waiting, r.id)
	if fencedOut(err) {
		// The term is over: nothing was sent. The holder hears nothing
		// and retries with the successor, which restores its queue entry
		// if it has one. The slots stay taken here: this manager grants
		// nothing more.
		m.log.Warn("grant not stored: this manager's leadership term is over", "key", key)
		telemetry.Fail(span, string(CodeUnavailable), err.Error())
		return
	}
	if err != nil {
		// Nothing was stored: the slots go back, the holder may retry
		// (anew, so its queue entry goes too).
		m.log.Warn("storing a grant failed", "key", key, "err", err)
		if !m.closed {
			m.startDropLocked(r)
		}
		granted := p.p.ReleaseFor(r.tenant, r.slots)
		if !m.closed {
			m.startGrantsLocked(granted)
		}
		e := errorf(CodeUnavailable, "storing the lease failed: %v", err)
		telemetry.Fail(span, string(e.Code), e.Message)
		m.respond(r.reply, errReply(e))
		m.emit(p, Event{Kind: EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
		return
	}
	if m.ctx.Err() != nil {
		// Stored, but this manager is closing, perhaps past its leadership
		// deadline: a successor may not have counted this record and will
		// delete it. Tell the holder nothing but to retry; after a restart
		// of this same manager the retry finds the record.
		e := errorf(CodeUnavailable, "lease manager for node %s is shutting down; retry", m.cfg.Node)
		telemetry.Fail(span, string(e.Code), e.Message)
		m.respond(r.reply, errReply(e))
		return
	}
	rec.Token = rev
	h := &held{key: key, rec: rec, rev: rev, pool: p}
	m.leases[key] = h
	telemetry.SetAttributes(span, telemetry.Token(rev))
	if m.cfg.GrantLatency != nil {
		m.cfg.GrantLatency(p.name, time.Since(r.since))
	}
	if r.cancelled {
		// The holder gave up while the write was in flight: give it back.
		m.startReleaseLocked(h, EventCancelled)
		return
	}
	m.respond(r.reply, Reply{Status: StatusGranted, Lease: &rec})
	m.emit(p, Event{Kind: EventGranted, RequestID: r.id, LeaseID: rec.ID, Holder: r.holder, Slots: r.slots,
		Token: rev, WaitMs: time.Since(r.since).Milliseconds()})
}

// resolveGrant finds out whether a grant write that failed ambiguously was
// stored: it reads the key until the store answers, or until the record,
// had it been stored, would have expired. It returns the grant's revision if
// the record is this grant, else writeErr.
func (m *Manager) resolveGrant(key, id string, started time.Time, writeErr error) (uint64, error) {
	backoff := 50 * time.Millisecond
	for time.Since(started) < m.cfg.TTL+time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		data, rev, err := m.cfg.Store.Get(ctx, key)
		cancel()
		if errors.Is(err, ErrStoreNotFound) {
			return 0, writeErr
		}
		if err == nil {
			var v storedValue
			if json.Unmarshal(data, &v) == nil && !v.Queued && v.ID == id && v.Manager == m.cfg.Instance && v.Token == 0 {
				m.log.Info("a grant whose acknowledgement was lost is stored; keeping it", "key", key)
				return rev, nil
			}
			return 0, writeErr // the queue entry is still there, or another record
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	return 0, writeErr
}

// waitExpired ends a request whose wait deadline passed while it was queued.
func (m *Manager) waitExpired(r *request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || r.granting || r.pool.waiting[r.id] != r {
		return
	}
	p := r.pool
	removed, granted := p.p.Cancel(r.w)
	if !removed {
		return
	}
	delete(p.waiting, r.id)
	m.startDropLocked(r)
	r.trace.EndQueued(string(CodeWaitExpired))
	e := errorf(CodeWaitExpired, "not granted within the wait deadline (waited %s)", time.Since(r.since).Round(time.Millisecond))
	m.respond(r.reply, errReply(e))
	m.emit(p, Event{Kind: EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
	m.startGrantsLocked(granted)
}

func (m *Manager) stopTimer(r *request) {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

func (m *Manager) handleCancel(msg *nats.Msg) {
	var req CancelRequest
	if e := decode(msg.Data, &req); e != nil {
		m.respond(msg.Reply, errReply(e))
		return
	}
	if err := validID(req.RequestID); err != nil {
		m.respond(msg.Reply, errReply(errorf(CodeBadRequest, "%v", err)))
		return
	}
	if req.Holder == "" {
		m.respond(msg.Reply, errReply(errorf(CodeBadRequest, "holder is required")))
		return
	}
	poolName := poolToken(msg.Subject)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.respond(msg.Reply, errReply(m.closingError()))
		return
	}
	p := m.pools[poolName]
	if p == nil {
		m.respond(msg.Reply, errReply(errorf(CodeUnknownPool, "node %s has no pool %q", m.cfg.Node, poolName)))
		return
	}
	if r := p.waiting[req.RequestID]; r != nil {
		if r.holder != req.Holder || !secretMatches(r.secret, req.Secret) {
			m.respond(msg.Reply, errReply(errorf(CodeConflict, "request id %q belongs to another holder", req.RequestID)))
			return
		}
		if r.granting {
			r.cancelled = true
			m.respond(msg.Reply, Reply{Status: StatusCancelled})
			return
		}
		m.stopTimer(r)
		removed, granted := p.p.Cancel(r.w)
		if removed {
			delete(p.waiting, r.id)
			m.startDropLocked(r)
			r.trace.EndQueued(string(CodeCancelled))
			e := errorf(CodeCancelled, "cancelled by the holder")
			m.respond(r.reply, errReply(e))
			m.emit(p, Event{Kind: EventCancelled, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code})
			m.startGrantsLocked(granted)
		}
		m.respond(msg.Reply, Reply{Status: StatusCancelled})
		return
	}
	if h := m.leases[RecordKey(m.cfg.Node, p.name, req.RequestID)]; h != nil {
		if h.rec.Holder != req.Holder || !secretMatches(h.rec.Secret, req.Secret) {
			m.respond(msg.Reply, errReply(errorf(CodeConflict, "request id %q belongs to another holder", req.RequestID)))
			return
		}
		if !h.releasing {
			m.startReleaseLocked(h, EventCancelled)
		}
		m.respond(msg.Reply, Reply{Status: StatusReleased})
		return
	}
	// Nothing to cancel: already ended. Cancel is idempotent.
	m.respond(msg.Reply, Reply{Status: StatusCancelled})
}

// positionLocked is r's place in its pool's queue for a queued reply.
// Finding it walks the queue; on deep queues the reply goes without it
// (0) rather than cost O(depth) on every poll.
func positionLocked(r *request) int {
	if r.pool.p.Stats().QueuedRequests > maxPositionWalk {
		return 0
	}
	return r.pool.p.Position(r.w)
}

// lookupLocked finds the lease a renew or release names and checks its token.
// maxPositionWalk bounds the queue depth up to which a poll is answered
// with the request's position.
const maxPositionWalk = 1024

// closingError answers requests that arrive once Close has begun.
func (m *Manager) closingError() *Error {
	return errorf(CodeUnavailable, "lease manager for node %s is shutting down; retry", m.cfg.Node)
}

func (m *Manager) lookupLocked(subject string, leaseID string, token uint64, secret string) (*held, *Error) {
	if m.closed {
		return nil, m.closingError()
	}
	poolName := poolToken(subject)
	if m.pools[poolName] == nil {
		return nil, errorf(CodeUnknownPool, "node %s has no pool %q", m.cfg.Node, poolName)
	}
	if leaseID == "" {
		return nil, errorf(CodeBadRequest, "lease_id is required")
	}
	if err := validID(leaseID); err != nil {
		return nil, errorf(CodeBadRequest, "lease_id: %v", strings.TrimPrefix(err.Error(), "request_id "))
	}
	h := m.leases[RecordKey(m.cfg.Node, poolName, leaseID)]
	if h == nil || h.releasing {
		return nil, errorf(CodeLeaseNotFound, "no live lease %q in pool %q on node %s", leaseID, poolName, m.cfg.Node)
	}
	if h.rec.Token != token {
		return nil, errorf(CodeTokenMismatch, "lease %q has a different fencing token than %d", leaseID, token)
	}
	if !secretMatches(h.rec.Secret, secret) {
		return nil, errorf(CodeTokenMismatch, "lease %q was acquired with a different secret", leaseID)
	}
	return h, nil
}

// secretMatches compares in constant time, so timing tells nothing.
func secretMatches(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

func (m *Manager) handleRenew(msg *nats.Msg) {
	_, span := telemetry.StartServerSpan(msg.Header, telemetry.SpanRenew, telemetry.Node(m.cfg.Node), telemetry.Pool(poolToken(msg.Subject)))
	var req RenewRequest
	if e := decode(msg.Data, &req); e != nil {
		telemetry.Fail(span, string(e.Code), e.Message)
		span.End()
		m.respond(msg.Reply, errReply(e))
		return
	}
	telemetry.SetAttributes(span, telemetry.LeaseID(clip(req.LeaseID)), telemetry.Token(req.Token))
	m.mu.Lock()
	h, e := m.lookupLocked(msg.Subject, req.LeaseID, req.Token, req.Secret)
	if e != nil {
		m.mu.Unlock()
		telemetry.Fail(span, string(e.Code), e.Message)
		span.End()
		m.respond(msg.Reply, errReply(e))
		return
	}
	m.ops.Add(1)
	m.mu.Unlock()
	go m.renew(msg.Reply, h, time.Now(), span)
}

// renew rewrites the record with a fresh TTL, conditional on the revision we
// know: a record that expired meanwhile is never brought back. received is
// when the request arrived; renewals of one lease run one at a time
// (renewSeq).
func (m *Manager) renew(reply string, h *held, received time.Time, span trace.Span) {
	defer m.ops.Done()
	defer span.End()
	fail := func(e *Error) {
		telemetry.Fail(span, string(e.Code), e.Message)
		m.respond(reply, errReply(e))
	}
	h.renewal.lock()
	defer h.renewal.unlock()
	if rec, ok := h.renewal.since(received); ok {
		m.respond(reply, Reply{Status: StatusRenewed, Lease: &rec})
		return
	}
	started := time.Now()
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		rec, rev := h.rec, h.rev
		m.mu.Unlock()
		rec.ExpiresAt = time.Now().Add(m.cfg.TTL).UTC()
		data := appendRecord(make([]byte, 0, 384), &rec)
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		newRev, err := m.cfg.Store.Renew(ctx, h.key, data, m.cfg.TTL, rev)
		cancel()
		switch {
		case err == nil:
			m.mu.Lock()
			if newRev > h.rev {
				h.rev = newRev
				h.rec.ExpiresAt = rec.ExpiresAt
			}
			m.mu.Unlock()
			h.renewal.stored(started, rec)
			m.respond(reply, Reply{Status: StatusRenewed, Lease: &rec})
			return
		case errors.Is(err, ErrStoreRevision):
			// Either an earlier renewal moved the revision (one whose
			// acknowledgement was lost, or a concurrent one) or the record
			// is gone: expired or released. Only the store can tell.
			if attempt < maxRenewRereads && m.stillStored(h) {
				continue
			}
			fail(errorf(CodeLeaseNotFound, "lease %q expired before the renewal", h.rec.ID))
			return
		default:
			fail(errorf(CodeUnavailable, "storing the renewal failed: %v", err))
			return
		}
	}
}

// stillStored reads h's key and, if it still holds this lease (same token),
// adopts its revision and reports true. An expired lease is never brought
// back: its key is gone or holds another grant.
func (m *Manager) stillStored(h *held) bool {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
	defer cancel()
	data, rev, err := m.cfg.Store.Get(ctx, h.key)
	if err != nil {
		return false
	}
	var v storedValue
	if json.Unmarshal(data, &v) != nil || v.Queued || (v.Token != 0 && v.Token != h.rec.Token) || (v.Token == 0 && rev != h.rec.Token) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[h.key] != h || h.releasing {
		return false
	}
	if rev > h.rev {
		h.rev = rev
	}
	return true
}

func (m *Manager) handleRelease(msg *nats.Msg) {
	_, span := telemetry.StartServerSpan(msg.Header, telemetry.SpanRelease, telemetry.Node(m.cfg.Node), telemetry.Pool(poolToken(msg.Subject)))
	defer span.End()
	var req ReleaseRequest
	if e := decode(msg.Data, &req); e != nil {
		telemetry.Fail(span, string(e.Code), e.Message)
		m.respond(msg.Reply, errReply(e))
		return
	}
	telemetry.SetAttributes(span, telemetry.LeaseID(clip(req.LeaseID)), telemetry.Token(req.Token))
	m.mu.Lock()
	defer m.mu.Unlock()
	h, e := m.lookupLocked(msg.Subject, req.LeaseID, req.Token, req.Secret)
	if e != nil {
		telemetry.Fail(span, string(e.Code), e.Message)
		m.respond(msg.Reply, errReply(e))
		return
	}
	// The holder need not wait for the delete: until it is stored the slots
	// stay busy, which costs a little capacity and never over-grants.
	m.respond(msg.Reply, Reply{Status: StatusReleased})
	m.startReleaseLocked(h, EventReleased)
}

// startReleaseLocked deletes h's record; its slots stay busy until that is
// stored.
func (m *Manager) startReleaseLocked(h *held, kind EventKind) {
	h.releasing = true
	if h.pool != nil {
		h.pool.releasing += h.rec.Slots
	}
	m.ops.Add(1)
	go m.release(h, kind)
}

// release deletes the record, conditional on its revision, and frees the
// slots once the Store confirms the record is gone. It retries until then:
// freeing earlier could let the next grant overlap a record still stored.
func (m *Manager) release(h *held, kind EventKind) {
	defer m.ops.Done()
	backoff := 50 * time.Millisecond
	for {
		m.mu.Lock()
		rev := h.rev
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		err := m.cfg.Store.Delete(ctx, h.key, rev)
		if errors.Is(err, ErrStoreRevision) {
			// Renewed meanwhile (retry with the newer revision) or expired.
			var newRev uint64
			_, newRev, err = m.cfg.Store.Get(ctx, h.key)
			if err == nil {
				m.mu.Lock()
				if newRev > h.rev {
					h.rev = newRev
				}
				m.mu.Unlock()
				cancel()
				continue
			}
		}
		cancel()
		if err == nil || errors.Is(err, ErrStoreNotFound) {
			m.free(h, kind, "")
			return
		}
		if fencedOut(err) {
			// The term is over: the record stays, the successor counts it
			// until the holder's retried release or its TTL ends it.
			m.log.Warn("lease record not deleted: this manager's leadership term is over", "key", h.key)
			return
		}
		m.log.Warn("deleting a lease record failed; retrying", "key", h.key, "err", err)
		m.mu.Lock()
		if h.pool != nil && !m.closed {
			// The requests waiting only for these slots may wait a while
			// longer: store their queue entries after all.
			m.persistUnpersistedLocked(h.pool)
		}
		m.mu.Unlock()
		select {
		case <-m.ctx.Done():
			// Shutting down: the record stays until its TTL lapses, and the
			// next manager for this node counts it until then.
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// free returns a gone lease's slots to its pool and grants waiters.
func (m *Manager) free(h *held, kind EventKind, code Code) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freeLocked(h, kind, code)
}

func (m *Manager) freeLocked(h *held, kind EventKind, code Code) {
	if m.leases[h.key] != h {
		return
	}
	delete(m.leases, h.key)
	if h.pool == nil {
		return
	}
	if h.releasing {
		h.pool.releasing -= h.rec.Slots
	}
	granted := h.pool.p.ReleaseFor(h.rec.Tenant, h.rec.Slots)
	m.emit(h.pool, Event{Kind: kind, RequestID: h.rec.ID, LeaseID: h.rec.ID, Holder: h.rec.Holder, Slots: h.rec.Slots, Token: h.rec.Token, Code: code})
	if !m.closed {
		m.startGrantsLocked(granted)
		m.persistUncoveredLocked(h.pool)
	}
}

func (m *Manager) handleStats(msg *nats.Msg) {
	m.respond(msg.Reply, Reply{Status: StatusOK, Node: m.cfg.Node, Pools: m.Stats()})
}

// watch applies the Store's view: first it counts every stored lease of this
// node, then it frees leases whose records expire or are deleted by others.
// startWatch starts the lease record watch, giving up after RebuildStall
// (a watch set up over a connection that resets meanwhile can hang for the
// JetStream API timeout); a watch that comes up later is stopped.
func (m *Manager) startWatch(ctx context.Context) (Watcher, error) {
	type result struct {
		w   Watcher
		err error
	}
	done := make(chan result)
	// The watch lives until Close (m.ctx), not only for Start's ctx; its
	// set-up ends with Start's ctx too. m.ops owns the set-up goroutine,
	// which stops a watch that came up after Start gave up on it.
	wctx, stop := context.WithCancel(m.ctx)
	stopSetup := context.AfterFunc(ctx, stop)
	defer stopSetup()
	m.ops.Add(1)
	go func() {
		defer m.ops.Done()
		w, err := m.cfg.Store.Watch(wctx, NodeKeys(m.cfg.Node))
		select {
		case done <- result{w, err}:
		case <-wctx.Done():
			if err == nil {
				_ = w.Stop()
			}
		}
	}()
	select {
	case r := <-done:
		return r.w, r.err
	case <-wctx.Done():
		return nil, fmt.Errorf("setting up the watch: %w", context.Cause(wctx))
	case <-time.After(m.cfg.RebuildStall):
		stop() // ends the set-up; Close (which Start calls next) waits for it
		return nil, fmt.Errorf("setting up the watch took longer than %v", m.cfg.RebuildStall)
	}
}

func (m *Manager) watch(w Watcher) {
	defer close(m.watchDone)
	rebuilt := false
	for ch := range w.Changes() {
		m.progress.Store(time.Now().UnixNano())
		switch ch.Op {
		case ChangeCaughtUp:
			if !rebuilt {
				rebuilt = true
				m.restoreQueue()
				close(m.ready)
			}
		case ChangePut:
			m.observePut(ch, rebuilt)
		case ChangeDelete, ChangeExpire:
			m.mu.Lock()
			delete(m.restored, ch.Key)
			h := m.leases[ch.Key]
			// Our own release owns the slots while its delete is in flight.
			if h != nil && !h.releasing && ch.Rev > h.rev {
				kind := EventExpired
				if ch.Op == ChangeDelete {
					kind = EventReleased
				} else {
					_, span := telemetry.StartSpan(context.Background(), telemetry.SpanExpire, telemetry.Node(m.cfg.Node),
						telemetry.Pool(h.rec.Pool), telemetry.LeaseID(h.rec.ID), telemetry.Token(h.rec.Token), telemetry.Slots(h.rec.Slots))
					span.End()
				}
				m.freeLocked(h, kind, "")
			}
			m.mu.Unlock()
		}
	}
}

// observePut counts every stored lease while rebuilding. After that, an
// unknown put is either this manager's own write for a lease it has already
// let go (ignored), or a grant a previous instance stored after this one
// took over (counted, so it cannot be granted twice).
func (m *Manager) observePut(ch Change, rebuilt bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stored, ok := m.acceptRecord(ch, rebuilt)
	if !ok {
		return
	}
	if h := m.leases[ch.Key]; h != nil {
		if ch.Rev > h.rev {
			h.rev = ch.Rev
		}
		m.checkTermLocked(ch)
		return
	}
	if rebuilt && bytes.Contains(ch.Value, m.ownMark) {
		// This instance's own write (a grant whose acknowledgement is on
		// its way, or a queue entry), as decoding would show below, but
		// without the cost on every write of a busy manager. A string
		// value cannot hold the unescaped mark, so no other record has it.
		return
	}
	if stored == nil { // recognised as this instance's without decoding
		return
	}
	rec := *stored
	if m.cfg.Fence != nil && rec.Term > m.term() {
		m.depose(ch.Key, rec.Term)
		return
	}
	if rec.Queued {
		// A queue entry: restored in order once the rebuild is complete.
		// Later ones are this manager's own, or a predecessor's last words
		// whose clients will poll again.
		if !rebuilt {
			m.restored[ch.Key] = restoredReq{entry: rec, rev: ch.Rev}
		}
		return
	}
	if rebuilt {
		if m.closed || !m.mayDeleteLocked(ch.Key, rec.Record) {
			// Closing (maybe deposed): the records a successor writes are
			// not ours to judge. Or our own write, or not provably older.
			return
		}
		// A grant another instance stored after this one took over: its
		// write was delayed past that instance's leadership deadline, and
		// that instance, past its deadline, told nobody of it (see grant).
		// Its slots may already be granted here, so it must not count:
		// delete it.
		m.log.Warn("deleting a grant another manager instance stored after this one took over", "key", ch.Key, "manager", rec.Manager)
		m.ops.Add(1)
		go func() {
			defer m.ops.Done()
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
			defer cancel()
			if err := m.cfg.Store.Delete(ctx, ch.Key, ch.Rev); err != nil && !errors.Is(err, ErrStoreNotFound) && !errors.Is(err, ErrStoreRevision) {
				m.log.Warn("deleting a late grant failed; it expires with its TTL", "key", ch.Key, "err", err)
			}
		}()
		return
	}
	if rec.Token == 0 {
		rec.Token = ch.Rev
	}
	delete(m.restored, ch.Key)
	h := &held{key: ch.Key, rec: rec.Record, rev: ch.Rev, pool: m.pools[rec.Pool]}
	m.leases[ch.Key] = h
	if h.pool == nil {
		m.log.Warn("stored lease names a pool this node does not have; it is not counted and cannot be renewed", "key", ch.Key, "pool", rec.Pool)
		return
	}
	h.pool.p.RestoreFor(rec.Tenant, rec.Slots)
}

func (m *Manager) emit(p *pool, ev Event) {
	if !m.serving() {
		return // fenced: a deposed manager announces nothing
	}
	ev.Time = time.Now().UTC()
	ev.Node = m.cfg.Node
	ev.Pool = p.name
	ev.Stats = p.p.Stats()
	m.cfg.Events.Publish(ev)
}

func (m *Manager) respond(reply string, r Reply) {
	if reply == "" {
		return // no one to answer
	}
	b := replyBuffers.Get()
	data, err := appendReply(*b, &r)
	if err != nil {
		m.log.Error("encoding a reply", "err", err)
		return
	}
	m.publishReply(reply, nil, data)
	replyBuffers.Put(b, data)
}

// publishReply sends data (with hdr, if any) to reply, a reply subject, if
// the reply rule allows it and the fence is valid: every answer, discovery
// and resize errors included, goes through here. Requests were checked on
// arrival (guard); this check also covers reply subjects restored from
// stored queue entries.
func (m *Manager) publishReply(reply string, hdr nats.Header, data []byte) {
	if !m.serving() {
		return // fenced: a deposed manager answers nothing
	}
	if !m.replies.allowed(reply) {
		m.replies.refuse(m.log, "", reply)
		return
	}
	var err error
	if hdr == nil {
		err = m.cfg.Conn.Publish(reply, data)
	} else {
		err = m.cfg.Conn.PublishMsg(&nats.Msg{Subject: reply, Header: hdr, Data: data})
	}
	if err != nil {
		m.log.Warn("sending a reply", "subject", reply, "err", err)
	}
}

var replyBuffers Buffers

func errReply(e *Error) Reply { return Reply{Status: StatusError, Error: e} }
