package manager

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// PoolConfig names a pool, its capacity in slots, and its queue policy
// (the zero Options: strict FIFO, unbounded queue).
type PoolConfig struct {
	Name     string
	Capacity int64
	Options  pools.Options
}

// Config wires a Manager. Conn, Store, Node and Pools are required.
type Config struct {
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
	// QueueEntryDelay is how long a queued request waits before it is told
	// so and its queue entry is written (queue.go); QueueEntryDelay if zero.
	QueueEntryDelay time.Duration
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
	// manager refuses (see recordCheck.accept; RefusalReasons lists them).
	// Its calls come one at a time, under a lock of the manager's, and it
	// must not block.
	RecordRefused func(reason string)
	// ReplyPrefixes are the inbox prefixes, besides "_INBOX", whose reply
	// subjects the manager answers (NATS_REPLY_PREFIXES); see replyto.go.
	ReplyPrefixes []string
	// ReplyRefused, if set, counts each request refused for its reply
	// subject, or ignored for having none (leasemetrics.Metrics.ReplyRefusals).
	ReplyRefused func()
	// SecretRefused, if set, is told the reason (SecretRefusalReasons) of
	// every request refused over its secret: a wrong one, or one of a
	// connection that presented too many (guesses.go). Its calls come under
	// the manager's lock, and it must not block.
	SecretRefused func(reason string)
	// DisconnectEvents, if set, turns fast release on (disconnect.go): it
	// is the subject on which the NATS server's client disconnect
	// advisories for the holders' account reach this manager
	// ($SYS.ACCOUNT.<account>.DISCONNECT, imported from the system
	// account). Only the server may be able to publish there: a forged
	// advisory frees a live holder's lease early. Empty: the TTL alone.
	DisconnectEvents string
	// GroupStopBound is how long after a holder was asked to stop by a
	// newer request of its concurrency group its renewals are still
	// answered (DefaultGroupStopBound if zero): a holder that ignores the
	// request then loses its lease at its deadline (group.go).
	GroupStopBound time.Duration
	// DisconnectGrace is how long after a holder's connection closed its
	// leases are freed (DefaultDisconnectGrace if zero), between
	// MinDisconnectGrace and MaxDisconnectGrace and under TTL/2.
	DisconnectGrace time.Duration
	// EmbeddedServer says that the NATS server Conn is connected to runs
	// in this process and stops when it does (leasemgr without NATS_URL).
	// A clean stop then tells the holders so (stop.go), and they do not
	// hold that server's going against their leases.
	EmbeddedServer bool
	// MaxQueuedPerConn bounds the requests one client connection may have
	// waiting on this node, over all pools (connqueue.go);
	// rules.DefaultMaxQueuedPerConnection if zero. MaxQueuedPerCredential
	// bounds those of every connection of one credential together;
	// rules.DefaultMaxQueuedPerCredential if zero.
	MaxQueuedPerConn       int
	MaxQueuedPerCredential int
	// ServedBy and Warnings, if set, go into every stats reply: the node
	// of the process serving (for the cluster pools' manager, whose Node is
	// ClusterNode), and what an operator should know about the pools (the
	// cluster pool candidates' disagreements). Warnings must not block.
	ServedBy string
	Warnings func() []string
	// ClusterPools, if set, returns the names of the cluster pools the live
	// candidates list (package candidacy), nil while they are not known
	// yet; stats replies carry them, so a client learns at once that a
	// pool is neither the node's nor the cluster's.
	ClusterPools func() []string
}

