package cluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"
)

// The store probe tells a store outage from a manager bug. It writes to a
// bucket of its own, as replicated as the lease bucket, every probeEvery
// through the auditor's connection, and notes which writes the store
// acknowledged. A stall is a time in which it acknowledged none: no holder
// can renew a lease then, whatever the managers do.

const (
	probeEvery   = 100 * time.Millisecond
	probeTimeout = time.Second
	// probeStallMin: shorter gaps between two acknowledgements are the
	// probe's own rhythm (probeEvery plus a write's latency).
	probeStallMin = 250 * time.Millisecond
)

// StoreStall is a time in which the store acknowledged none of the probe's
// writes: from the send of the last write acknowledged before it to the
// acknowledgement of the next one (or the end of the last attempt), so it
// errs long by up to a write's latency.
type StoreStall struct{ Start, End time.Time }

func (s StoreStall) Duration() time.Duration { return s.End.Sub(s.Start) }

// probeAttempt is one probe write: sent, and ended (acknowledged, refused
// or timed out) at Done.
type probeAttempt struct {
	Sent, Done time.Time
	Acked      bool
}

type storeProbe struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup // the write loop and each write

	mu       sync.Mutex
	attempts []probeAttempt
}

// probeBucket is the probe's bucket for prefix, named like the run's own
// buckets (NamesFor) but none of them: the managers watch theirs.
func probeBucket(prefix string) string {
	return strings.TrimSuffix(sljs.NamesFor(prefix).Leases, "_leases") + "_audit_probe"
}

// startStoreProbe creates the probe's bucket with the lease bucket's
// replicas and storage, and starts writing to it until stop.
func startStoreProbe(ctx context.Context, nc *nats.Conn, prefix string) (*storeProbe, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	leases, err := js.Stream(ctx, "KV_"+sljs.NamesFor(prefix).Leases)
	if err != nil {
		return nil, fmt.Errorf("store probe: the lease bucket: %w", err)
	}
	lc := leases.CachedInfo().Config
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: probeBucket(prefix), Description: "slotlease test auditor: store probe", History: 1,
		Storage: lc.Storage, Replicas: lc.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("store probe: bucket %s: %w", probeBucket(prefix), err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &storeProbe{cancel: cancel}
	p.wg.Go(func() {
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for n := uint64(1); ; n++ {
			p.wg.Go(func() { p.write(pctx, kv, n) })
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return p, nil
}

func (p *storeProbe) write(ctx context.Context, kv jetstream.KeyValue, n uint64) {
	sent := time.Now()
	wctx, cancel := context.WithTimeout(ctx, probeTimeout)
	_, err := kv.Put(wctx, "probe", strconv.AppendUint(nil, n, 10))
	cancel()
	if ctx.Err() != nil {
		return // cut short by stop: not a measurement
	}
	p.mu.Lock()
	p.attempts = append(p.attempts, probeAttempt{Sent: sent, Done: time.Now(), Acked: err == nil})
	p.mu.Unlock()
}

// stop ends the writes and waits for them.
func (p *storeProbe) stop() {
	p.cancel()
	p.wg.Wait()
}

func (p *storeProbe) snapshot() []probeAttempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeAttempt(nil), p.attempts...)
}

// storeStalls returns the maximal times longer than over in which no
// attempt was acknowledged. Each runs from the send of the write
// acknowledged last before it (but not from before the acknowledgement
// preceding that one: a slow acknowledgement does not stretch a stall over
// faster ones) to the next acknowledgement; the first from the first send,
// the last, if the last attempts failed, to their end. Overlapping ones
// (acknowledgements arriving together after a stall) are merged.
func storeStalls(attempts []probeAttempt, over time.Duration) []StoreStall {
	if len(attempts) == 0 {
		return nil
	}
	first, last := attempts[0].Sent, attempts[0].Done
	var acked []probeAttempt
	for _, a := range attempts {
		if a.Sent.Before(first) {
			first = a.Sent
		}
		if a.Done.After(last) {
			last = a.Done
		}
		if a.Acked {
			acked = append(acked, a)
		}
	}
	sort.Slice(acked, func(i, j int) bool {
		if !acked[i].Done.Equal(acked[j].Done) {
			return acked[i].Done.Before(acked[j].Done)
		}
		return acked[i].Sent.Before(acked[j].Sent)
	})
	var found []StoreStall
	since, prevAck := first, first
	for _, a := range acked {
		if s := (StoreStall{since, a.Done}); s.Duration() > over {
			found = append(found, s)
		}
		since = a.Sent
		if since.Before(prevAck) {
			since = prevAck
		}
		prevAck = a.Done
	}
	if s := (StoreStall{since, last}); s.Duration() > over && last.After(prevAck) {
		found = append(found, s)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Start.Before(found[j].Start) })
	var out []StoreStall
	for _, s := range found {
		if n := len(out); n > 0 && !s.Start.After(out[n-1].End) {
			if s.End.After(out[n-1].End) {
				out[n-1].End = s.End
			}
			continue
		}
		out = append(out, s)
	}
	return out
}
