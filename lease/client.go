package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// Client asks one node's lease manager for slots. It is safe for concurrent
// use; one Client serves any number of leases.
type Client struct {
	nc             *nats.Conn
	node           string
	prefix         string
	holder         string
	requestTimeout time.Duration
	pollInterval   time.Duration
	noManagerWait  time.Duration
	tracing        tracing

	mu      sync.Mutex
	inbox   string // acquire replies arrive on <inbox>.<request id>
	sub     *nats.Subscription
	waiters map[string]chan *nats.Msg
	closed  bool

	live liveness // pings for the leases with fast release (liveness.go)
	wake wake     // renew now: a reconnect, a manager's stop notice (wake.go)
	// stops pokes a grouped lease's heartbeat when a stop_requested event
	// names it (groupstop.go).
	stops stopWatch

	cluster *Client // the cluster pools' client (acquireall.go); guarded by mu
}

// ClientOption configures a Client.
type ClientOption func(*Client) error

// WithPrefix sets the subject prefix (DefaultPrefix otherwise).
func WithPrefix(prefix string) ClientOption {
	return func(c *Client) error {
		if prefix == "" {
			return errors.New("lease: empty subject prefix")
		}
		c.prefix = prefix
		return nil
	}
}

// WithHolder names this client in leases and events (host:pid otherwise).
func WithHolder(holder string) ClientOption {
	return func(c *Client) error {
		if holder == "" || len(holder) > MaxHolderLen {
			return fmt.Errorf("lease: holder must be 1 to %d characters", MaxHolderLen)
		}
		c.holder = holder
		return nil
	}
}

// WithRequestTimeout bounds one request when the caller's context has no
// deadline, and is how long an acquire waits for a first answer before it
// sends again (5s otherwise). Renewals do not use it: an unanswered renewal
// is sent again after min(TTL/10, 500ms), until the lease's deadline.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: request timeout %v must be positive", d)
		}
		c.requestTimeout = d
		return nil
	}
}

// WithPollInterval is how often a queued acquire re-sends its request (same
// request id), so a grant whose reply was lost, or a manager restart, is
// noticed (5s otherwise).
func WithPollInterval(d time.Duration) ClientOption {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("lease: poll interval %v must be positive", d)
		}
		c.pollInterval = d
		return nil
	}
}

// WithNoManagerWait is how long a first acquire keeps asking while no lease
// manager serves the node (10s otherwise, twice the default LEADER_TTL, so a
// takeover costs a delay rather than an error) before it returns
// ErrUnavailable. A wrong node id shows up after this long.
func WithNoManagerWait(d time.Duration) ClientOption {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("lease: no-manager wait %v must not be negative", d)
		}
		c.noManagerWait = d
		return nil
	}
}

// WithServerOnlyDrops says that the connection goes straight to a NATS
// server on this host (leasemgr's embedded server, over loopback, where
// nothing between them can reset it) and that this program never closes it
// or makes it reconnect while it holds leases. Every drop of the
// connection is then the server's doing (it stopped, crashed, or closed
// the connection), which frees no lease (disconnect.go), so a lease with
// fast release is not given up when its connection drops, only by its
// silent and TTL clocks (liveness.go): a crash of leasemgr, too, costs no
// running work if it serves again in time. The executor sets it when it
// uses leasemgr's embedded server (no NATS_URL). Do not set it for a
// connection through a proxy or a load balancer.
func WithServerOnlyDrops() ClientOption {
	return func(c *Client) error {
		c.live.serverDrops = true
		return nil
	}
}

// NewClient returns a client for the lease manager of node.
func NewClient(nc *nats.Conn, node string, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, errors.New("lease: nil NATS connection")
	}
	if node == "" {
		return nil, errors.New("lease: empty node id")
	}
	host, _ := os.Hostname()
	c := &Client{
		nc:             nc,
		node:           node,
		prefix:         DefaultPrefix,
		holder:         host + ":" + strconv.Itoa(os.Getpid()),
		requestTimeout: 5 * time.Second,
		pollInterval:   5 * time.Second,
		noManagerWait:  10 * time.Second,
		waiters:        make(map[string]chan *nats.Msg),
		live:           newLiveness(nc),
		tracing:        defaultTracing,
	}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	c.inbox = nc.NewInbox()
	sub, err := nc.Subscribe(c.inbox+".*", c.dispatch)
	if err != nil {
		return nil, fmt.Errorf("lease: subscribe to replies: %w", err)
	}
	c.sub = sub
	registerClient(c)
	return c, nil
}

