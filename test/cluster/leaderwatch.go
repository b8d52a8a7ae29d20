package cluster

import (
	"fmt"
	"sync"
	"time"
)

// The leader watch tells which raft group stalled the store. The store
// probe (storeprobe.go) writes to a bucket of its own, whose stream may be
// led by another server than the lease bucket's: a server's stop that
// leaves the lease bucket without a leader for an election (nats-server's
// 4-9 s) stalls every renewal while the probe's writes go through. So the
// suite also samples, every leaderSample, which server leads the streams
// the managers depend on, and notes each time one had no leader.

const leaderSample = 50 * time.Millisecond

// Bucket names a bucket the managers depend on, and its stream.
type Bucket struct{ Name, Stream string }

// The buckets the leader watch samples, by name.
const (
	LeaseBucket      = "lease bucket"
	LeadershipBucket = "leadership bucket"
)

// Leaderless is a time in which a bucket's stream had no leader: from the
// last sample that saw one to the first that saw one again (so it errs
// long by up to a sample), or to the end of the watch.
type Leaderless struct {
	Bucket     string // LeaseBucket or LeadershipBucket
	Start, End time.Time
}

func (l Leaderless) Duration() time.Duration { return l.End.Sub(l.Start) }

type leaderWatch struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu    sync.Mutex
	spans []Leaderless
}

// watchLeaders samples the leaders of the buckets' streams on cl until end.
func watchLeaders(cl *Cluster, buckets ...Bucket) *leaderWatch {
	w := &leaderWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		lastLed := make(map[string]time.Time, len(buckets))
		now := time.Now()
		for _, b := range buckets {
			lastLed[b.Name] = now
		}
		out := map[string]bool{}
		t := time.NewTicker(leaderSample)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				end := time.Now()
				for _, b := range buckets {
					if out[b.Name] {
						w.add(Leaderless{Bucket: b.Name, Start: lastLed[b.Name], End: end})
					}
				}
				return
			case <-t.C:
			}
			for _, b := range buckets {
				led := cl.StreamLeader(b.Stream) >= 0
				now := time.Now()
				switch {
				case led && out[b.Name]:
					w.add(Leaderless{Bucket: b.Name, Start: lastLed[b.Name], End: now})
					out[b.Name] = false
				case !led:
					out[b.Name] = true
				}
				if led {
					lastLed[b.Name] = now
				}
			}
		}
	}()
	return w
}

func (w *leaderWatch) add(l Leaderless) {
	w.mu.Lock()
	w.spans = append(w.spans, l)
	w.mu.Unlock()
}

// end stops the sampling (once: a deferred end after the first is a
// no-op), waits for it, and returns the leaderless times longer than over.
func (w *leaderWatch) end(over time.Duration) []Leaderless {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Leaderless
	for _, l := range w.spans {
		if l.Duration() > over {
			out = append(out, l)
		}
	}
	return out
}

// leaderlessSummary lists the leaderless times longer than over, each
// with its bucket and start, and names the longest of all.
func leaderlessSummary(spans []Leaderless, over time.Duration) string {
	var parts []string
	var longest time.Duration
	for _, l := range spans {
		longest = max(longest, l.Duration())
		if l.Duration() > over {
			parts = append(parts, fmt.Sprintf("%s from %s for %v", l.Bucket, l.Start.Format(tsFormat), l.Duration().Round(time.Millisecond)))
		}
	}
	if longest == 0 {
		return fmt.Sprintf("none over %v", probeStallMin)
	}
	return fmt.Sprintf("%d %v, longest %v", len(parts), parts, longest.Round(time.Millisecond))
}
