package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Confirming a close. An advisory is a hint, never proof: where the
// holders share the managers' account (a single-account NATS, or the
// Anonymous test server), any client of that account can make the server
// publish on the advisory subject. JetStream answers a request on its
// reply subject, a direct get without headers answers with bytes the
// client stored, and publish permissions cover subjects, not reply
// subjects (forgeddisconnect_test.go does it with the executor's rights).
// The account layout (jetstream/accounts.go) puts the advisories where no
// executor can publish at all; the check below stays as defence in depth.
// Before it frees anything, the manager asks the connection's own server
// whether it lists that connection as closed, with a reply subject under
// the manager's own inbox prefix, which no other role may read or learn.
// It asks on both connzSubjects: the holders' account's listing (the
// executors' account, imported from the system account) and its own
// account's, which every server imports into every account; a close
// counts if either lists it. The grace starts when the server says so. A
// server that does not answer, or does not list the connection as closed
// (it is open: the advisory was forged), frees nothing; the TTL still ends
// a lease whose holder died. The answer also gives the reason the server
// recorded for the close, which decides whether it frees anything
// (holderClosed, disconnect.go).

// pingConnzSubject is the servers' connection listing for the caller's
// own account.
const pingConnzSubject = "$SYS.REQ.ACCOUNT.PING.CONNZ"

// connzSubjects are where the manager asks for a closed connection whose
// advisory came on disconnectEvents: its own account's listing, and, when
// the advisory subject names an account ($SYS.ACCOUNT.<account>.DISCONNECT),
// that account's ($SYS.REQ.ACCOUNT.<account>.CONNZ), which reaches the
// manager only where the system account exports it to the managers'
// account (docs/security.md).
func connzSubjects(disconnectEvents string) []string {
	subjects := []string{pingConnzSubject}
	if rest, ok := strings.CutPrefix(disconnectEvents, "$SYS.ACCOUNT."); ok {
		if acc, ok := strings.CutSuffix(rest, ".DISCONNECT"); ok && acc != "" && !strings.ContainsAny(acc, ".*> ") {
			subjects = append(subjects, "$SYS.REQ.ACCOUNT."+acc+".CONNZ")
		}
	}
	return subjects
}

// noResponders is the status of the server's answer to a request nobody
// subscribes to.
const noResponders = "503"

// connzClosed is the server's ConnClosed state filter.
const connzClosed = 1

// closeCheckWaits are the pauses before each question. The server sends
// the advisory just before it records the connection as closed, so the
// first answer may not list it yet.
var closeCheckWaits = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond}

const (
	// closeCheckTimeout bounds the wait for the named server's answer.
	closeCheckTimeout = 2 * time.Second
	// maxCloseChecks bounds the checks in flight. Only connections
	// something is bound to are checked, one check each, so a flood of
	// forged advisories costs at most one check per live holder.
	maxCloseChecks = 256
	// maxHeard bounds the advisories remembered but not yet confirmed.
	maxHeard = 4096
	// maxConnzAnswer bounds an answer the manager decodes: one lists one
	// connection at most.
	maxConnzAnswer = 64 << 10
)

// checkLocked starts asking c's server whether c is closed, unless a
// check is under way or the owner stopped. g.mu held.
func (g *disconnects) checkLocked(c conn) {
	if g.stopped || !c.known() {
		return
	}
	if _, ok := g.checking[c]; ok {
		return
	}
	if len(g.checking) >= maxCloseChecks {
		g.log.Warn("too many connection checks in flight: leaving a closed connection's leases to the TTL", "conn_id", c.id)
		return
	}
	g.checking[c] = struct{}{}
	g.wg.Add(1)
	go g.confirm(c)
}

// confirm asks c's server until it lists c as closed or the questions run
// out, then settles the answer and frees what is bound to c if the
// holder's end closed it. Something bound to c after settle finds c
// closed (knownClosedLocked) and is freed as if bound before.
func (g *disconnects) confirm(c conn) {
	defer g.wg.Done()
	reason, closed := g.askClosed(g.ctx, c)
	if name, free := g.settle(c, reason, closed); free {
		g.bindings.connClosed(c, name)
	}
}

