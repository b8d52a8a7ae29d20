package manager

import (
	"bytes"
	"sync"
	"time"
)

// echoes are the grant writes sent without an acknowledgement
// (EchoWriter), each waiting for the record watch to show it stored: the
// watch delivers every write of the node's records anyway, so a grant that
// waits for its own value there instead of for the server's
// acknowledgement costs one message fewer. It has its own lock, taken by
// the grant goroutines and the watch's, never with m.mu held by it.
type echoes struct {
	mu      sync.Mutex
	waiting map[string]*awaited // by key: one grant in flight per key
}

// awaited is one write waiting for its echo.
type awaited struct {
	value []byte
	rev   chan uint64 // gets the stored revision, once
	// done, if set, is called instead (notify).
	done func(rev uint64, ok bool)
	stop *time.Timer
}

// expect registers the write of value at key, before it is sent.
func (e *echoes) expect(key string, value []byte) *awaited {
	w := &awaited{value: value, rev: make(chan uint64, 1)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waiting == nil {
		e.waiting = make(map[string]*awaited)
	}
	e.waiting[key] = w
	return w
}

// forget unregisters w, if it is still expected at key.
func (e *echoes) forget(key string, w *awaited) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waiting[key] == w {
		delete(e.waiting, key)
	}
}

// wait returns the stored revision of w's write once the watch shows it,
// or false after d; either way it is no longer expected.
func (e *echoes) wait(key string, w *awaited, d time.Duration) (uint64, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case rev := <-w.rev:
		return rev, true
	case <-t.C:
	}
	e.forget(key, w)
	select {
	case rev := <-w.rev: // it came as the timer fired
		return rev, true
	default:
		return 0, false
	}
}

// seen hands a put the watch delivered to the write it echoes, if one
// waits for exactly this value at this key.
func (e *echoes) seen(ch Change) {
	e.mu.Lock()
	w := e.waiting[ch.Key]
	if w == nil || !bytes.Equal(w.value, ch.Value) {
		e.mu.Unlock()
		return
	}
	delete(e.waiting, ch.Key)
	e.mu.Unlock()
	if w.done != nil {
		w.stop.Stop()
		w.done(ch.Rev, true)
		return
	}
	w.rev <- ch.Rev
}

// notify registers the write of value at key, before it is sent, and
// calls done once, without the echoes' lock: with the stored revision,
// on the watch's goroutine, when the watch shows the write stored; or
// with false, on a timer's, if it did not within d. Unless withdraw, which
// reports whether it withdrew the write before either (done is then never
// called).
func (e *echoes) notify(key string, value []byte, d time.Duration, done func(rev uint64, ok bool)) (withdraw func() bool) {
	w := &awaited{value: value, done: done}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waiting == nil {
		e.waiting = make(map[string]*awaited)
	}
	e.waiting[key] = w
	claim := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.waiting[key] != w {
			return false
		}
		delete(e.waiting, key)
		w.stop.Stop()
		return true
	}
	w.stop = time.AfterFunc(d, func() {
		if claim() {
			done(0, false)
		}
	})
	return claim
}
