package sandbox

import "sync"

// tailBuffer keeps the last max bytes written to it (a ring buffer).
// It is safe for concurrent use.
type tailBuffer struct {
	mu   sync.Mutex
	buf  []byte // allocated lazily, len == max once allocated
	max  int
	pos  int // next write position in buf
	full bool
}

func newTailBuffer(max int) *tailBuffer {
	if max < 0 {
		max = 0
	}
	return &tailBuffer{max: max}
}

// Write always succeeds and keeps only the last max bytes.
func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if t.max == 0 || n == 0 {
		return n, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.buf == nil {
		t.buf = make([]byte, t.max)
	}
	if len(p) >= t.max {
		copy(t.buf, p[len(p)-t.max:])
		t.pos, t.full = 0, true
		return n, nil
	}
	c := copy(t.buf[t.pos:], p)
	if c < len(p) {
		copy(t.buf, p[c:])
		t.full = true
	}
	t.pos = (t.pos + len(p)) % t.max
	if t.pos == 0 {
		t.full = true
	}
	return n, nil
}

// Bytes returns a copy of the retained tail, oldest byte first.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]byte(nil), t.buf[:t.pos]...)
	}
	out := make([]byte, 0, t.max)
	out = append(out, t.buf[t.pos:]...)
	return append(out, t.buf[:t.pos]...)
}
