package main

import (
	"math/bits"
	"time"
)

// hist is a log-linear latency histogram in the manner of HDR histograms:
// values below 64 ns are exact, and every power of two above is split into
// 32 buckets, so a reported percentile is within about 3% of the truth.
// Recording is a few arithmetic operations and one increment, with no
// allocation; each worker owns one and they are merged after the run.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	max    uint64
}

const (
	subBits     = 5
	subBuckets  = 1 << subBits // buckets per power of two
	exactLimit  = 2 * subBuckets
	histBuckets = exactLimit + (64-subBits-1)*subBuckets
)

func bucketOf(v uint64) int {
	if v < exactLimit {
		return int(v)
	}
	e := bits.Len64(v) - 1 - subBits // >= 1: how far v is shifted to keep 6 bits
	return exactLimit + (e-1)*subBuckets + int(v>>e) - subBuckets
}

// valueOf returns the middle of bucket i.
func valueOf(i int) uint64 {
	if i < exactLimit {
		return uint64(i)
	}
	e := (i-exactLimit)/subBuckets + 1
	m := uint64((i-exactLimit)%subBuckets + subBuckets)
	return m<<e + (uint64(1)<<e)/2
}

func (h *hist) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q <= 1); 0 if nothing was recorded.
func (h *hist) quantile(q float64) time.Duration {
	if h == nil || h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(valueOf(i), h.max))
		}
	}
	return time.Duration(h.max)
}

func mergeAll(hs []*hist) *hist {
	out := &hist{}
	for _, h := range hs {
		out.merge(h)
	}
	return out
}
