package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// Hold is one lease as its holder saw it: from the moment Acquire returned
// it until the holder stopped relying on it.
type Hold struct {
	Executor   string
	Node, Pool string
	Slots      int64
	LeaseID    string
	Token      uint64
	Start, End time.Time
	Outcome    HoldOutcome
	Err        string // the loss, if lost
	// Dropped: lost by fast release's rule for a dropped connection (the
	// lease could not move to a new connection within the grace;
	// docs/guarantees.md 2.1), not by the TTL.
	Dropped bool
}

// HoldOutcome says how a hold ended.
type HoldOutcome string

const (
	HoldReleased HoldOutcome = "released" // the holder released it
	HoldLost     HoldOutcome = "lost"     // Done closed first
	HoldCrashed  HoldOutcome = "crashed"  // the executor was killed while holding; End is when Done closed
	HoldOpen     HoldOutcome = "open"     // still held when the record was taken
)

// Call is one Acquire.
type Call struct {
	Executor   string
	Node, Pool string
	RequestID  string
	Start      time.Time
	Bound      time.Duration // the Acquire's context timeout
	End        time.Time     // zero while in flight
	Outcome    string        // "granted", "timeout", "cancelled" or an error code
}

// NetFault is a fault on one client's network path.
type NetFault struct {
	Who        string // executor or candidate id
	Node       string // the candidate's node ("" for executors)
	Kind       string // "cut", "blackhole", "crash"
	Start, End time.Time
}

// Recorder collects what executors report. Executors call it; the auditor
// reads it after the run.
type Recorder struct {
	mu       sync.Mutex
	holds    []*Hold
	calls    []*Call
	netFault []*NetFault
}

func (r *Recorder) startCall(c *Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *Recorder) endCall(c *Call, outcome string) {
	r.mu.Lock()
	c.End, c.Outcome = time.Now(), outcome
	r.mu.Unlock()
}

func (r *Recorder) addHold(h *Hold) {
	r.mu.Lock()
	r.holds = append(r.holds, h)
	r.mu.Unlock()
}

func (r *Recorder) endHold(h *Hold, end time.Time, outcome HoldOutcome, err error) {
	r.mu.Lock()
	h.End, h.Outcome = end, outcome
	if err != nil {
		h.Err = err.Error()
	}
	r.mu.Unlock()
}

// AddNetFault records a fault on who's network path; end it with the
// returned function (a no-op for instantaneous faults).
func (r *Recorder) AddNetFault(who, node, kind string, start time.Time) func(time.Time) {
	f := &NetFault{Who: who, Node: node, Kind: kind, Start: start, End: start}
	r.mu.Lock()
	r.netFault = append(r.netFault, f)
	r.mu.Unlock()
	return func(end time.Time) {
		r.mu.Lock()
		f.End = end
		r.mu.Unlock()
	}
}

// Overdue returns the in-flight calls that ran grace longer than their
// bound at now: hangs.
func (r *Recorder) Overdue(now time.Time, grace time.Duration) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Call
	for _, c := range r.calls {
		if c.End.IsZero() && now.Sub(c.Start) > c.Bound+grace {
			out = append(out, *c)
		}
	}
	return out
}

// Snapshot returns copies of everything recorded, holds sorted by start.
func (r *Recorder) Snapshot() (holds []Hold, calls []Call, faults []NetFault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.holds {
		hh := *h
		if hh.End.IsZero() {
			hh.Outcome = HoldOpen
		}
		holds = append(holds, hh)
	}
	for _, c := range r.calls {
		calls = append(calls, *c)
	}
	for _, f := range r.netFault {
		faults = append(faults, *f)
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].Start.Before(holds[j].Start) })
	return holds, calls, faults
}

// ExecutorConfig configures one executor.
type ExecutorConfig struct {
	Settings
	Cluster    *Cluster
	ID         string
	Node, Pool string
	MaxSlots   int64 // slots asked per acquire: 1..MaxSlots
	Upstream   int   // preferred server
	Seed       uint64
	Recorder   *Recorder
	// MaxWait bounds each Acquire (a random bound in [MaxWait/5, MaxWait]);
	// MaxHold bounds each hold (random in [0, MaxHold]).
	MaxWait, MaxHold time.Duration
	// LongHolds is the share (0..1) of holds that last longer instead, up to
	// LongHold: long enough to need renewals across faults.
	LongHolds float64
	LongHold  time.Duration
}

// Executor loops acquire → hold → release on its own connection through its
// own proxy, and reports every call and hold. It can be killed while
// holding (its lease is never released, its connection drops), after which
// it restarts as a new process would: new connection, new client.
type Executor struct {
	cfg   ExecutorConfig
	rng   *rand.Rand
	crash chan chan struct{} // a kill request; the reply closes once handled

	mu    sync.Mutex
	proxy *Proxy     // guarded by mu: replaced on restart
	nc    *nats.Conn // guarded by mu: the current incarnation's connection
	incar int
}

// NewExecutor prepares an executor; Run runs it.
func NewExecutor(cfg ExecutorConfig) *Executor {
	cfg.defaults()
	if cfg.MaxSlots < 1 {
		cfg.MaxSlots = 1
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 3 * time.Second
	}
	if cfg.MaxHold == 0 {
		cfg.MaxHold = 2 * time.Second
	}
	return &Executor{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), crash: make(chan chan struct{})}
}

// ID returns the executor's id.
func (e *Executor) ID() string { return e.cfg.ID }

// Proxy returns the proxy of the current incarnation (nil between them).
func (e *Executor) Proxy() *Proxy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proxy
}