// Manager serves the lease protocol for one node: it owns the node's pools,
// queues requests (FIFO, by priority or by weighted fair share, per pool),
// and keeps every grant in the Store with a TTL.
//
// Lease safety rests on three rules kept here:
//   - slots are taken from the pool before the record is written, and the
//     holder hears of a grant only after the Store acknowledged the write;
//   - slots come back only when the record is gone from the Store (deleted
//     by a release, or expired and seen by the watcher), never before; or,
//     at a release, go at once to a request whose record replaces the
//     released one in one conditional write (handover.go);
//   - on start, every record in the Store is counted before any request is
//     served.
//
// So the slots counted in memory are always at least the slots held in the
// Store, and a pool never grants past its capacity.
type Manager struct {
	cfg Config
	log *slog.Logger

	// ctx ends when Close begins; release retries stop with it.
	ctx    context.Context
	cancel context.CancelFunc
	ops    sync.WaitGroup // the grant, renewal and release goroutines

	// mu guards the pools, the leases and the owners below that change
	// with them in one step (documented "guarded by mu"). The owners with
	// a lock of their own take it after mu, never before: the Manager may
	// call them with mu held, and they never take mu while holding theirs.
	mu    sync.Mutex
	pools map[string]*pool
	// removed holds the pools a resize removed (and not added back), so
	// that their holders and latecomers are told so, not that the node
	// never had them.
	removed  map[string]bool
	leases   leaseTable             // every live record of this node (leases.go)
	closed   bool                   // Close has begun
	delta    poolDelta              // runtime pool changes in force
	restored map[string]restoredReq // queue entries seen while rebuilding

	// Guarded by mu, as they change with the pools and the leases.
	waiters waiters       // the pools' waiting requests, by connection (connqueue.go)
	guesses *guesses      // wrong secrets, by connection (guesses.go)
	journal *journal      // the queue entries: which, when, writing (queue.go, journal.go)
	rates   rates         // the start-rate timers (rate.go)
	stop    stopState     // a clean stop's progress (stop.go)
	groups  *groups       // the concurrency groups' rules (group.go)
	ended   endedRequests // requests ended for good, for late re-sends (ended.go)

	// Owners with no state under mu: their own lock, or none needed.
	lead    *leadership  // the term served and the fence (fence.go): atomic
	out     *outbox      // subscriptions, replies and events (respond.go): own lock
	gone    *disconnects // fast release (disconnect.go, closecheck.go): own lock
	watch   *recordWatch // the lease record watch (watch.go)
	disc    *discovery   // admin endpoints and history (discovery.go): own locks
	records *recordCheck // which stored records are honoured (records.go): own lock
	deltas  *deltaStore  // stored pool changes (pooldelta.go); nil without PoolStore
	tally   *tally       // the pools' outcome counts (tally.go): own lock
	counts  *countStore  // stored pool counts (tallystore.go); nil without PoolStore
	budgets *budgetStore // stored budget windows (budgetstore.go); nil without PoolStore
	grants  *grantStore  // a grant's writes (grant.go): stateless
}

// New validates cfg and builds a Manager. Call Start to serve.
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.Node),
		leases:   newLeaseTable(cfg.Node),
		restored: make(map[string]restoredReq),
		waiters:  newWaiters(cfg),
	}
	m.guesses = newGuesses(cfg.SecretRefused, m.log)
	m.rates = newRates(m.refill)
	m.lead = newLeadership(cfg.Fence, cfg.Instance, m.log)
	m.records = newRecordCheck(cfg.Node, m.lead, cfg.RecordRefused, m.log)
	if cfg.Fence != nil {
		// Every write is checked against the fence right before it is sent.
		m.cfg.Store = fencedStore{Store: cfg.Store, ok: m.lead.serving}
		if cfg.PoolStore != nil {
			m.cfg.PoolStore = fencedStore{Store: cfg.PoolStore, ok: m.lead.serving}
		}
	}
	if m.cfg.PoolStore != nil {
		m.deltas = &deltaStore{store: m.cfg.PoolStore, node: cfg.Node, lead: m.lead, check: m.records, log: m.log}
	}
	if m.pools, err = cfg.newPools(); err != nil {
		return nil, err
	}
	rule, err := cfg.replyRule()
	if err != nil {
		return nil, err
	}
	m.tally = newTally(cfg.Events) // counts every event on its way out
	if m.cfg.PoolStore != nil {
		m.counts = &countStore{store: m.cfg.PoolStore, node: cfg.Node, lead: m.lead, check: m.records, tally: m.tally, timeout: cfg.StoreTimeout, log: m.log}
	}
	m.out = &outbox{conn: cfg.Conn, rule: rule, events: m.tally, lead: m.lead, node: cfg.Node, log: m.log}
	m.groups = &groups{node: cfg.Node, bound: cfg.GroupStopBound, leases: &m.leases, out: m.out}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if m.cfg.PoolStore != nil {
		m.budgets = &budgetStore{store: m.cfg.PoolStore, node: cfg.Node, lead: m.lead, timeout: cfg.StoreTimeout, log: m.log, ops: &m.ops, ctx: m.ctx}
	}
	m.watch = newRecordWatch(m.cfg.Store, cfg.Node, cfg.RebuildStall, m)
	m.gone = newDisconnects(cfg.Conn, cfg.DisconnectEvents, m.log, m.ctx, m)
	m.journal = &journal{store: m.cfg.Store, node: cfg.Node, ttl: cfg.TTL, timeout: cfg.StoreTimeout, delay: cfg.QueueEntryDelay, lead: m.lead, out: m.out, log: m.log, ctx: m.ctx}
	m.journal.entryOf = func(r *request) (storedValue, time.Duration, bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return storedValue{}, 0, false // closing: nothing more is written
		}
		return m.journal.entryLocked(r)
	}
	m.journal.due = func(p *pool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.journal.tellDueLocked(p)
	}
	m.grants = &grantStore{store: m.cfg.Store, journal: m.journal, ttl: cfg.TTL, timeout: cfg.StoreTimeout, node: cfg.Node, instance: cfg.Instance, lead: m.lead, log: m.log}
	if cfg.DisconnectEvents != "" {
		m.grants.grace = cfg.DisconnectGrace
	}
	return m, nil
}

