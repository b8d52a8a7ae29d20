package manager

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// The reply rule: a reply subject is chosen by the requester, and a reply
// is published with the manager's rights, so the manager answers only
// subjects of the inbox form the deployment uses. Without this, one request
// with reply '$KV.lease_leaders.<node>' made the manager overwrite its own
// leadership key, and the next one could aim at '$JS.API.…', '$SYS.…' or
// the product's own request and event subjects (issue 13).
//
// A reply subject is allowed when it
//   - is at most MaxReplyLen bytes of printable ASCII, with no empty token
//     and no wildcard ('*', '>');
//   - starts with "_INBOX.", "_R_." (the reply the server maps a request
//     that came through a service import to: the requester's own reply
//     in its own account, see jetstream/accounts.go) or "<p>." for one of
//     Config.ReplyPrefixes (the executors' NATS_INBOX_PREFIX
//     values), so it has at least one token after the prefix; '$'
//     subjects never qualify;
//   - is not under this manager's own response inbox (its connection's
//     request/reply mux), whose replies this manager would read as answers
//     to its own requests.
//
// A request with any other reply subject is not acted on at all (no grant,
// no queue entry, no release, no resize) and gets no answer; it is counted
// (Config.ReplyRefused, metric lease_replies_refused_total) and
// logged at most once per replyLogEvery.
//
// A request with no reply subject is never acted on either, whatever its
// verb (resize included), and is counted the same way. Every client asks
// with a reply; a message without one is what the server publishes when a
// client aims a JetStream answer (a direct get of bytes and headers it
// stored) at a request subject: acting on it would let anyone with a
// JetStream right in an account that imports the lease services resize
// pools or release leases in the server's name.

// replyLogEvery spaces out the log lines about refused reply subjects.
const replyLogEvery = 10 * time.Second

// replyRule decides which reply subjects the manager answers.
type replyRule struct {
	prefixes map[string]bool // "_INBOX" and the configured prefixes
	own      string          // this manager's response inbox prefix, ending in '.'

	refused func() // counts one refusal; never nil

	mu       sync.Mutex
	lastLog  time.Time
	unlogged int // refusals since the last log line
	// The same for requests without a reply subject.
	lastNoReplyLog  time.Time
	unloggedNoReply int
}

// newReplyRule checks the configured prefixes the way config checks
// NATS_REPLY_PREFIXES, so a Manager built without package config is held
// to the same rule; prefix is the product's subject prefix, which no reply
// prefix may overlap.
func newReplyRule(prefixes []string, subjectPrefix, own string, refused func()) (*replyRule, error) {
	r := &replyRule{prefixes: map[string]bool{lease.DefaultInboxPrefix: true, lease.ServiceReplyPrefix: true}, refused: refused}
	if r.refused == nil {
		r.refused = func() {}
	}
	for _, p := range prefixes {
		if !validSubject(p) || p[0] == '$' {
			return nil, fmt.Errorf("lease: reply prefix %q: must be dot-separated tokens without wildcards, not a '$' subject", echo.Clip(p))
		}
		if p == subjectPrefix || strings.HasPrefix(p, subjectPrefix+".") || strings.HasPrefix(subjectPrefix, p+".") {
			return nil, fmt.Errorf("lease: reply prefix %q overlaps the lease subjects under %q", p, subjectPrefix)
		}
		r.prefixes[p] = true
	}
	if own != "" {
		r.own = own + "."
	}
	return r, nil
}

// allowed reports whether reply may be answered. It costs a few string
// comparisons: it runs on every request and every reply.
func (r *replyRule) allowed(reply string) bool {
	if len(reply) > lease.MaxReplyLen || !validSubject(reply) {
		return false
	}
	if r.own != "" && (strings.HasPrefix(reply, r.own) || reply == r.own[:len(r.own)-1]) {
		return false
	}
	// Look the reply's leading tokens up, shortest first: one map lookup
	// per token however many executors' prefixes are configured.
	// validSubject already ruled out a trailing dot, so a token follows.
	for i := 0; i < len(reply); i++ {
		if reply[i] == '.' && r.prefixes[reply[:i]] {
			return true
		}
	}
	return false
}

// validSubject reports whether s is a literal subject: printable ASCII,
// non-empty dot-separated tokens, no wildcards.
func validSubject(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '*' || c == '>' || (c == '.' && s[i-1] == '.') {
			return false
		}
	}
	return true
}

// refuse counts one refused reply subject and logs, at most once per
// replyLogEvery, how many were refused since the last line.
func (r *replyRule) refuse(log *slog.Logger, subject, reply string) {
	r.refused()
	if n := r.due(&r.lastLog, &r.unlogged); n > 0 {
		log.Warn(refusedLine, "refused", n, "subject", echo.Clip(subject), "reply", echo.Clip(reply))
	}
}

// ignoreNoReply counts one request without a reply subject and logs, at
// most once per replyLogEvery, how many were ignored since the last line.
func (r *replyRule) ignoreNoReply(log *slog.Logger, subject string) {
	r.refused()
	if n := r.due(&r.lastNoReplyLog, &r.unloggedNoReply); n > 0 {
		log.Warn(noReplyLine, "ignored", n, "subject", echo.Clip(subject))
	}
}

const (
	refusedLine = "requests refused: their reply subject is not an inbox; nothing was done or answered"
	noReplyLine = "requests ignored: they have no reply subject; nothing was done"
)

// due counts one more and returns how many to log now: all since the last
// line, if it was at least replyLogEvery ago, else 0.
func (r *replyRule) due(last *time.Time, unlogged *int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	*unlogged++
	now := time.Now()
	if now.Sub(*last) < replyLogEvery {
		return 0
	}
	n := *unlogged
	*unlogged, *last = 0, now
	return n
}

// flush logs the refusals not logged yet; Close calls it.
func (r *replyRule) flush(log *slog.Logger) {
	r.mu.Lock()
	n, nr := r.unlogged, r.unloggedNoReply
	r.unlogged, r.unloggedNoReply = 0, 0
	r.mu.Unlock()
	if n > 0 {
		log.Warn(refusedLine, "refused", n)
	}
	if nr > 0 {
		log.Warn(noReplyLine, "ignored", nr)
	}
}