// Node returns the node this client acquires on.
func (c *Client) Node() string { return c.node }

// Holder returns the holder name sent with every acquire.
func (c *Client) Holder() string { return c.holder }

// Close stops the client's reply subscription. Leases it handed out keep
// heartbeating until released or lost.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	unregisterClient(c)
	c.live.close()
	c.wake.unhook(c.nc)
	c.stops.unhook()
	if c.cluster != nil {
		_ = c.cluster.Close()
	}
	return c.sub.Unsubscribe()
}

func (c *Client) dispatch(msg *nats.Msg) {
	id := msg.Subject[len(c.inbox)+1:]
	c.mu.Lock()
	ch := c.waiters[id]
	c.mu.Unlock()
	if ch == nil {
		return // an answer to an acquire that already ended
	}
	select {
	case ch <- msg:
	default: // the acquirer has a backlog of answers; a later poll repeats it
	}
}

type acquireOptions struct {
	requestID string
	secret    string
	priority  int
	tenant    string
	key       string
	units     int64 // usage.go
	noWait    bool
	group     string
	onGroup   string
	wait      time.Duration
	onQueued  func(position int)
	// onQueuedIn (AcquireAll only; acquireall.go)
	onQueuedIn func(Queued)
}

// AcquireOption configures one Acquire.
type AcquireOption func(*acquireOptions)

// WithRequestID sets the request id (a fresh unique id otherwise). Acquiring
// again with the same id after a lost reply or a crash returns the same lease.
func WithRequestID(id string) AcquireOption {
	return func(o *acquireOptions) { o.requestID = id }
}

// WithSecret sets the secret that proves holdership on renew, release and
// cancel (otherwise 128 fresh random bits from crypto/rand: secret.go).
// Give the same secret with the same request id when retrying from another
// process, and make it as hard to guess: anyone who sees the lease id in an
// event may try secrets, SecretBytes of randomness makes that hopeless.
func WithSecret(secret string) AcquireOption {
	return func(o *acquireOptions) { o.secret = secret }
}

// WithPriority sets the request's priority (pools with the priority policy):
// higher first, e.g. low -1, normal 0, high 1.
func WithPriority(p int) AcquireOption {
	return func(o *acquireOptions) { o.priority = p }
}

// WithTenant sets the request's tenant (pools with the fair policy share
// slots across tenants by weight).
func WithTenant(t string) AcquireOption {
	return func(o *acquireOptions) { o.tenant = t }
}

// WithKey sets the request's fairness key: pools with the fair policy
// share slots across the keys of a tenant, and POOL_KEY_LIMITS caps the
// slots in flight per key (at most MaxKeyLen bytes).
func WithKey(k string) AcquireOption {
	return func(o *acquireOptions) { o.key = k }
}

// NoWait makes Acquire a try-acquire: granted at once, or ErrWouldWait.
func NoWait() AcquireOption {
	return func(o *acquireOptions) { o.noWait = true }
}

// WithWait asks the manager to give up on the request if it is still queued
// after d; Acquire then returns ErrWaitExpired.
func WithWait(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.wait = d }
}

// OnQueued is called with the 1-based queue position when the request is
// queued, and again on every poll while it waits (on queues deeper than
// 1024 a poll's answer carries no position and OnQueued is not called).
func OnQueued(f func(position int)) AcquireOption {
	return func(o *acquireOptions) { o.onQueued = f }
}