// Start counts the leases already in the Store (so grants made before a
// restart stay valid and are respected), then subscribes to the node's
// request subjects. It returns once the manager is serving. If it fails,
// it has undone everything it started (the watch, grants of restored queue
// entries, subscriptions), as Close does: the Manager cannot be started
// again.
func (m *Manager) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = m.Close()
		}
	}()
	if m.deltas != nil {
		// The stored pool changes apply before the lease records are
		// counted.
		d, ok, err := m.deltas.load(ctx)
		if err != nil {
			return err
		}
		if ok {
			m.mu.Lock()
			m.delta = d
			m.applyLocked(d.effective(m.cfg.Pools), true)
			m.mu.Unlock()
			if !d.empty() {
				m.log.Info("runtime pool changes applied over the configured pools", "set", d.Set, "rates", d.Rates, "removed", d.Removed)
			}
		}
	}
	if m.counts != nil {
		// The counts carry on from the stored ones: read before the
		// rebuild, which may publish events.
		if err := m.counts.load(ctx); err != nil {
			return err
		}
		m.counts.start() // Close stops it
	}
	// The budgets' windows, before the records' reservations are counted.
	if err := m.budgets.load(ctx, m.pools); err != nil {
		return err
	}
	// Every record in the store is counted before any request is served.
	if err := m.watch.start(ctx, m.ctx); err != nil {
		return err
	}

	handlers := map[string]answerer{
		lease.Subject(m.cfg.Prefix, m.cfg.Node, "*", lease.VerbAcquire): m.handleAcquire,
		lease.Subject(m.cfg.Prefix, m.cfg.Node, "*", lease.VerbRenew):   m.handleRenew,
		lease.Subject(m.cfg.Prefix, m.cfg.Node, "*", lease.VerbRelease): m.handleRelease,
		lease.Subject(m.cfg.Prefix, m.cfg.Node, "*", lease.VerbCancel):  m.handleCancel,
	}
	for subj, h := range handlers {
		sub, err := m.out.subscribe(subj, m.out.serve(h))
		if err != nil {
			return err
		}
		// A burst of requests must queue in the client, not be dropped as
		// a slow consumer.
		_ = sub.SetPendingLimits(1<<20, 1<<30)
	}
	if err := m.gone.subscribe(m.out); err != nil {
		m.out.unsubscribe()
		return err
	}
	d, err := newDiscovery(m.cfg, m.out, m)
	if err != nil {
		m.out.unsubscribe()
		return err
	}
	m.disc = d
	if err := d.subscribe(); err != nil {
		m.out.unsubscribe()
		return err
	}
	d.start(m.ctx) // Close waits for it
	if err := m.cfg.Conn.FlushTimeout(m.cfg.StoreTimeout); err != nil {
		return fmt.Errorf("lease: subscribe: %w", err)
	}
	m.mu.Lock()
	restored := len(m.leases.byKey)
	m.mu.Unlock()
	m.log.Info("lease manager serving", "prefix", m.cfg.Prefix, "pools", len(m.pools), "leases_restored", restored, "fast_release", m.cfg.DisconnectEvents != "")
	return nil
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
	m.gone.closeLocked()
	m.mu.Unlock()

	m.out.unsubscribe()
	m.cancel()
	m.out.flush()

	// Queued requests stay queued: their entries are in the store, and the
	// next manager for this node restores them in order. Their clients keep
	// polling with the same request id.
	m.mu.Lock()
	for _, p := range m.pools {
		m.rates.stopLocked(p)
		if p.entryTimer != nil {
			p.entryTimer.Stop() // what it would tell, a successor restores
			p.entryTimer = nil
		}
		for _, r := range p.waiting {
			r.stopTimer()
		}
	}
	m.mu.Unlock()

	m.ops.Wait()
	if m.disc != nil {
		m.disc.wait() // the history's sampling, which ends with m.ctx
	}
	m.gone.wait() // the questions end with m.ctx; frees that fire now do nothing
	err := m.watch.stop()
	m.journal.wait()                         // after the watch: restoring the queue may drop entries
	m.out.flushEvents()                      // after the last event
	_ = m.cfg.Conn.FlushTimeout(time.Second) // bounded: a partition must not hold Close
	if m.counts != nil {
		m.counts.close() // after the last event too: a successor carries on from every count
	}
	m.mu.Lock()
	ps := maps.Clone(m.pools)
	m.mu.Unlock()
	m.budgets.close(ps) // after the last settlement
	return err
}

// Leases returns a copy of every live lease record of this node, without
// their secrets.
func (m *Manager) Leases() []lease.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]lease.Record, 0, len(m.leases.byKey))
	for _, h := range m.leases.byKey {
		out = append(out, h.rec.Public())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}
