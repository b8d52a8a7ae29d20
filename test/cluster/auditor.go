package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/natsconn"

	"github.com/slotlease/slotlease/lease"
)

// The auditor checks lease safety from the outside. It shares no code with
// the manager's accounting: it reads the lease and leadership buckets with
// its own nats.go watchers (not the jetstream package's), the event stream
// with its own consumer, and what executors report about their own leases,
// and it decodes records with its own struct. It is told each pool's true
// capacity, not what the managers were configured with.
//
// Everything it observes is kept with the server's timestamp of the write
// (the JetStream message time), so the analysis after the run sees the
// store's own order of events, not the auditor's delivery delays.

// Observation is one KV entry as the auditor's watch delivered it.
type Observation struct {
	Key  string
	Rev  uint64
	Op   jetstream.KeyValueOp
	TS   time.Time // the server's time of the write (or of the expiry marker)
	Data []byte
	// Expired marks the server's marker for a TTL that lapsed (as opposed
	// to a client's delete or purge).
	Expired bool
	// TTL is the per-message TTL the value was stored with (its Nats-TTL
	// header); 0 for none.
	TTL time.Duration
}

// EventObservation is one lease event from the event stream.
type EventObservation struct {
	Subject string
	Seq     uint64
	TS      time.Time // stored in the event stream at
	Event   lease.Event
}

// Auditor watches a run. Start it before anything is granted.
type Auditor struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	feeds  []*feed // one per watch, for CatchUp
	probe  *storeProbe

	mu      sync.Mutex
	leases  []Observation
	leaders []Observation
	pools   []Observation
	events  []EventObservation
	errs    []string
}

// StartAuditor connects to url (directly, not through a proxy: the auditor
// is not under test) and starts its watches. The buckets and the event
// stream must exist.
func StartAuditor(ctx context.Context, url string, auth natsconn.Auth, prefix string) (*Auditor, error) {
	nc, err := dial(ctx, url, "auditor", auth)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	a := &Auditor{nc: nc, cancel: cancel}
	// Each watch is an ordered consumer on the bucket's stream read with
	// short heartbeats, so that after a server kill it resumes within a
	// second or so. Entries overwritten before delivery (the bucket keeps
	// one revision per key) are not seen: the report counts the holds
	// whose records the auditor saw.
	for _, b := range []struct {
		bucket string
		into   *[]Observation
	}{
		{sljs.NamesFor(prefix).Leases, &a.leases},
		{sljs.NamesFor(prefix).Leaders, &a.leaders},
		{sljs.NamesFor(prefix).Pools, &a.pools},
	} {
		subjPrefix := "$KV." + b.bucket + "."
		err := a.consume(ctx, actx, "KV_"+b.bucket, subjPrefix+">", func(msg jetstream.Msg, md *jetstream.MsgMetadata) {
			o := Observation{Key: strings.TrimPrefix(msg.Subject(), subjPrefix), Rev: md.Sequence.Stream, TS: md.Timestamp, Data: msg.Data(), Op: jetstream.KeyValuePut}
			h := msg.Headers()
			o.TTL = storedTTL(h.Get("Nats-TTL"))
			switch {
			case h.Get("Nats-Marker-Reason") != "":
				o.Op, o.Expired = jetstream.KeyValuePurge, h.Get("Nats-Marker-Reason") == "MaxAge"
			case h.Get("KV-Operation") == "DEL":
				o.Op = jetstream.KeyValueDelete
			case h.Get("KV-Operation") == "PURGE":
				o.Op = jetstream.KeyValuePurge
			}
			a.mu.Lock()
			*b.into = append(*b.into, o)
			a.mu.Unlock()
		})
		if err != nil {
			a.Stop()
			return nil, fmt.Errorf("auditor: watch %s: %w", b.bucket, err)
		}
	}
	err = a.consume(ctx, actx, sljs.NamesFor(prefix).Events, prefix+".events.>", func(msg jetstream.Msg, md *jetstream.MsgMetadata) {
		evs, err := lease.DecodeEvents(msg.Data())
		if err != nil {
			a.mu.Lock()
			a.errs = append(a.errs, fmt.Sprintf("undecodable events on %s: %v", msg.Subject(), err))
			a.mu.Unlock()
			return
		}
		a.mu.Lock()
		for _, ev := range evs {
			a.events = append(a.events, EventObservation{Subject: msg.Subject(), Event: ev, Seq: md.Sequence.Stream, TS: md.Timestamp})
		}
		a.mu.Unlock()
	})
	if err != nil {
		a.Stop()
		return nil, fmt.Errorf("auditor: event stream: %w", err)
	}
	if a.probe, err = startStoreProbe(ctx, nc, prefix); err != nil {
		a.Stop()
		return nil, fmt.Errorf("auditor: %w", err)
	}
	return a, nil
}