// Acquire asks for slots in pool and waits, in the pool's queue order
// (FIFO, LIFO, priority or fair share), until they are granted or ctx
// ends. On ctx's end it withdraws the request; a grant that raced the
// withdrawal is given back by the manager. A pool may end the wait
// itself: ErrDropped from a full queue that drops its oldest waiter,
// ErrWouldWait from a pool without a queue.
//
// Holding is not guaranteed after Acquire returns: watch Done, and stop the
// work it guards when Done closes.
func (c *Client) Acquire(ctx context.Context, pool string, slots int64, opts ...AcquireOption) (l *Lease, err error) {
	ctx, span := natstrace.StartClient(ctx, c.tracing.tracer, natstrace.SpanAcquire, natstrace.Node(c.node), natstrace.Pool(pool), natstrace.Slots(slots))
	defer func() {
		if l != nil {
			natstrace.SetAttributes(span, natstrace.LeaseID(l.ID()), natstrace.Token(l.Token()))
		}
		natstrace.End(span, err)
	}()
	return c.acquire(ctx, pool, slots, opts...)
}

func (c *Client) acquire(ctx context.Context, pool string, slots int64, opts ...AcquireOption) (*Lease, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	// A fresh id has no history: every grant for it is written after the
	// first send below. A caller's id may have been granted before.
	ownID := o.requestID == ""
	if ownID {
		o.requestID = nuid.Next()
	}
	if err := rules.ValidRequestID(o.requestID); err != nil {
		return nil, errorf(CodeBadRequest, "%v", err)
	}
	if err := CheckGroup(o.group, o.onGroup); err != nil {
		return nil, err
	}
	if o.wait > MaxWaitMs*time.Millisecond {
		return nil, errorf(CodeBadRequest, "wait %v is longer than the protocol's 30 days (wait_ms %d)", o.wait, int64(MaxWaitMs))
	}
	waitMs := o.wait.Milliseconds()
	if o.wait > 0 && waitMs == 0 {
		waitMs = 1 // a wait under 1ms is a very short wait, not no limit
	}
	if o.secret == "" {
		o.secret = newSecret() // never from nuid, as the id is: secret.go
	}
	pollMs := c.pollInterval.Milliseconds()
	if pollMs > MaxPollMs {
		pollMs = 0 // polls rarer than the protocol's bound: promise nothing
	}
	req := AcquireRequest{RequestID: o.requestID, Holder: c.holder, Slots: slots, WaitMs: waitMs, Secret: o.secret,
		Priority: o.priority, Tenant: o.tenant, Key: o.key, NoWait: o.noWait, PollMs: pollMs, Units: o.units,
		Group: o.group, OnGroup: o.onGroup}
	// Each send names the connection it goes on (fast release).
	body := func() []byte {
		cn := c.live.identity()
		req.ConnServer, req.ConnID = cn.server, cn.id
		b, _ := json.Marshal(req) // plain strings and numbers: cannot fail
		return b
	}
	ch := make(chan *nats.Msg, 4)
	if err := c.register(o.requestID, ch); err != nil {
		return nil, err
	}
	defer c.unregister(o.requestID)

	subject := Subject(c.prefix, c.node, pool, VerbAcquire)
	reply := c.inbox + "." + o.requestID
	firstSent := time.Now()
	if err := c.publish(ctx, subject, reply, body()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	req.Resend = true // every later send re-sends this one
	queued, answered := false, false
	var noManagerSince time.Time
	timer := time.NewTimer(c.requestTimeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			c.withdraw(pool, o.requestID, o.secret)
			return nil, ctx.Err()
		case <-timer.C:
			// No answer in time: the request or its answer was lost, or the
			// manager restarted. The same request id makes re-sending safe.
			if err := c.publish(ctx, subject, reply, body()); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			timer.Reset(c.nextPoll(queued))
		case msg := <-ch:
			if isNoResponders(msg) {
				// Nobody serves the node right now: a takeover or restart in
				// progress, or a wrong node id. Ask again soon, for as long
				// as a takeover may take.
				if noManagerSince.IsZero() {
					noManagerSince = time.Now()
				}
				if !answered && time.Since(noManagerSince) >= c.noManagerWait {
					return nil, errorf(CodeUnavailable, "no lease manager answers on %s (asked for %v)", subject, c.noManagerWait.Round(time.Millisecond))
				}
				timer.Reset(min(c.nextPoll(queued), 250*time.Millisecond))
				continue
			}
			noManagerSince = time.Time{}
			answered = true
			var r Reply
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				return nil, errorf(CodeInternal, "malformed reply from the lease manager: %v", err)
			}
			switch r.Status {
			case StatusQueued:
				queued = true
				if o.onQueued != nil && r.Position > 0 { // 0: not computed (deep queue)
					o.onQueued(r.Position)
				}
				timer.Reset(c.pollInterval)
			case StatusGranted:
				if r.Lease == nil {
					return nil, errorf(CodeInternal, "grant without a lease from the lease manager")
				}
				c.live.serverStopping(r.ServerStopping)
				return c.newLease(ctx, *r.Lease, firstSent, !ownID && (queued || r.Existing))
			default:
				e := replyError(&r)
				if e.Code == CodeUnavailable {
					timer.Reset(c.nextPoll(queued)) // the store or manager is failing over; keep asking
					continue
				}
				return nil, e
			}
		}
	}
}

