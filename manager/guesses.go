package manager

import (
	"container/list"
	"log/slog"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Wrong secrets are bounded per requester (requester.go). Lease ids and
// tokens are public, so the acquire's secret alone proves holdership, and
// anyone with the executor credential may send renew, release, cancel and
// acquire retries naming any lease. The clients draw 128-bit secrets, which
// nobody guesses; but a secret given with WithSecret may be weak, and
// before issue 38 the clients drew it from the id's own NUID generator,
// found in 201 guesses. So:
//
//   - A request that is checked against a secret and fails that check
//     (the lease or request it names is found, the token or holder is
//     right, the secret is not) counts against its requester. Only the
//     secret decides these: a wrong token or holder says nothing of the
//     secret, and is not counted.
//   - After MaxWrongSecrets of them within WrongSecretWindow (counted from
//     the first), a requester the server vouches for has every request
//     that would be checked against a secret answered too_many_attempts,
//     without the check, with retry_after_ms until the window ends. A
//     guesser learns nothing more in that window: at most 16 tries a
//     minute per connection.
//   - A requester the server does not vouch for (a client in the
//     managers' account, named by its own conn_server and conn_id) may
//     have named an honest holder's connection. Its requests are still
//     checked: a right secret is served, and a wrong one over the limit is
//     answered too_many_attempts instead of token_mismatch or conflict.
//     Such a client could vary its name anyway, and has the managers'
//     rights: the bound only makes its guessing visible.
//
// So an honest holder is never refused for someone else's guesses: its
// own requests come on its own connection, which only its own wrong
// secrets can trip. Every refusal is counted (Config.SecretRefused, the
// metric lease_secrets_refused_total{node,reason}) and a trip logged, at
// most once per guessLogEvery.
//
// The state is bounded: at most maxGuessers requesters are remembered, a
// window's entry is dropped once the window has ended, and beyond the
// bound the requester whose window began first is forgotten. A client
// would need that many connections guessing at once to make the manager
// forget one of them early, and each of those gets its own 16 tries.

const (
	// MaxWrongSecrets is how many wrong secrets one requester may present
	// within WrongSecretWindow before it is refused.
	MaxWrongSecrets = 16
	// WrongSecretWindow is how long a requester's wrong secrets count,
	// from the first; one over the limit is refused until it ends.
	WrongSecretWindow = time.Minute
	// maxGuessers bounds the requesters remembered: a few hundred kB.
	maxGuessers = 4096
	// guessLogEvery spaces out the log lines about requesters that
	// reached the limit.
	guessLogEvery = 10 * time.Second
)

// Reasons of lease_secrets_refused_total: the answer a request got for its
// secret.
const (
	// SecretWrong: the secret was checked and wrong (token_mismatch,
	// conflict).
	SecretWrong = "wrong_secret"
	// SecretTooManyAttempts: answered too_many_attempts.
	SecretTooManyAttempts = "too_many_attempts"
)

// SecretRefusalReasons lists every reason, for pre-creating metric series.
var SecretRefusalReasons = []string{SecretWrong, SecretTooManyAttempts}

// guesses counts wrong secrets by requester. Guarded by Manager.mu: every
// secret is checked under it.
//
// Invariants: byKey and order hold the same guessers; order is by window
// start, oldest first (a guesser whose window starts anew moves to the
// back), so the expired ones are at the front; len(byKey) <= max.
type guesses struct {
	limit   int
	window  time.Duration
	max     int
	refused func(reason string) // Config.SecretRefused; never nil
	log     *slog.Logger

	byKey map[string]*list.Element // of *guesser
	order list.List

	lastLog  time.Time
	unlogged int // trips since the last log line
}

// guesser is one requester's window of wrong secrets.
type guesser struct {
	key   string
	start time.Time // its first wrong secret of this window
	wrong int       // wrong secrets since start
}

func newGuesses(refused func(string), log *slog.Logger) *guesses {
	if refused == nil {
		refused = func(string) {}
	}
	return &guesses{limit: MaxWrongSecrets, window: WrongSecretWindow, max: maxGuessers, refused: refused, log: log,
		byKey: make(map[string]*list.Element)}
}

// admitLocked is asked before a request of who is checked against a
// secret: a too_many_attempts error if who is vouched for and at its
// limit (the request is then not checked at all), else nil.
func (g *guesses) admitLocked(who requester, now time.Time) *lease.Error {
	if !who.vouched {
		return nil
	}
	gs := g.liveLocked(who.key, now)
	if gs == nil || gs.wrong < g.limit {
		return nil
	}
	return g.tooManyLocked(gs, now)
}

// wrongLocked counts a wrong secret of who and returns the answer: wrong
// (the verb's own error), or too_many_attempts if who is over its limit
// (a requester nobody vouches for, whose requests are always checked).
func (g *guesses) wrongLocked(who requester, wrong *lease.Error, now time.Time) *lease.Error {
	if who.key == "" {
		g.refused(SecretWrong)
		return wrong
	}
	gs := g.liveLocked(who.key, now)
	if gs == nil {
		gs = g.addLocked(who.key, now)
	}
	if gs.wrong >= g.limit {
		return g.tooManyLocked(gs, now)
	}
	gs.wrong++
	if gs.wrong == g.limit {
		g.trippedLocked(now)
	}
	g.refused(SecretWrong)
	return wrong
}

// tooManyLocked counts and builds the answer to a request of gs's
// requester while it is over its limit.
func (g *guesses) tooManyLocked(gs *guesser, now time.Time) *lease.Error {
	g.refused(SecretTooManyAttempts)
	e := errorf(lease.CodeTooManyAttempts, "this connection presented %d wrong secrets within %v: requests naming a lease or request are refused until its window ends",
		g.limit, g.window)
	e.RetryAfterMs = retryAfterMs(gs.start.Add(g.window).Sub(now))
	return e
}

// liveLocked returns key's guesser if its window has not ended, after
// dropping every guesser whose window has.
func (g *guesses) liveLocked(key string, now time.Time) *guesser {
	for e := g.order.Front(); e != nil; e = g.order.Front() {
		gs := e.Value.(*guesser)
		if now.Sub(gs.start) < g.window {
			break
		}
		g.order.Remove(e)
		delete(g.byKey, gs.key)
	}
	e := g.byKey[key]
	if e == nil {
		return nil
	}
	if gs := e.Value.(*guesser); now.Sub(gs.start) < g.window {
		return gs
	}
	// Ended, behind a live one: a clock read a little out of order.
	g.order.Remove(e)
	delete(g.byKey, key)
	return nil
}

// addLocked starts a window for key, which has none, forgetting the
// oldest window if the bound is reached.
func (g *guesses) addLocked(key string, now time.Time) *guesser {
	if len(g.byKey) >= g.max {
		oldest := g.order.Front()
		g.order.Remove(oldest)
		delete(g.byKey, oldest.Value.(*guesser).key)
	}
	gs := &guesser{key: key, start: now}
	g.byKey[key] = g.order.PushBack(gs)
	return gs
}

// trippedLocked logs that a requester reached the limit, at most once per
// guessLogEvery with the count since the last line: an attacker with many
// connections must not flood the log.
func (g *guesses) trippedLocked(now time.Time) {
	g.unlogged++
	if now.Sub(g.lastLog) < guessLogEvery {
		return
	}
	g.log.Warn("connections presented too many wrong lease secrets: someone is guessing, or a client sends a wrong secret (docs/security.md)",
		"connections", g.unlogged, "limit", g.limit, "window", g.window)
	g.lastLog, g.unlogged = now, 0
}

// sameRequestLocked checks that a retry of who repeats the request it
// retries: the same holder and secret (the secret only once who may try
// one: guesses.go), and the same slots.
func (g *guesses) sameRequestLocked(who requester, req lease.AcquireRequest, holder, secret string, slots int64) *lease.Error {
	now := time.Now()
	if e := g.admitLocked(who, now); e != nil {
		return e
	}
	// One message for a wrong holder and a wrong secret: the answer
	// says no more than that the id is not the requester's.
	if holder != req.Holder {
		return errorf(lease.CodeConflict, "request id %q belongs to another holder", req.RequestID)
	}
	if !secretMatches(secret, req.Secret) {
		return g.wrongLocked(who, errorf(lease.CodeConflict, "request id %q belongs to another holder", req.RequestID), now)
	}
	if slots != req.Slots {
		return errorf(lease.CodeConflict, "request id %q was sent before for %d slots, not %d", req.RequestID, slots, req.Slots)
	}
	return nil
}

// cancellerLocked checks that a cancel of who names the holder and secret
// of the request or lease it cancels (the secret only once who may try
// one: guesses.go).
func (g *guesses) cancellerLocked(who requester, req lease.CancelRequest, holder, secret string) *lease.Error {
	now := time.Now()
	if e := g.admitLocked(who, now); e != nil {
		return e
	}
	conflict := errorf(lease.CodeConflict, "request id %q belongs to another holder", req.RequestID)
	if holder != req.Holder {
		return conflict
	}
	if !secretMatches(secret, req.Secret) {
		return g.wrongLocked(who, conflict, now)
	}
	return nil
}