// settle ends the check of c and reports whether what is bound to c is to
// be freed: its server listed it as closed, by the holder's end, and the
// manager still frees on a close. name is c's server's name, as its
// advisory gave it.
func (g *disconnects) settle(c conn, reason string, closed bool) (name string, free bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	name = g.heard[c].name
	delete(g.checking, c)
	delete(g.heard, c)
	switch {
	case !closed:
		if g.ctx.Err() == nil {
			g.log.Warn("ignoring a disconnect advisory that the connection's server does not confirm", "conn_server", c.server, "conn_id", c.id)
		}
		return name, false
	case !holderClosed(reason):
		g.log.Info("a holder's connection was closed by its server, not by the holder: its leases stay until it moves them or their TTL lapses",
			"conn_server", c.server, "conn_id", c.id, "reason", reason)
		return name, false
	case g.noFrees:
		return name, false // it told its holders it frees nothing more (stop.go)
	}
	now := time.Now()
	g.closed[c] = now
	if o := (origin{name, c.id}); o.known() {
		g.closedOrigins[o] = now
	}
	return name, true
}

// askClosed reports whether c's server lists c as closed, and why, asking
// again after each of closeCheckWaits while it does not.
func (g *disconnects) askClosed(ctx context.Context, c conn) (reason string, closed bool) {
	for _, wait := range closeCheckWaits {
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(wait):
		}
		reason, closed, answered := g.askConnz(ctx, c)
		if closed {
			return reason, true
		}
		if !answered {
			return "", false // the server is gone or unreachable: the TTL decides
		}
	}
	return "", false
}

// askConnz asks every server, on each of connzSubjects, for the closed
// connection c.id, and waits for the answers of c's server: closed (with
// the reason the server recorded) if one lists it, answered once every
// subject got one (or one listed it).
func (g *disconnects) askConnz(ctx context.Context, c conn) (reason string, closed, answered bool) {
	nc := g.conn
	subjects := connzSubjects(g.subject)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".*")
	if err != nil {
		return "", false, false
	}
	defer sub.Unsubscribe()
	body := fmt.Appendf(nil, `{"cid":%d,"state":%d}`, c.id, connzClosed)
	for i, subject := range subjects {
		if err := nc.PublishRequest(subject, inbox+"."+strconv.Itoa(i), body); err != nil {
			return "", false, false
		}
	}
	ctx, cancel := context.WithTimeout(ctx, closeCheckTimeout)
	defer cancel()
	heard := make([]bool, len(subjects))
	left := len(subjects)
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return "", false, left < len(subjects)
		}
		i, err := strconv.Atoi(msg.Subject[len(inbox)+1:])
		if err != nil || i < 0 || i >= len(subjects) {
			continue
		}
		reason, closed, ok := connzAnswer(msg, c)
		if !ok && msg.Header.Get("Status") != noResponders {
			continue
		}
		if closed {
			return reason, true, true
		}
		// Answered, or nobody can answer there: the listing of an account
		// the system account does not export to this one.
		if !heard[i] {
			heard[i] = true
			if left--; left == 0 {
				return "", false, true
			}
		}
	}
}

// connzAnswer decodes one server's answer: ok is false for another
// server's answer or anything that is not an answer. reason is what the
// server recorded for the close.
func connzAnswer(msg *nats.Msg, c conn) (reason string, closed, ok bool) {
	if len(msg.Data) > maxConnzAnswer {
		return "", false, false
	}
	var a struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Data struct {
			Conns []struct {
				CID    uint64 `json:"cid"`
				Reason string `json:"reason"`
			} `json:"connections"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal(msg.Data, &a) != nil || a.Server.ID != c.server {
		return "", false, false
	}
	if a.Error != nil {
		return "", false, true
	}
	for _, x := range a.Data.Conns {
		if x.CID == c.id {
			return x.Reason, true, true
		}
	}
	return "", false, true
}