// publish sends an acquire carrying the trace context of ctx.
func (c *Client) publish(ctx context.Context, subject, reply string, body []byte) error {
	msg := &nats.Msg{Subject: subject, Reply: reply, Data: body}
	natstrace.InjectMsg(ctx, c.tracing.prop, msg)
	return c.nc.PublishMsg(msg)
}

func (c *Client) nextPoll(queued bool) time.Duration {
	if queued {
		return c.pollInterval
	}
	return c.requestTimeout
}

func (c *Client) register(id string, ch chan *nats.Msg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("lease: client closed")
	}
	if _, dup := c.waiters[id]; dup {
		return errorf(CodeConflict, "request id %q is already being acquired by this client", id)
	}
	c.waiters[id] = ch
	return nil
}

func (c *Client) unregister(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// withdraw cancels an acquire whose caller gave up. It runs on a fresh,
// bounded context: the caller's has already ended. If the cancel is lost,
// a grant nobody heartbeats expires after its TTL.
func (c *Client) withdraw(pool, id, secret string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.requestTimeout)
	defer cancel()
	_, _ = c.request(ctx, Subject(c.prefix, c.node, pool, VerbCancel), CancelRequest{RequestID: id, Holder: c.holder, Secret: secret})
}

// newLease starts the heartbeat of a granted lease. The holder's deadline
// must start no later than the manager's record did, so it is measured from
// a request sent before the record was written: the first acquire, when the
// grant cannot be older than it (the request id was made by this call, so
// nothing was granted for it before it was sent, queued or not), or when it
// was granted to this very request; otherwise (a caller's request id that was
// queued or answered from an earlier grant, or a grant so late that little
// of the TTL is left) a renewal sent now.
func (c *Client) newLease(ctx context.Context, rec Record, firstSent time.Time, confirm bool) (*Lease, error) {
	l := &Lease{c: c, rec: rec, done: make(chan struct{}), stop: make(chan struct{}), hbDone: make(chan struct{}), tctx: context.WithoutCancel(ctx),
		asked: make(chan struct{}), poke: make(chan struct{}, 1)}
	base := firstSent
	if confirm || time.Since(firstSent) > rec.TTL()/3 {
		// A confirmation later than the TTL less the margin would start
		// a deadline that has already passed.
		cctx, cancel := context.WithTimeout(ctx, rec.TTL()-margin(rec.TTL()))
		sent, err := l.confirm(cctx)
		cancel()
		if err != nil {
			c.withdraw(rec.Pool, rec.ID, rec.Secret)
			return nil, fmt.Errorf("lease: confirming the grant: %w", err)
		}
		base = sent
	}
	l.deadline = base.Add(rec.TTL() - margin(rec.TTL()))
	c.hookWake()
	c.watchStops(l)
	if rec.DisconnectGraceMs > 0 {
		if err := l.bindLive(ctx); err != nil {
			c.unwatchStops(l)
			c.withdraw(rec.Pool, rec.ID, rec.Secret)
			return nil, err
		}
	}
	go l.heartbeat()
	return l, nil
}

