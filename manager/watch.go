package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// recordWatch is the lease record watch of one node: it owns the Watcher,
// the goroutines that set it up and read it, and the rebuild's progress,
// and hands every change to the Manager (recordSink), whose methods take
// m.mu themselves. It has no lock of its own: progress is atomic, ready
// and done are closed once, and w is set by start before stop may read it
// (Close runs after Start, never beside it).
type recordWatch struct {
	store Store
	node  string
	stall time.Duration // Config.RebuildStall
	sink  recordSink

	w        Watcher        // the running watch, once set up
	ready    chan struct{}  // closed once the Store's records are counted
	done     chan struct{}  // closed when the reading goroutine (run) ends
	progress atomic.Int64   // unix ns of the watch's last change
	setup    sync.WaitGroup // the set-up goroutine
}

// recordSink is what the watch's changes do to the Manager (rebuild.go).
type recordSink interface {
	observePut(ch Change, rebuilt bool)
	observeGone(ch Change) // an expiry, or a delete by someone else
	restoreQueue()         // once the initial state is delivered
}

var _ recordSink = (*Manager)(nil)

func newRecordWatch(store Store, node string, stall time.Duration, sink recordSink) *recordWatch {
	return &recordWatch{store: store, node: node, stall: stall, sink: sink, ready: make(chan struct{}), done: make(chan struct{})}
}

// start starts the watch, which lives until stop or until life ends (its
// set-up ends with ctx too), and returns once every stored record was
// handed to the sink and the queue restored.
//
// The rebuild must keep moving: a watch that stalls (a connection reset
// while it delivers; nats.go notices the gap only seconds later) would
// hold a takeover while this manager keeps its leadership. It gives up
// instead, so the caller (RunLeader) retries with a fresh watch, or a
// standby steps in.
func (rw *recordWatch) start(ctx, life context.Context) error {
	w, err := rw.setUp(ctx, life)
	if err != nil {
		return fmt.Errorf("lease: watch lease records: %w", err)
	}
	rw.w = w
	rw.progress.Store(time.Now().UnixNano())
	go rw.run(w)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-rw.ready:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("lease: rebuilding state from the store: %w", ctx.Err())
		case <-rw.done:
			return errors.New("lease: the lease record watch ended before the state was rebuilt")
		case <-tick.C:
			if stalled := time.Since(time.Unix(0, rw.progress.Load())); stalled > rw.stall {
				return fmt.Errorf("lease: rebuilding state from the store: the watch delivered nothing for %v", stalled.Round(time.Millisecond))
			}
		}
	}
}

// setUp starts the lease record watch, giving up after the stall limit (a
// watch set up over a connection that resets meanwhile can hang for the
// JetStream API timeout); a watch that comes up later is stopped.
func (rw *recordWatch) setUp(ctx, life context.Context) (Watcher, error) {
	type result struct {
		w   Watcher
		err error
	}
	done := make(chan result)
	// The watch lives until life ends (Close), not only for ctx; its
	// set-up ends with ctx too. setup owns the set-up goroutine, which
	// stops a watch that came up after start gave up on it.
	wctx, stop := context.WithCancel(life)
	stopSetup := context.AfterFunc(ctx, stop)
	defer stopSetup()
	rw.setup.Add(1)
	go func() {
		defer rw.setup.Done()
		w, err := rw.store.Watch(wctx, lease.NodeKeys(rw.node))
		select {
		case done <- result{w, err}:
		case <-wctx.Done():
			if err == nil {
				_ = w.Stop()
			}
		}
	}()
	select {
	case r := <-done:
		return r.w, r.err
	case <-wctx.Done():
		return nil, fmt.Errorf("setting up the watch: %w", context.Cause(wctx))
	case <-time.After(rw.stall):
		stop() // ends the set-up; stop (Close) waits for it
		return nil, fmt.Errorf("setting up the watch took longer than %v", rw.stall)
	}
}

// run hands the Store's view to the sink: first every stored record of
// this node, then every change.
func (rw *recordWatch) run(w Watcher) {
	defer close(rw.done)
	rebuilt := false
	for ch := range w.Changes() {
		rw.progress.Store(time.Now().UnixNano())
		switch ch.Op {
		case ChangeCaughtUp:
			if !rebuilt {
				rebuilt = true
				rw.sink.restoreQueue()
				close(rw.ready)
			}
		case ChangePut:
			rw.sink.observePut(ch, rebuilt)
		case ChangeDelete, ChangeExpire:
			rw.sink.observeGone(ch)
		}
	}
}

// stop stops the watch and waits for its goroutines. Call it once life
// has ended.
func (rw *recordWatch) stop() error {
	rw.setup.Wait()
	if rw.w == nil {
		return nil
	}
	err := rw.w.Stop()
	<-rw.done
	return err
}
