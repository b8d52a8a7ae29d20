package jetstream

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Why an embedded server needs healing: nats-server's file store keeps the
// first write error it meets for good (filestore.go setWriteErr, and the
// stream's own werr in stream.go), and from then on drops every publish to
// that stream without an answer. Opening a file is a "write": the store's
// sync, every 2 minutes, opens index.db, and a block closed after 30 s idle
// is opened again for the next write. So a moment without a free
// descriptor (a flood of connections) left the leadership bucket taking
// no write for as long as the process lived: every renewal timed out, the
// manager stood by, and only a restart served the node again (issue 38,
// item 6). The server recovers such a stream only by loading it from disk
// again, which it does when an account's JetStream is enabled; so the
// healer does that (storereload.go), once descriptors are free again, and
// then to every account: a broken store shows in the server's health
// check only once a write to it was lost, and an idle stream the same
// overload broke would lose its next write.
const (
	// healCheckEvery is how often the store is looked at: a write error
	// found within a second of the overload's end leaves most of the 10 s
	// the node has to serve again for the manager's own retries.
	healCheckEvery = time.Second
	// healMaxBackoff bounds the wait between reloads of an account that
	// is still broken after one (its disk still full, say): each reload
	// restarts the account's consumers, so not every second, but still
	// within the 10 s promise once the cause is gone.
	healMaxBackoff = 4 * time.Second
	// healMinFree is the fewest free descriptors a reload starts with: a
	// stream's recovery opens its files one at a time, and a recovery that
	// fails for want of one leaves the stream unloaded (its files kept,
	// loaded by the next reload).
	healMinFree = 64
)

// HealingServer is an embedded nats-server whose stores heal by
// themselves after an overload (storeHealer). Shutdown stops the healer
// before the server.
type HealingServer struct {
	*server.Server
	healer *storeHealer
}

// HealStores starts healing s's stores; log says when and what.
func HealStores(s *server.Server, log *slog.Logger) *HealingServer {
	return &HealingServer{Server: s, healer: startStoreHealer(s, log)}
}

// Shutdown stops the healer and waits for it, then shuts the server down:
// no reload races the server's own stop.
func (h *HealingServer) Shutdown() {
	h.healer.close()
	h.Server.Shutdown()
}

// storeHealer reloads the JetStream of an account of its server whose
// store has a write error, as soon as the process has descriptors to
// spare. It owns one goroutine, which close stops and waits for; the
// fields below stop are that goroutine's alone.
type storeHealer struct {
	s    *server.Server
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	once sync.Once

	descriptors func() (free, limit int) // freeDescriptors; tests starve it

	waiting bool          // a reload waits for descriptors (logged once)
	backoff time.Duration // before the next look at a store just reloaded
	// sweep has the next reload take every account: set while the store
	// is healthy, and while descriptors are short (see check).
	sweep bool
	// lost are the streams a reload of the healer's did not load (no
	// descriptor for a moment): reloaded again. A stream the server could
	// not load at its start is not the healer's to retry: an unreadable
	// directory would have it reload the account every few seconds.
	lost map[streamID]bool
	// disabled are accounts whose JetStream a reload stopped and could not
	// enable again, with their limits: enabled at the next look.
	disabled map[string]limitsByTier
}

func startStoreHealer(s *server.Server, log *slog.Logger) *storeHealer {
	h := newStoreHealer(s, log)
	go h.run()
	return h
}

// newStoreHealer is a healer not started: check may be called (tests).
func newStoreHealer(s *server.Server, log *slog.Logger) *storeHealer {
	if log == nil {
		log = slog.Default()
	}
	return &storeHealer{s: s, log: log, stop: make(chan struct{}), done: make(chan struct{}),
		descriptors: freeDescriptors, sweep: true, lost: map[streamID]bool{}, disabled: map[string]limitsByTier{}}
}

func (h *storeHealer) run() {
	defer close(h.done)
	t := time.NewTimer(healCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		t.Reset(h.check())
	}
}

// close stops the healer and waits for it: after close returns, no reload
// runs or starts (the server may shut down).
func (h *storeHealer) close() {
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// check reloads what is broken, if it can, and says when to look again.
func (h *storeHealer) check() time.Duration {
	free, limit := h.descriptors()
	starved := free >= 0 && free < min(healMinFree, limit/4)
	problems := storeProblems(h.s)
	broken := map[string][]string{}
	for _, p := range problems {
		if p.writeErr || h.lost[p.id] {
			broken[p.id.account] = append(broken[p.id.account], p.text)
		}
	}
	for acc := range h.disabled {
		broken[acc] = append(broken[acc], "its JetStream is not enabled again yet")
	}
	if starved {
		// The health check reads the store's directories: with no
		// descriptor free it finds nothing, which is no news either way.
		h.sweep = true
		if len(broken) > 0 && !h.waiting {
			h.waiting = true
			h.log.Warn("JetStream store broken (descriptors ran out?): it is reloaded once descriptors are free",
				"free_descriptors", free, "descriptor_limit", limit, "errors", broken)
		}
		return healCheckEvery
	}
	for id := range h.lost {
		if !slices.ContainsFunc(problems, func(p streamProblem) bool { return p.id == id }) {
			delete(h.lost, id) // loaded since
		}
	}
	if len(broken) == 0 {
		if h.backoff > 0 {
			h.log.Info("JetStream store healthy again")
		}
		h.waiting, h.backoff, h.sweep = false, 0, true
		return healCheckEvery
	}
	h.waiting = false
	if h.sweep {
		// The first reload since the store was healthy, or since
		// descriptors were short, takes every account: the health check
		// sees a stream's write error only once a write to it failed (the
		// stream's own error; the store's, set by its sync, shows
		// nowhere), so an idle stream the same overload broke would lose
		// its next write, unanswered.
		h.sweep = false
		for _, acc := range jetStreamAccounts(h.s) {
			if _, ok := broken[acc]; !ok {
				broken[acc] = []string{"none seen: reloaded with the others, in case its store kept an error no write has shown yet"}
			}
		}
	}
	for _, acc := range slices.Sorted(maps.Keys(broken)) {
		h.reload(acc, problems, broken[acc])
	}
	h.backoff = min(max(2*h.backoff, healCheckEvery), healMaxBackoff)
	return h.backoff
}

// reload loads acc's JetStream from disk again, and notes the streams it
// could not load that loaded before.
func (h *storeHealer) reload(acc string, before []streamProblem, why []string) {
	start := time.Now()
	limits, wasDisabled := h.disabled[acc]
	if !wasDisabled {
		var err error
		if limits, err = disableAccount(h.s, acc); err != nil {
			h.log.Error("stopping an account's JetStream to reload it failed", "account", acc, "err", err, "errors", why)
			return
		}
	}
	if err := enableAccount(h.s, acc, limits); err != nil {
		h.disabled[acc] = limits
		h.log.Error("enabling an account's JetStream again failed; retrying", "account", acc, "err", err)
		return
	}
	delete(h.disabled, acc)
	h.log.Warn("reloaded an account's JetStream from disk: a store with a write error takes no write until then",
		"account", acc, "took", time.Since(start).Round(time.Millisecond), "errors", why)
	for _, p := range storeProblems(h.s) {
		unloadedBefore := slices.ContainsFunc(before, func(b streamProblem) bool { return b.id == p.id && !b.writeErr })
		if p.id.account == acc && !p.writeErr && (wasDisabled || !unloadedBefore) {
			h.lost[p.id] = true
			h.log.Warn("a stream was not loaded by the reload; retrying", "account", acc, "stream", p.id.stream, "error", p.text)
		}
	}
}
