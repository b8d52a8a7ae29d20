package manager_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// maxAnswer is what a bounded error reply must fit in: a few echoed
// values of lease.MaxEcho bytes and the surrounding text.
const maxAnswer = 2048

// TestHugeFieldsGetBoundedAnswers sends requests with a megabyte in one
// field each. Before the echo was bounded the error reply exceeded the max
// payload (the client heard nothing) and rejected events carried the whole
// field into the event stream.
func TestHugeFieldsGetBoundedAnswers(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	huge := strings.Repeat("é", 500_000) // ~1 MB, multi-byte so a careless cut breaks UTF-8
	hugeID := strings.Repeat("a", 1_000_000)
	hugeNumber := "1" + strings.Repeat("0", 1_000_000)

	var mu sync.Mutex
	var events []json.RawMessage
	if _, err := nc.Subscribe(lease.EventFilter(lease.DefaultPrefix, node, "", ""), func(msg *nats.Msg) {
		mu.Lock()
		var evs []json.RawMessage // one message holds the events of its subject since the one before
		if err := json.Unmarshal(msg.Data, &evs); err != nil {
			evs = []json.RawMessage{msg.Data} // reported below
		}
		events = append(events, evs...)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	acquire := lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire)
	renew := lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbRenew)
	resize := lease.ResizeSubject(lease.DefaultPrefix, node)
	cases := []struct {
		name, subject string
		body          any
	}{
		{"acquire request_id", acquire, lease.AcquireRequest{RequestID: hugeID, Holder: "h", Slots: 1}},
		{"acquire holder", acquire, lease.AcquireRequest{RequestID: "r1", Holder: huge, Slots: 1}},
		{"acquire tenant", acquire, lease.AcquireRequest{RequestID: "r2", Holder: "h", Tenant: huge, Slots: 1}},
		{"acquire bad id and holder", acquire, lease.AcquireRequest{RequestID: hugeID[:500_000] + "!", Holder: huge[:400_000], Slots: 1}},
		{"renew lease_id", renew, lease.RenewRequest{LeaseID: huge, Token: 1}},
		{"renew token literal", renew, `{"lease_id":"x","token":` + hugeNumber + `}`},
		{"resize set", resize, lease.ResizeRequest{Set: map[string]int64{huge: 1}}},
		{"resize remove", resize, lease.ResizeRequest{Remove: []string{hugeID}}},
	}
	for _, tc := range cases {
		data, ok := tc.body.(string)
		if !ok {
			b, err := json.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			data = string(b)
		}
		msg, err := nc.Request(tc.subject, []byte(data), 10*time.Second)
		if err != nil {
			t.Fatalf("%s (%d bytes): no answer: %v", tc.name, len(data), err)
		}
		var r lease.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatalf("%s: malformed answer %q: %v", tc.name, msg.Data, err)
		}
		if r.Status != lease.StatusError || r.Error == nil || r.Error.Code != lease.CodeBadRequest && r.Error.Code != lease.CodeUnknownPool {
			t.Fatalf("%s: answer %s, want a bad_request or unknown_pool error", tc.name, msg.Data)
		}
		if len(msg.Data) > maxAnswer || !utf8.ValidString(r.Error.Message) {
			t.Fatalf("%s: answer of %d bytes (valid UTF-8: %v): %.300s", tc.name, len(msg.Data), utf8.ValidString(r.Error.Message), msg.Data)
		}
		t.Logf("%s: %d-byte answer: %s", tc.name, len(msg.Data), r.Error.Message)
	}

	// Every acquire above was rejected with an event; each stays small.
	harness.Eventually(t, 10*time.Second, "four rejected events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 4
	})
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range events {
		var e lease.Event
		if err := json.Unmarshal(ev, &e); err != nil {
			t.Fatalf("event %.200q: %v", ev, err)
		}
		if len(ev) > maxAnswer {
			t.Fatalf("a %d-byte %s event: %.300s", len(ev), e.Kind, ev)
		}
		if e.Kind != lease.EventRejected {
			t.Fatalf("unexpected %s event: %s", e.Kind, ev)
		}
	}
}

// TestEchoesAreClippedOnce: a value longer than lease.MaxEcho is cut once,
// and its marker counts the bytes of the value left out. The pool name of
// an unknown pool was clipped before errorf clipped it again, so a 200-byte
// name said "…(+14 bytes)" (the first marker's bytes) instead of
// "…(+72 bytes)"; the snapshot request's decode error did the same.
func TestEchoesAreClippedOnce(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	name := strings.Repeat("n", 200)
	want := `"` + name[:lease.MaxEcho] + `…(+72 bytes)"`
	bodies := map[string]any{
		lease.VerbAcquire: lease.AcquireRequest{RequestID: "r", Holder: "h", Slots: 1},
		lease.VerbRenew:   lease.RenewRequest{LeaseID: "r", Token: 1},
		lease.VerbRelease: lease.ReleaseRequest{LeaseID: "r", Token: 1},
		lease.VerbCancel:  lease.CancelRequest{RequestID: "r", Holder: "h"},
	}
	for verb, body := range bodies {
		r := harness.Request(t, nc, lease.Subject(lease.DefaultPrefix, node, name, verb), body)
		if r.Error == nil || r.Error.Code != lease.CodeUnknownPool || !strings.Contains(r.Error.Message, want) {
			t.Errorf("%s on a pool of a 200-byte name: %+v, want unknown_pool quoting %s", verb, r.Error, want)
		}
	}

	// encoding/json's error quotes the unknown field whole: 322 bytes, of
	// which 194 are left out.
	field := strings.Repeat("u", 300)
	r := harness.Request(t, nc, lease.SnapshotSubject(lease.DefaultPrefix, node), `{"`+field+`":1}`)
	if r.Error == nil || r.Error.Code != lease.CodeBadRequest || !strings.HasSuffix(r.Error.Message, `json: unknown field "`+field[:128-len(`json: unknown field "`)]+"…(+194 bytes)") {
		t.Errorf("a snapshot request with a 300-byte unknown field: %+v, want bad_request clipped once, 194 bytes left out", r.Error)
	}
}