// consume delivers every message of stream on filter, in order, to fn from
// one goroutine, until actx ends. When the ordered consumer gives up (its
// resets failed while the cluster was electing leaders), a new one resumes
// after the last message delivered.
func (a *Auditor) consume(ctx, actx context.Context, stream, filter string, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	js, err := jetstream.New(a.nc)
	if err != nil {
		return err
	}
	open := func(ctx context.Context, after uint64) (jetstream.MessagesContext, error) {
		// One reset attempt: when it fails (no meta leader yet), the loop
		// below retries every 250ms instead of nats.go's growing backoff.
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, MaxResetAttempts: 1}
		if after > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
		}
		cons, err := js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			return nil, err
		}
		return cons.Messages(jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(500*time.Millisecond))
	}
	msgs, err := open(ctx, 0)
	if err != nil {
		return err
	}
	var mu sync.Mutex // guards msgs between the two goroutines
	f := &feed{stream: stream, filter: filter, restart: func() {
		mu.Lock()
		msgs.Stop() // the loop below starts over after the last message
		mu.Unlock()
	}}
	a.feeds = append(a.feeds, f)
	a.wg.Go(func() {
		<-actx.Done()
		mu.Lock()
		msgs.Stop()
		mu.Unlock()
	})
	a.wg.Go(func() {
		var last uint64
		for {
			mu.Lock()
			it := msgs
			mu.Unlock()
			msg, err := it.Next()
			if actx.Err() != nil {
				return
			}
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					continue // a missed heartbeat: the ordered consumer resets itself
				}
				// The iterator gave up: start over after the last message.
				for actx.Err() == nil {
					octx, cancel := context.WithTimeout(actx, 5*time.Second)
					next, err := open(octx, last)
					cancel()
					if err == nil {
						mu.Lock()
						if actx.Err() != nil {
							next.Stop()
						}
						msgs = next
						mu.Unlock()
						break
					}
					select {
					case <-actx.Done():
					case <-time.After(250 * time.Millisecond):
					}
				}
				continue
			}
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			last = md.Sequence.Stream
			fn(msg, md)
			f.delivered.Store(last)
		}
	})
	return nil
}

// feed is one of the auditor's watches, as CatchUp sees it.
type feed struct {
	stream, filter string
	delivered      atomic.Uint64 // the last stream sequence handed on
	restart        func()        // makes the watch start over after delivered
}

