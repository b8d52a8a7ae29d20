package manager_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// The fuzz tests send one message per input to one request subject of a
// real manager, with a body from the fuzzer and a reply subject chosen by
// it among inboxes and subjects that are not inboxes. Every message must get
// either no answer (the reply is no inbox: counted as refused) or one
// well-formed JSON answer within the payload limit, and afterwards the node
// must still grant a normal acquire. The seed corpus runs in every
// `go test`; `go test -fuzz FuzzAcquire ./lease/` explores further.

// fuzzReplies are the reply subjects a fuzz input chooses from; the first
// fuzzInboxes are inboxes the manager answers.
var fuzzReplies = []string{
	"_INBOX.fuzz", "_INBOX_executor_a.fuzz", // answered
	"$KV." + jetstream.NamesFor(lease.DefaultPrefix).Leaders + "." + node, "$JS.API.STREAM.DELETE", "$SYS.fuzz",
	"lease.events.fuzz", lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire), "_INBOXX.fuzz", "fuzz",
}

const fuzzInboxes = 2

// fuzzSeeds are bodies every subject's corpus starts with.
var fuzzSeeds = []string{
	``, `{}`, `null`, `[]`, `"x"`, `{"`, `{}{}`, "\x00\xff", `{"request_id":1}`,
	`{"request_id":"r1","holder":"h","slots":1}`,
	`{"request_id":"r1","holder":"h","slots":1,"secret":"s","tenant":"t","priority":3,"poll_ms":1000,"wait_ms":50,"no_wait":true}`,
	`{"request_id":"r1","holder":"h","slots":1,"tenant":"t","key":"customer-7"}`,
	`{"request_id":"r1","holder":"h","slots":1,"slots":2}`, // duplicate key
	`{"REQUEST_ID":"r1","HOLDER":"h","SLOTS":1}`,           // case-folded keys
	`{"request_id":"r1","holder":"h","ſlots":1}`,           // a key that folds to "slots"
	`{"request_id":"r 1","holder":"h\u0000","slots":1}`,    // control character
	`{"request_id":"r1","holder":"\xff\xfe","slots":1}`,    // invalid UTF-8
	`{"request_id":"r1","holder":"h","slots":-1}`,          // negative
	`{"request_id":"r1","holder":"h","slots":1e400}`,       // out of range
	`{"request_id":"r1","holder":"h","slots":9223372036854775808}`,
	`{"request_id":"r1","holder":"h","slots":"1"}`, // wrong type
	`{"lease_id":"held","token":1,"secret":"s"}`,
	`{"lease_id":"held","token":-1}`,
	`{"lease_id":"held","token":18446744073709551616}`,
	`{"lease_id":"../x","token":1}`,
	`{"set":{"p":3}}`, `{"set":{"q":1}}`, `{"set":{"p":0}}`, `{"set":{"a.b":1}}`, `{"set":{"":1}}`,
	`{"remove":["p"]}`, `{"remove":["p"],"force":true}`, `{"remove":["nope"]}`, `{"reset":true}`,
	`{"set":{"p":1},"remove":["p"]}`,
	`{"rates":{"p":{"rate":"5/s","burst":2}}}`, `{"rates":{"p":{"rate":"off"}}}`, `{"rates":{"p":{"burst":3}}}`,
	`{"rates":{"new":{"rate":"1/h"}}}`, `{"rates":{"p":{"rate":"1/h","burst":1099511627776}}}`, `{"rates":{"p":{"rate":"-1/s"}}}`,
	`{"rates":{"p":{"rate":"5/s"}},"remove":["p"]}`, `{"rates":{"p":{"rate":"5/s","rate":"6/s"}}}`,
	`{"request_id":"` + strings.Repeat("a", 200) + `","holder":"h","slots":1}`,
	`{"request_id":"r1","holder":"` + strings.Repeat("é", 5000) + `","slots":1}`,
	`{"lease_id":"held","token":1` + strings.Repeat("0", 10000) + `}`,
	`{"set":{"` + strings.Repeat("p", 10000) + `":1}}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
}

// fuzzNode is one manager and the connections a fuzz test drives it with.
type fuzzNode struct {
	nc      *nats.Conn
	client  *lease.Client
	refused *atomic.Int64
	sent    atomic.Int64
	// reset, if set, undoes what an input may have changed before the
	// node is checked (FuzzResize).
	reset func(t *testing.T)
}

func startFuzzNode(f *testing.F) *fuzzNode {
	srv := harness.StartServer(f)
	fn := &fuzzNode{refused: new(atomic.Int64)}
	harness.StartManager(f, srv.URL, manager.Config{Node: node, TTL: time.Second,
		Pools:         []manager.PoolConfig{{Name: "p", Capacity: 2}, {Name: "health", Capacity: 1}},
		ReplyPrefixes: []string{"_INBOX_executor_a"}, ReplyRefused: func() { fn.refused.Add(1) }})
	fn.nc = harness.Connect(f, srv.URL)
	fn.client = harness.Client(f, srv.URL, node)
	return fn
}

// fuzz registers the seeds and runs the check for subject.
func fuzz(f *testing.F, subject string, extraSeeds ...string) {
	fn := startFuzzNode(f)
	for i, s := range append(fuzzSeeds, extraSeeds...) {
		f.Add([]byte(s), uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, choice uint8) {
		fn.check(t, subject, body, choice)
	})
}

func (fn *fuzzNode) check(t *testing.T, subject string, body []byte, choice uint8) {
	if len(body) > int(fn.nc.MaxPayload())-1024 {
		t.Skip("body beyond the server's max payload")
	}
	i := int(choice) % len(fuzzReplies)
	reply := fuzzReplies[i] + "." + strconv.FormatInt(fn.sent.Add(1), 10)
	sub, err := fn.nc.SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	refusedBefore := fn.refused.Load()
	if err := fn.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: body}); err != nil {
		t.Fatal(err)
	}
	if i < fuzzInboxes {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no answer on inbox %s to %q: %v", reply, body, err)
		}
		checkAnswer(t, body, msg, fn.nc.MaxPayload())
		if got := fn.refused.Load(); got != refusedBefore {
			t.Fatalf("an inbox reply subject %s counted as refused", reply)
		}
	} else {
		harness.Eventually(t, 10*time.Second, "the refusal of reply subject "+reply, func() bool {
			return fn.refused.Load() > refusedBefore
		})
		if err := fn.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if msg, err := sub.NextMsg(10 * time.Millisecond); err == nil {
			t.Fatalf("answer %q on reply subject %s, which is not an inbox", msg.Data, reply)
		}
	}
	if fn.reset != nil {
		fn.reset(t)
	}
	fn.stillServes(t)
}

// checkAnswer: one JSON reply, within the payload limit, with a status;
// an error with a code and a bounded message.
func checkAnswer(t *testing.T, body []byte, msg *nats.Msg, maxPayload int64) {
	t.Helper()
	if int64(len(msg.Data)) > maxPayload {
		t.Fatalf("answer of %d bytes to %q", len(msg.Data), body)
	}
	if svc := msg.Header.Get("Nats-Service-Error"); len(svc) > 1024 {
		t.Fatalf("a %d-byte Nats-Service-Error header", len(svc))
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Status == "" {
		t.Fatalf("malformed answer %q to %q: %v", msg.Data, body, err)
	}
	if r.Status == lease.StatusError && (r.Error == nil || r.Error.Code == "" || len(r.Error.Message) > 1024) {
		t.Fatalf("error answer %q to %q: want a code and a bounded message", msg.Data, body)
	}
	if r.Error != nil && r.Error.Code == lease.CodeInternal {
		t.Fatalf("internal error answering %q: %s", body, r.Error.Message)
	}
}

// stillServes acquires and releases a slot of the pool nobody fuzzes.
func (fn *fuzzNode) stillServes(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := fn.client.Acquire(ctx, "health", 1)
	if err != nil {
		t.Fatalf("the node no longer grants: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("the node no longer releases: %v", err)
	}
}

func verbSubject(verb string) string { return lease.Subject(lease.DefaultPrefix, node, "p", verb) }

func FuzzAcquire(f *testing.F) { fuzz(f, verbSubject(lease.VerbAcquire)) }
func FuzzRenew(f *testing.F)   { fuzz(f, verbSubject(lease.VerbRenew)) }
func FuzzRelease(f *testing.F) { fuzz(f, verbSubject(lease.VerbRelease)) }
func FuzzCancel(f *testing.F) {
	fuzz(f, verbSubject(lease.VerbCancel), `{"request_id":"r1","holder":"h"}`, `{"request_id":"r1"}`)
}
func FuzzStats(f *testing.F) { fuzz(f, lease.StatsSubject(lease.DefaultPrefix, node)) }

// FuzzResize may remove or shrink the health pool: each input is followed
// by a reset to the configured pools before the node is checked.
func FuzzResize(f *testing.F) {
	fn := startFuzzNode(f)
	fn.reset = func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := fn.client.Resize(ctx, lease.ResizeRequest{Reset: true}); err != nil {
			t.Fatalf("resetting the pools: %v", err)
		}
	}
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, choice uint8) {
		fn.check(t, lease.ResizeSubject(lease.DefaultPrefix, node), body, choice)
	})
}
