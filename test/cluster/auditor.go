package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