// bindLive starts the pings of a lease with fast release and has the
// server answer one on the lease's connection before the holder relies on
// it. A lease bound to a connection that has been replaced meanwhile (a
// reconnect while it was granted), or whose connection does not answer
// (it dropped as the grant came, and the client has not noticed yet), is
// moved to the current one first. Before, such a lease was relied on at
// once and then lost by the dropped clock, counted from a PING answered
// long before the grant (the fault suite: a lease granted just as its
// server was killed, lost 0.2-0.4 s later).
func (l *Lease) bindLive(ctx context.Context) error {
	l.grace = time.Duration(l.rec.DisconnectGraceMs) * time.Millisecond
	l.bound = recordConn(&l.rec)
	l.c.live.join(l.grace)
	ttl := l.rec.TTL()
	for range 3 {
		asked := time.Now()
		if l.bound == l.c.live.identity() {
			l.c.live.ping(l.grace / 2)
		}
		// An unbound lease (a move on a lame duck's connection: lameduck.go)
		// has no connection to confirm: its TTL alone holds it.
		answered := l.c.live.serverDrops || !l.bound.known() || !l.c.live.lastAnswered(l.bound).Before(asked)
		if answered && time.Now().Before(l.Deadline()) {
			return nil
		}
		sent, r, err := l.move(ctx)
		if err != nil {
			break
		}
		l.deadline = sent.Add(ttl - margin(ttl))
		if r != nil && r.ConnServer != "" {
			l.bound = recordConn(r)
		}
	}
	l.c.live.leave()
	return errorf(CodeUnavailable, "lease: the connection to the NATS server could not be confirmed for the granted lease (fast release); acquire again")
}

// margin is how much earlier than the manager a holder gives up its lease.
func margin(ttl time.Duration) time.Duration { return ttl / 10 }

// Stats returns the node's pools.
func (c *Client) Stats(ctx context.Context) ([]PoolStats, error) {
	r, err := c.statsRequest(ctx)
	if err != nil {
		return nil, err
	}
	return r.Pools, nil
}

// NodePools returns the node's pools with what its stats reply says beside
// them (ServedBy, Warnings, ClusterPools); Cluster is left nil.
func (c *Client) NodePools(ctx context.Context) (NodePools, error) {
	r, err := c.statsRequest(ctx)
	if err != nil {
		return NodePools{}, err
	}
	return NodePools{Node: c.node, Pools: r.Pools, ServedBy: r.ServedBy, Warnings: r.Warnings, ClusterPools: r.ClusterPools}, nil
}

// statsRequest asks the node's stats, waiting at most the request timeout
// (WithRequestTimeout) even when ctx allows longer: a question answered by
// nobody (a manager that took it and then stood down in a takeover) is
// lost, and asking again is safe. AcquireAll's callers wait as long as a
// set takes; with ctx's deadline alone, one lost stats request held their
// AcquireAll until that deadline.
func (c *Client) statsRequest(ctx context.Context) (*Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	return c.request(ctx, StatsSubject(c.prefix, c.node), struct{}{})
}

// Resize changes the node's pools at runtime and returns them afterwards.
func (c *Client) Resize(ctx context.Context, req ResizeRequest) ([]PoolStats, error) {
	r, err := c.request(ctx, ResizeSubject(c.prefix, c.node), req)
	if err != nil {
		return nil, err
	}
	return r.Pools, nil
}

// request sends one request and decodes its reply; an error reply comes back
// as *Error, a transport failure wrapped with ErrUnavailable.
func (c *Client) request(ctx context.Context, subject string, body any) (*Reply, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.requestTimeout)
		defer cancel()
	}
	req := &nats.Msg{Subject: subject, Data: data}
	natstrace.InjectMsg(ctx, c.tracing.prop, req)
	msg, err := c.nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, errorf(CodeUnavailable, "no lease manager answers on %s", subject)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, errorf(CodeInternal, "malformed reply from the lease manager: %v", err)
	}
	if r.Status == StatusError {
		return nil, replyError(&r)
	}
	return &r, nil
}

func replyError(r *Reply) *Error {
	if r.Error == nil || r.Error.Code == "" {
		return errorf(CodeInternal, "reply with status %q and no error", r.Status)
	}
	return r.Error
}

func isNoResponders(msg *nats.Msg) bool {
	return len(msg.Data) == 0 && msg.Header.Get("Status") == "503"
}