// CatchUp waits until every watch has delivered the last message its
// stream's leader holds for it, so the audit judges what was stored, not
// what a watch left on a lagging or stuck consumer had delivered by then
// (a leadership watch stuck after a server restart made a later leader's
// grants look like another's). A watch behind for a second is made to
// start over; one still behind when ctx ends is an error.
func (a *Auditor) CatchUp(ctx context.Context) error {
	for _, f := range a.feeds {
		want, err := streamLastSeq(ctx, a.nc, f.stream, f.filter)
		if err != nil {
			return fmt.Errorf("auditor: %s: %w", f.stream, err)
		}
		nudge := time.Now().Add(time.Second)
		for f.delivered.Load() < want {
			if time.Now().After(nudge) {
				f.restart()
				nudge = time.Now().Add(time.Second)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("auditor: the watch of %s (%s) delivered up to %d, the stream's leader holds %d: %w", f.stream, f.filter, f.delivered.Load(), want, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// streamLastSeq is the sequence of the stream's last message on filter as
// its leader has it (a message get, which only the leader answers); 0 when
// none.
func streamLastSeq(ctx context.Context, nc *nats.Conn, stream, filter string) (uint64, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": filter})
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+stream, req)
		cancel()
		if err == nil {
			var resp struct {
				Message *struct {
					Seq uint64 `json:"seq"`
				} `json:"message"`
				Error *struct {
					ErrCode     int    `json:"err_code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return 0, err
			}
			switch {
			case resp.Message != nil:
				return resp.Message.Seq, nil
			case resp.Error != nil && resp.Error.ErrCode == 10037: // no message found
				return 0, nil
			case resp.Error != nil:
				err = fmt.Errorf("%s (%d)", resp.Error.Description, resp.Error.ErrCode)
			}
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("the last sequence of %s on %s: %w", stream, filter, err)
		}
		time.Sleep(100 * time.Millisecond) // a leader election: ask again
	}
}

// Stop ends the watches and the store probe; the observations stay.
func (a *Auditor) Stop() {
	a.cancel()
	a.wg.Wait()
	if a.probe != nil {
		a.probe.stop()
	}
	a.nc.Close()
}

// StoreStalls returns the times longer than over in which the store took
// none of the probe's writes (storeprobe.go).
func (a *Auditor) StoreStalls(over time.Duration) []StoreStall {
	return storeStalls(a.probe.snapshot(), over)
}

// Observations returns copies of what the auditor saw so far.
func (a *Auditor) Observations() (leases, leaders []Observation, events []EventObservation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Observation(nil), a.leases...), append([]Observation(nil), a.leaders...), append([]EventObservation(nil), a.events...)
}

// PoolChanges returns the pool bucket's entries (runtime pool changes).
func (a *Auditor) PoolChanges() []Observation {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Observation(nil), a.pools...)
}

// Live returns the lease records and queue entries live in the auditor's
// view now: a drained run must leave neither.
func (a *Auditor) Live() (leases, queued []string) {
	obs, _, _ := a.Observations()
	last := map[string]Observation{}
	for _, o := range obs {
		last[o.Key] = o
	}
	for k, o := range last {
		if o.Op != jetstream.KeyValuePut {
			continue
		}
		var v storedRecord
		if json.Unmarshal(o.Data, &v) == nil && v.Queued {
			queued = append(queued, k)
		} else {
			leases = append(leases, k)
		}
	}
	sort.Strings(leases)
	sort.Strings(queued)
	return leases, queued
}

// storedRecord is the auditor's own reading of a lease bucket value: a
// lease record (docs/protocol.md section 3) or a queue entry (section 7).
type storedRecord struct {
	ID        string    `json:"id"`
	GrantedAt time.Time `json:"granted_at"`
	Node      string    `json:"node"`
	Pool      string    `json:"pool"`
	Slots     int64     `json:"slots"`
	Token     uint64    `json:"token"`
	TTLMs     int64     `json:"ttl_ms"`
	Manager   string    `json:"manager"`
	Queued    bool      `json:"queued"`
}

type leaderRecord struct {
	Instance string `json:"instance"`
}

// ServerFault is a window during which a NATS server was down or catching
// up: from its kill until the cluster was healthy again.
type ServerFault struct {
	Server     int
	Start, End time.Time
	// Led names the raft groups the server led when it was killed.
	Led []string
	// LeaseLeaderAt is when another server led the lease bucket's stream,
	// if this one led it.
	LeaseLeaderAt time.Time
}

// AuditInput is everything the analysis needs.
type AuditInput struct {
	Capacity   map[string]map[string]int64     // node -> pool -> true capacity
	Shadow     map[string]map[string]bool      // node -> pool -> in shadow mode (POOL_SHADOW): no capacity, no over-grant
	Rates      map[string]map[string]RateLimit // node -> pool -> start rate, for the pools that have one
	LeaseTTL   time.Duration
	Leases     []Observation
	Leaders    []Observation
	Events     []EventObservation
	Holds      []Hold
	Calls      []Call
	NetFaults  []NetFault
	Servers    []ServerFault
	Terms      []Term
	Overlaps   []string
	RunEnd     time.Time
	HangGrace  time.Duration // how long past its bound an Acquire may take
	StrictKill bool          // a server kill excuses no lost lease
	// StrictOrphans fails the run on over-grants that need an orphan
	// record (known problem 1 in docs/guarantees.md).
	StrictOrphans bool
	// LeaderTTL bounds a takeover: 2 x LeaderTTL + 1s.
	LeaderTTL time.Duration
	// StrictStalls fails the run on leases lost to a takeover stalled by a
	// connection reset of the new leader, or to a renewal refused although
	// the record lived (known problems 3 and 5).
	StrictStalls bool
	// Instances are the managers of the run. When set, every lease,
	// leadership and pool record must be one of theirs (checkWriters).
	Instances map[string]bool
	Pools     []Observation // the pool bucket's entries, for checkWriters
	// DisconnectGrace is the managers' fast release grace (unservedMove).
	DisconnectGrace time.Duration
	// StoreStalls are the times the auditor's store probe saw no write
	// acknowledged, Leaderless the times a bucket's stream had no leader:
	// outages long enough excuse a lost lease (outages.go).
	StoreStalls []StoreStall
	Leaderless  []Leaderless
}

// Report is the auditor's verdict.
type Report struct {
	Violations []string
	Notes      []string

	KVLeases     int // lease records (grants) seen in KV
	Holds        int // leases executors held
	HoldsCovered int // holds whose record the auditor saw
	Outcomes     map[string]int
	Lost         int
	LostExcused  map[string]int
	MaxKVInUse   map[string]int64 // node.pool -> most slots held at once, KV view
	MaxHeldInUse map[string]int64 // the same, holders' view
	// RateStarts counts the grants of each pool with a start rate, and
	// MaxRateUse is the most of its bound any window used (checkRates):
	// above 1 is a violation.
	RateStarts map[string]int
	MaxRateUse map[string]float64
	// OrphanOvergrants are KV-view over-grants that need a record nobody
	// ever held (known problem 1).
	OrphanOvergrants []string
	// StalledTakeovers are leases lost while their node had no serving
	// manager for longer than a takeover may take, right after a
	// candidate's connection was reset or partitioned (known problem 3).
	StalledTakeovers []string
	// RefusedRenewals are leases lost because the manager refused to renew
	// a record that was still stored (known problem 5).
	RefusedRenewals []string
	// LeakedQueueEntries are queue entries still stored after the drain
	// (known problem 4); filled in by the suite.
	LeakedQueueEntries []string
	LateGrants         int // grants stored after the granter's leadership ended, no one else leading
	LateGrantMax       time.Duration
	// LeaderUnverified counts grants written while the leadership watch
	// was blind (a gap in its deliveries, e.g. after a server kill).
	LeaderUnverified int
	GrantedEvents    int
	EventsVerified   int
	// ExpiryLags: for each record that expired, how long after its last
	// write + TTL the server's expiry marker came.
	ExpiryLags []time.Duration
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// kvLease is one lease as the KV records show it: from its grant's write
// until its record was deleted or expired.
type kvLease struct {
	Key        string
	ID         string // the lease id the record names: its key's, or another's after a handover
	Node, Pool string
	Slots      int64
	Token      uint64
	Instance   string
	Start      time.Time // the grant's write
	GrantedAt  time.Time // the granting manager's stamp (record granted_at)
	End        time.Time // the delete or expiry marker; RunEnd if still live
	EndKnown   bool      // false: still live at the end, or the end was missed
	LastPut    time.Time
	TTL        time.Duration
	// FromGrant: Start is the grant's own write. False when the watch
	// delivered a later renewal first (the grant was overwritten before
	// delivery, e.g. by the holder's confirming renewal): Start is late.
	FromGrant bool
}

type interval struct {
	start, end time.Time
	slots      int64
	what       string
}

const tsFormat = "15:04:05.000"

// Audit analyses a run. It is a pure function of its input.
func Audit(in AuditInput) *Report {
	r := &Report{Outcomes: map[string]int{}, LostExcused: map[string]int{}, MaxKVInUse: map[string]int64{}, MaxHeldInUse: map[string]int64{},
		RateStarts: map[string]int{}, MaxRateUse: map[string]float64{}}
	checkWriters(in, r)
	kv := buildKVLeases(in, r)
	r.KVLeases = len(kv)
	checkRates(in, kv, r)
	leaders := buildLeadership(in, r)

	// (a) slots held per pool never above capacity: KV view.
	//
	// An orphan is a grant record that nobody ever held or renewed: the
	// manager wrote it, lost the write's acknowledgement, and freed the
	// slots while the record stayed until its TTL (docs/guarantees.md,
	// known problem 1). Over-grants that need an orphan are reported apart,
	// and fail the run only with StrictOrphans; every other one fails it.
	heldTokens := map[uint64]bool{}
	for _, h := range in.Holds {
		heldTokens[h.Token] = true
	}
	byPool := map[string][]interval{}
	withoutOrphans := map[string][]interval{}
	for _, l := range kv {
		orphan := l.FromGrant && l.LastPut.Equal(l.Start) && !heldTokens[l.Token]
		what := fmt.Sprintf("%s token %d (%d slots, %s..%s)", l.Key, l.Token, l.Slots, l.Start.Format(tsFormat), l.End.Format(tsFormat))
		if orphan {
			what += " ORPHAN"
		} else {
			withoutOrphans[l.Node+"."+l.Pool] = append(withoutOrphans[l.Node+"."+l.Pool], interval{l.Start, l.End, l.Slots, what})
		}
		byPool[l.Node+"."+l.Pool] = append(byPool[l.Node+"."+l.Pool], interval{l.Start, l.End, l.Slots, what})
	}
	for pool, ivs := range byPool {
		capacity, ok := in.capacityOf(pool)
		if !ok {
			r.violate("KV: lease records in %s, a pool the run does not have", pool)
			continue
		}
		r.MaxKVInUse[pool] = sweep(withoutOrphans[pool], capacity, func(at time.Time, inUse int64, open []string) {
			r.violate("over-grant (KV view): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
		})
		sweep(ivs, capacity, func(at time.Time, inUse int64, open []string) {
			msg := fmt.Sprintf("over-grant (KV view, orphan record): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
			if !strings.Contains(msg, "ORPHAN") {
				return // reported above
			}
			r.OrphanOvergrants = append(r.OrphanOvergrants, msg)
			if in.StrictOrphans {
				r.Violations = append(r.Violations, msg)
			}
		})
	}

	// (a) the same from the holders' own view.
	r.Holds = len(in.Holds)
	held := map[string][]interval{}
	for _, h := range in.Holds {
		end := h.End
		if end.IsZero() {
			end = in.RunEnd
		}
		held[h.Node+"."+h.Pool] = append(held[h.Node+"."+h.Pool], interval{h.Start, end, h.Slots, fmt.Sprintf("%s lease %s token %d (%d slots, %s..%s, %s)", h.Executor, h.LeaseID, h.Token, h.Slots, h.Start.Format(tsFormat), end.Format(tsFormat), h.Outcome)})
	}
	for pool, ivs := range held {
		capacity, ok := in.capacityOf(pool)
		if !ok {
			r.violate("holders: leases in %s, a pool the run does not have", pool)
			continue
		}
		r.MaxHeldInUse[pool] = sweep(ivs, capacity, func(at time.Time, inUse int64, open []string) {
			r.violate("over-grant (holders' view): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
		})
	}

	// Each hold against its record: stored before the holder heard of it,
	// and gone only after the holder stopped relying on it.
	byToken := map[uint64]*kvLease{}
	for i := range kv {
		byToken[kv[i].Token] = &kv[i]
	}
	// Which lease each revision of the bucket was: a record names its
	// lease, which need not be its key's (a handover).
	seqLease := map[uint64]string{}
	for _, o := range in.Leases {
		seqLease[o.Rev] = o.Key
		var v storedRecord
		if o.Op == jetstream.KeyValuePut && json.Unmarshal(o.Data, &v) == nil {
			seqLease[o.Rev] = lease.RecordKey(v.Node, v.Pool, v.ID)
		}
	}
	for _, h := range in.Holds {
		key := lease.RecordKey(h.Node, h.Pool, h.LeaseID)
		l := byToken[h.Token]
		if l == nil {
			if k, seen := seqLease[h.Token]; seen && k != key {
				r.violate("%s holds lease %s with token %d, but revision %d of the bucket is %s", h.Executor, key, h.Token, h.Token, k)
			}
			continue
		}
		if l.ID != h.LeaseID || l.Node != h.Node || l.Pool != h.Pool {
			r.violate("%s holds lease %s with token %d, but that token is the record of %s.%s.%s at %s", h.Executor, key, h.Token, l.Node, l.Pool, l.ID, l.Key)
			continue
		}
		r.HoldsCovered++
		if l.FromGrant && h.Start.Before(l.Start) {
			r.violate("%s heard of lease %s token %d at %s, before its record was stored at %s", h.Executor, key, h.Token, h.Start.Format(tsFormat), l.Start.Format(tsFormat))
		}
		end := h.End
		if end.IsZero() {
			end = in.RunEnd
		}
		if l.EndKnown && end.After(l.End) {
			r.violate("%s relied on lease %s token %d until %s (%s), %v after its record was gone (%s)", h.Executor, key, h.Token, end.Format(tsFormat), h.Outcome, end.Sub(l.End).Round(time.Millisecond), l.End.Format(tsFormat))
		}
	}

	// Grants are stored only by the node's leader of the moment. Where the
	// leadership watch was blind, the auditor cannot tell who led.
	blind := blindWindows(in.Leaders)
	for _, l := range kv {
		if !l.FromGrant || len(in.Leaders) == 0 {
			continue
		}
		if inWindow(blind, l.Start) {
			r.LeaderUnverified++
			continue
		}
		terms := leaders[l.Node]
		var own, other *leaderTerm
		for i := range terms {
			t := &terms[i]
			if !t.start.After(l.Start) && (t.end.IsZero() || l.Start.Before(t.end)) {
				if t.instance == l.Instance {
					own = t
				} else {
					other = t
				}
			}
		}
		switch {
		case own != nil:
		case other != nil:
			r.violate("%s token %d was stored at %s by %s while %s led node %s (since %s)", l.Key, l.Token, l.Start.Format(tsFormat), l.Instance, other.instance, l.Node, other.start.Format(tsFormat))
		default:
			// Nobody led at that moment: the write of a manager whose
			// leadership had just lapsed. Harmless unless another leader
			// granted meanwhile, which the capacity checks would catch.
			r.LateGrants++
			var lastEnd time.Time
			for _, t := range terms {
				if t.instance == l.Instance && !t.end.IsZero() && !t.end.After(l.Start) && t.end.After(lastEnd) {
					lastEnd = t.end
				}
			}
			if !lastEnd.IsZero() {
				r.LateGrantMax = max(r.LateGrantMax, l.Start.Sub(lastEnd))
			}
		}
	}

	// Events: a granted event names a stored grant.
	for _, e := range in.Events {
		ev := e.Event
		if ev.Kind != lease.EventGranted {
			continue
		}
		r.GrantedEvents++
		key := lease.RecordKey(ev.Node, ev.Pool, ev.LeaseID)
		k, seen := seqLease[ev.Token]
		if !seen {
			continue
		}
		if k != key {
			r.violate("event: %s granted with token %d, but revision %d of the bucket is %s", key, ev.Token, ev.Token, k)
			continue
		}
		r.EventsVerified++
		if l := byToken[ev.Token]; l != nil && l.FromGrant && ev.Time.Before(l.Start) {
			r.violate("event: %s token %d granted at %s, before its record was stored at %s", key, ev.Token, ev.Time.Format(tsFormat), l.Start.Format(tsFormat))
		}
	}

	// (b) every waiter is granted, cancelled or given an error: none hangs.
	for _, c := range in.Calls {
		if c.End.IsZero() {
			r.Outcomes["hung"]++
			r.violate("acquire %s by %s on %s.%s hung: started %s with a %v bound, never returned", c.RequestID, c.Executor, c.Node, c.Pool, c.Start.Format(tsFormat), c.Bound)
			continue
		}
		if took := c.End.Sub(c.Start); took > c.Bound+in.HangGrace {
			r.violate("acquire %s by %s on %s.%s took %v, past its %v bound", c.RequestID, c.Executor, c.Node, c.Pool, took.Round(time.Millisecond), c.Bound)
		}
		r.Outcomes[c.Outcome]++
	}

	// (c) no lease is lost while its holder keeps renewing and can reach NATS.
	margin := in.LeaseTTL / 10
	for _, h := range in.Holds {
		if h.Outcome != HoldLost {
			continue
		}
		r.Lost++
		// The loss was decided by what happened since the last renewal the
		// holder could have counted on: at most TTL-margin before the end.
		from := h.End.Add(-(in.LeaseTTL - margin)).Add(-time.Second)
		if from.Before(h.Start) {
			from = h.Start.Add(-time.Second)
		}
		if why := excuse(in, h, from); why != "" {
			r.LostExcused[why]++
			continue
		}
		msg := fmt.Sprintf("lease lost while its holder could reach NATS: %s lease %s.%s.%s token %d held %s..%s: %s",
			h.Executor, h.Node, h.Pool, h.LeaseID, h.Token, h.Start.Format(tsFormat), h.End.Format(tsFormat), h.Err)
		// Known problem 5: the manager refused the renewal of a record
		// that was still stored (a retried renewal after a lost or late
		// acknowledgement).
		if l := byToken[h.Token]; l != nil && strings.Contains(h.Err, "expired before the renewal") && l.End.After(h.End.Add(100*time.Millisecond)) {
			r.RefusedRenewals = append(r.RefusedRenewals, fmt.Sprintf("%s; its record lived on until %s", msg, l.End.Format(tsFormat)))
			if !in.StrictStalls {
				continue
			}
		}
		if gap := stalledTakeover(in, h.Node, from, h.End); gap != "" {
			r.StalledTakeovers = append(r.StalledTakeovers, msg+"; "+gap)
			if !in.StrictStalls {
				continue
			}
		}
		r.violate("%s", msg)
	}

	for _, o := range in.Overlaps {
		r.violate("two managers served one node: %s", o)
	}
	return r
}

// excuse names the fault that may legitimately have cost h, or "".
func excuse(in AuditInput, h Hold, from time.Time) string {
	for _, f := range in.NetFaults {
		// Fast release's cost: a connection reset on the holder's path
		// looks to its server like the holder's own close, which frees
		// the lease a grace later; a holder that could not move the lease
		// to a new connection within 3/4 of the grace gives it up
		// (docs/guarantees.md 2.1). Any other drop (its server stopped,
		// restarted, stalled) can free nothing: a lease lost to it is a
		// failure.
		if h.Dropped && f.Kind == "cut" && (f.Who == h.Executor || strings.HasPrefix(h.Executor, f.Who+"#")) && !f.End.Before(from) && !f.Start.After(h.End) {
			return "fast release: holder's connection reset, lease not moved within the grace"
		}
	}
	for _, f := range in.NetFaults {
		// A reset connection is re-established at once: it must not cost
		// a lease. A partition may.
		if f.Kind == "cut" {
			continue
		}
		if (f.Who == h.Executor || strings.HasPrefix(h.Executor, f.Who+"#")) && !f.End.Before(from) && !f.Start.After(h.End) {
			return "holder's own " + f.Kind
		}
	}
	if why := unservedMove(in, h); why != "" {
		return why
	}
	if !in.StrictKill {
		for _, s := range in.Servers {
			if !s.End.Before(from) && !s.Start.After(h.End) {
				return "NATS server kill"
			}
		}
	}
	// No renewal can succeed while the store is out (outages.go).
	return storeOut(in, from, h.End)
}

// unservedMove names why a lease lost by fast release's dropped-connection
// clock could not have been moved: no manager served its node at any time
// in the last 3/4 of the grace before the loss, when the holder had to
// move it (lease/liveness.go), so nobody could answer the renewal that
// moves it. The holder cannot tell its server's stop from a reset on its
// path, which a serving manager would free the lease for, so it gives the
// lease up by its rule: the cost of fast release, as after a reset. ""
// when a term of the node overlaps that time, or when no term of the node
// is known.
func unservedMove(in AuditInput, h Hold) string {
	if !h.Dropped || in.DisconnectGrace <= 0 {
		return ""
	}
	from := h.End.Add(-(in.DisconnectGrace - in.DisconnectGrace/4))
	known := false
	for _, t := range in.Terms {
		if t.Node != h.Node {
			continue
		}
		known = true
		if t.Start.Before(h.End) && (t.End.IsZero() || t.End.After(from)) {
			return ""
		}
	}
	if !known {
		return ""
	}
	return "fast release: no manager served the node while the holder had to move its lease"
}

// stalledTakeover describes, if there was one, a time in [from, to] when
// node had no serving manager for longer than a takeover may take (2 x
// LeaderTTL + 1s), starting within a second of a reset or partition of one
// of the node's candidates: known problem 3.
func stalledTakeover(in AuditInput, node string, from, to time.Time) string {
	if in.LeaderTTL == 0 {
		return ""
	}
	limit := 2*in.LeaderTTL + time.Second
	var terms []Term
	for _, t := range in.Terms {
		if t.Node == node {
			terms = append(terms, t)
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].Start.Before(terms[j].Start) })
	// Walk the uncovered intervals.
	covered := time.Time{}
	for i, t := range terms {
		if i > 0 && t.Start.After(covered) {
			gapStart, gapEnd := covered, t.Start
			if gapEnd.Sub(gapStart) > limit && !gapEnd.Before(from) && !gapStart.After(to) {
				for _, f := range in.NetFaults {
					if f.Node == node && f.Kind != "crash" && !f.End.Add(time.Second).Before(gapStart) && !f.Start.After(gapEnd) {
						return fmt.Sprintf("%s had no serving manager from %s to %s (%v) after %s of %s at %s",
							node, gapStart.Format(tsFormat), gapEnd.Format(tsFormat), gapEnd.Sub(gapStart).Round(time.Millisecond), f.Kind, f.Who, f.Start.Format(tsFormat))
					}
				}
			}
		}
		end := t.End
		if end.IsZero() {
			end = in.RunEnd
		}
		if end.After(covered) {
			covered = end
		}
	}
	return ""
}

func capacityOf(c map[string]map[string]int64, nodePool string) (int64, bool) {
	node, pool, _ := strings.Cut(nodePool, ".")
	v, ok := c[node][pool]
	return v, ok
}

// capacityOf is the capacity the over-grant checks hold nodePool
// ("node.pool") to: its true capacity, or no bound for a shadow pool.
func (in *AuditInput) capacityOf(nodePool string) (int64, bool) {
	c, ok := capacityOf(in.Capacity, nodePool)
	if node, pool, _ := strings.Cut(nodePool, "."); ok && in.Shadow[node][pool] {
		c = math.MaxInt64
	}
	return c, ok
}

// sweep walks the intervals in time order (an end before a start at the
// same instant) and reports each moment the slots in use rise above
// capacity, once per episode. It returns the most slots in use at once.
func sweep(ivs []interval, capacity int64, over func(at time.Time, inUse int64, open []string)) int64 {
	type edge struct {
		at    time.Time
		delta int64
		idx   int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for i, iv := range ivs {
		edges = append(edges, edge{iv.start, iv.slots, i}, edge{iv.end, -iv.slots, i})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	var inUse, peak int64
	open := map[int]bool{}
	reported := false
	for _, e := range edges {
		inUse += e.delta
		if e.delta > 0 {
			open[e.idx] = true
		} else {
			delete(open, e.idx)
		}
		peak = max(peak, inUse)
		if inUse > capacity && !reported {
			reported = true
			var names []string
			for i := range open {
				names = append(names, ivs[i].what)
			}
			sort.Strings(names)
			over(e.at, inUse, names)
		}
		if inUse <= capacity {
			reported = false
		}
	}
	return peak
}

// buildKVLeases turns the lease bucket's entries into leases with their
// stored lifetimes.
func buildKVLeases(in AuditInput, r *Report) []kvLease {
	var out []kvLease
	open := map[string]*kvLease{}
	closeLease := func(l *kvLease, at time.Time, known bool) {
		l.End, l.EndKnown = at, known
		out = append(out, *l)
		delete(open, l.Key)
	}
	for _, o := range in.Leases {
		cur := open[o.Key]
		if o.Op != jetstream.KeyValuePut {
			if cur != nil {
				if o.Expired && cur.TTL > 0 {
					r.ExpiryLags = append(r.ExpiryLags, o.TS.Sub(cur.LastPut.Add(cur.TTL)))
				}
				closeLease(cur, o.TS, true)
			}
			continue
		}
		var v storedRecord
		if err := json.Unmarshal(o.Data, &v); err != nil {
			r.violate("KV: %s revision %d is not a lease record: %v", o.Key, o.Rev, err)
			continue
		}
		if v.Queued {
			if cur != nil {
				r.violate("KV: %s token %d was overwritten by a queue entry at %s", o.Key, cur.Token, o.TS.Format(tsFormat))
				closeLease(cur, o.TS, true)
			}
			continue
		}
		token := v.Token
		if token == 0 {
			token = o.Rev
		}
		if cur != nil {
			if cur.Token == token {
				cur.LastPut = o.TS
				continue
			}
			if v.Token == 0 && v.ID != cur.ID {
				// A handover: the next lease's grant replaced the
				// released one's record in one write, so the one ended
				// as the other began.
				closeLease(cur, o.TS, true)
				cur = nil
			}
		}
		if cur != nil {
			// The watch missed the record's end (a delete marker replaced
			// before delivery): it ended some time after its last write.
			// Take the earliest, so the capacity check cannot blame it.
			r.note("KV: %s token %d replaced by token %d without a delete seen; assuming it ended at its last write", o.Key, cur.Token, token)
			closeLease(cur, cur.LastPut, false)
		}
		if v.Token != 0 {
			// A renewal of a lease whose grant the watch did not deliver
			// (written and renewed before delivery): count it from here.
			r.note("KV: first write seen of %s token %d is a renewal at %s", o.Key, token, o.TS.Format(tsFormat))
		}
		open[o.Key] = &kvLease{Key: o.Key, ID: v.ID, Node: v.Node, Pool: v.Pool, Slots: v.Slots, Token: token, Instance: v.Manager, Start: o.TS, GrantedAt: v.GrantedAt, LastPut: o.TS, FromGrant: v.Token == 0,
			TTL: time.Duration(v.TTLMs) * time.Millisecond}
	}
	for _, l := range open {
		closeLease(l, in.RunEnd, false)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

type leaderTerm struct {
	instance   string
	start, end time.Time // end zero: still leading
	lastPut    time.Time
}

// buildLeadership turns the leadership bucket's entries into terms per
// node, from the key's creation until its delete or expiry. Where the watch
// missed the change of hands (the old key's expiry and the new key's
// creation were overwritten before delivery), both terms are stretched over
// the unseen interval, so neither instance's grants in it are blamed.
func buildLeadership(in AuditInput, r *Report) map[string][]leaderTerm {
	out := map[string][]leaderTerm{}
	open := map[string]*leaderTerm{}
	for _, o := range in.Leaders {
		cur := open[o.Key]
		if o.Op != jetstream.KeyValuePut {
			if cur != nil {
				cur.end = o.TS
				out[o.Key] = append(out[o.Key], *cur)
				delete(open, o.Key)
			}
			continue
		}
		var v leaderRecord
		if err := json.Unmarshal(o.Data, &v); err != nil {
			r.violate("KV: leadership key %s revision %d undecodable: %v", o.Key, o.Rev, err)
			continue
		}
		if cur != nil && cur.instance == v.Instance {
			cur.lastPut = o.TS
			continue
		}
		start := o.TS
		if cur != nil {
			r.note("leadership of %s passed from %s to %s between %s and %s without a delete seen", o.Key, cur.instance, v.Instance, cur.lastPut.Format(tsFormat), o.TS.Format(tsFormat))
			cur.end = o.TS
			out[o.Key] = append(out[o.Key], *cur)
			start = cur.lastPut
		}
		open[o.Key] = &leaderTerm{instance: v.Instance, start: start, lastPut: o.TS}
	}
	for k, t := range open {
		out[k] = append(out[k], *t)
	}
	return out
}

// blindWindows returns the intervals in which the watch delivered nothing
// although the stream stored something: a jump in the stream sequence
// between two consecutive deliveries.
func blindWindows(obs []Observation) [][2]time.Time {
	var out [][2]time.Time
	for i := 1; i < len(obs); i++ {
		if obs[i].Rev > obs[i-1].Rev+1 {
			out = append(out, [2]time.Time{obs[i-1].TS, obs[i].TS})
		}
	}
	return out
}

func inWindow(ws [][2]time.Time, at time.Time) bool {
	for _, w := range ws {
		if !at.Before(w[0]) && !at.After(w[1]) {
			return true
		}
	}
	return false
}