// ConnIdentity names the current incarnation's connection as its leases
// are bound to it (fast release): its server's id and its client id.
func (e *Executor) ConnIdentity() (server string, id uint64, ok bool) {
	e.mu.Lock()
	nc := e.nc
	e.mu.Unlock()
	if nc == nil {
		return "", 0, false
	}
	id, err := nc.GetClientID()
	server = nc.ConnectedServerId()
	return server, id, err == nil && server != ""
}

// Kill asks the executor to die if it holds a lease now; it reports
// whether it did. It returns once the kill took effect.
func (e *Executor) Kill(ctx context.Context) bool {
	reply := make(chan struct{})
	select {
	case e.crash <- reply:
	case <-ctx.Done():
		return false
	case <-time.After(50 * time.Millisecond):
		return false // not holding right now
	}
	<-reply
	return true
}

// Run works until ctx ends, then releases what it holds and returns.
func (e *Executor) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := e.incarnation(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// incarnation is one executor process. It returns nil when killed, so Run
// starts the next one.
func (e *Executor) incarnation(ctx context.Context) error {
	e.mu.Lock()
	e.incar++
	holder := fmt.Sprintf("%s#%d", e.cfg.ID, e.incar)
	e.mu.Unlock()
	p, err := NewProxy(func() []string { return e.cfg.Cluster.LiveAddrs(e.cfg.Upstream) })
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.proxy = p
	e.mu.Unlock()
	nc, err := dial(ctx, p.URL(), holder, e.cfg.Cluster.Auth(config.RoleExecutor))
	if err != nil {
		p.Close()
		return err
	}
	e.mu.Lock()
	e.nc = nc
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.nc = nil
		e.mu.Unlock()
		nc.Close()
		p.Close()
	}()
	c, err := lease.NewClient(nc, e.cfg.Node, lease.WithPrefix(e.cfg.Prefix), lease.WithHolder(holder),
		lease.WithRequestTimeout(e.cfg.RequestTimeout), lease.WithPollInterval(e.cfg.PollInterval))
	if err != nil {
		return err
	}
	defer c.Close()
	seq := 0
	for ctx.Err() == nil {
		seq++
		killed, err := e.cycle(ctx, c, nc, p, holder, seq)
		if err != nil {
			return err
		}
		if killed {
			return nil
		}
		// A short pause between cycles, as real work has.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(e.rng.Int64N(int64(50 * time.Millisecond)))):
		}
	}
	return nil
}

// cycle is one acquire → hold → release. It reports whether the executor
// was killed during it.
func (e *Executor) cycle(ctx context.Context, c *lease.Client, nc *nats.Conn, p *Proxy, holder string, seq int) (bool, error) {
	cfg := e.cfg
	slots := 1 + e.rng.Int64N(cfg.MaxSlots)
	bound := cfg.MaxWait/5 + time.Duration(e.rng.Int64N(int64(cfg.MaxWait-cfg.MaxWait/5)+1))
	hold := time.Duration(e.rng.Int64N(int64(cfg.MaxHold) + 1))
	if cfg.LongHold > cfg.MaxHold && e.rng.Float64() < cfg.LongHolds {
		hold = cfg.MaxHold + time.Duration(e.rng.Int64N(int64(cfg.LongHold-cfg.MaxHold)+1))
	}
	id := fmt.Sprintf("%s-%d", holder, seq)
	id = sanitizeID(id)
	call := &Call{Executor: holder, Node: cfg.Node, Pool: cfg.Pool, RequestID: id, Start: time.Now(), Bound: bound}
	cfg.Recorder.startCall(call)
	actx, cancel := context.WithTimeout(ctx, bound)
	l, err := c.Acquire(actx, cfg.Pool, slots, lease.WithRequestID(id), lease.WithWait(bound))
	cancel()
	if err != nil {
		cfg.Recorder.endCall(call, outcomeOf(ctx, err))
		return false, nil
	}
	h := &Hold{Executor: holder, Node: cfg.Node, Pool: cfg.Pool, Slots: l.Slots(), LeaseID: l.ID(), Token: l.Token(), Start: time.Now()}
	cfg.Recorder.endCall(call, "granted")
	cfg.Recorder.addHold(h)
	timer := time.NewTimer(hold)
	defer timer.Stop()
	select {
	case <-timer.C:
		cfg.Recorder.endHold(h, time.Now(), HoldReleased, nil)
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Release(rctx)
		rcancel()
	case <-ctx.Done():
		cfg.Recorder.endHold(h, time.Now(), HoldReleased, nil)
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Release(rctx)
		rcancel()
	case <-l.Done():
		lost := time.Now() // when the holder stopped relying on it
		h.Dropped = errors.Is(l.Err(), lease.ErrConnectionDropped)
		cfg.Recorder.endHold(h, lost, HoldLost, l.Err())
		// As an executor would on its way out: harmless if the record is
		// gone, and it frees the slots at once if only we lost touch.
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Release(rctx)
		rcancel()
	case reply := <-e.crash:
		// SIGKILL: the process is gone, and with it its connections. The
		// record stays until its TTL lapses. For the audit the hold lasts
		// until the holder's own deadline: work guarded by the lease could
		// outlive the executor that far and no further.
		p.Close()
		nc.Close()
		close(reply)
		<-l.Done()
		cfg.Recorder.endHold(h, time.Now(), HoldCrashed, l.Err())
		return true, nil
	}
	return false, nil
}

func outcomeOf(ctx context.Context, err error) string {
	var le *lease.Error
	switch {
	case errors.As(err, &le):
		return string(le.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case ctx.Err() != nil:
		return "cancelled"
	default:
		return "error: " + err.Error()
	}
}

// sanitizeID keeps request ids inside [A-Za-z0-9_=-].
func sanitizeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '=':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
