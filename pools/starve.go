package pools

import "container/heap"

// shareHeap is the fair policy's shares in the round, as a min-heap on
// their head request's arrival (seq), so that next finds the oldest ready
// request for Options.StarvationAge in O(1) and keeps it in O(log shares).
type shareHeap []*share

func (h shareHeap) Len() int           { return len(h) }
func (h shareHeap) Less(i, j int) bool { return head(h[i]).seq < head(h[j]).seq }
func (h shareHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}

func (h *shareHeap) Push(x any) {
	s := x.(*share)
	s.heapAt = len(*h)
	*h = append(*h, s)
}

func (h *shareHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapAt = -1
	return s
}

// set puts s in the heap (in its place for its current head) or takes it
// out.
func (h *shareHeap) set(s *share, in bool) {
	switch {
	case in && s.heapAt < 0:
		heap.Push(h, s)
	case in:
		heap.Fix(h, s.heapAt)
	case s.heapAt >= 0:
		heap.Remove(h, s.heapAt)
	}
}

// since is the time from at, a date from stamp, to now, in nanoseconds.
func (p *Pool) since(at int64) int64 { return p.stamp() - at }

// stamp dates a request for StarvationAge: nanoseconds since the pool was
// made, by Options.Now.
func (p *Pool) stamp() int64 { return int64(p.opts.Now().Sub(p.epoch)) }
