package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
)

// The confused-deputy attack (issue 28): JetStream answers an API request
// or a direct get on whatever reply subject the requester wrote, as the
// server, inside the requester's account, and a direct get's answer
// carries the stored message's headers. So an attacker stores bodies and
// headers it chooses in a bucket it may write, and bounces them with
// direct gets onto every subject the managers' state lives on.

// ForgedHeader marks every message the attacks store, so a spy in the
// managers' account can tell them from the managers' own traffic.
const ForgedHeader = "X-Slotlease-Forged"

// forgedMsgs are what the attacker stores: a resize that would grow,
// remove and starve pools, a lease record, and the KV operation and
// rollup headers that delete or wipe a bucket. (The job buckets refuse a
// per-message TTL, so the stored record carries none.)
func ForgedMsgs(node, pool string) []*nats.Msg {
	resize := fmt.Sprintf(`{"set":{%q:99},"remove":["default"],"force":true,"rates":{%q:{"rate":"1/h"}}}`, pool, pool)
	record := fmt.Sprintf(`{"id":"forged","node":%q,"pool":%q,"holder":"mallory","slots":1,"token":1,"manager":"forged","ttl_ms":15000}`, node, pool)
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	return []*nats.Msg{
		{Data: []byte(resize), Header: hdr()},
		{Data: []byte(record), Header: hdr()},
		{Header: hdr("KV-Operation", "DEL")},
		{Header: hdr("KV-Operation", "PURGE")},
		{Header: hdr("Nats-Rollup", "sub")},
		{Header: hdr("Nats-Rollup", "all")},
	}
}

// bounceTargets are the subjects an attacker aims JetStream's answers at:
// the lease, leadership and pool keys, the control and request subjects,
// the events and the executors' disconnect advisories.
func BounceTargets(node, pool, heldID string) []string {
	n := jetstream.NamesFor(lease.DefaultPrefix)
	out := []string{
		"$KV." + n.Leases + "." + lease.RecordKey(node, pool, heldID),
		"$KV." + n.Leases + "." + lease.RecordKey(node, pool, "forged"),
		"$KV." + n.Leaders + "." + node,
		"$KV." + n.Leaders + "." + lease.ClusterNode,
		"$KV." + n.Leaders + ".cluster.candidates.forged",
		"$KV." + n.Pools + "." + node,
		lease.ResizeSubject(lease.DefaultPrefix, node),
		lease.StatsSubject(lease.DefaultPrefix, node),
		lease.EventSubject(lease.DefaultPrefix, node, pool, lease.EventGranted),
		jetstream.ExecutorDisconnectSubject,
		"$JS.API.STREAM.PURGE.KV_" + n.Leases,
	}
	for _, verb := range []string{lease.VerbAcquire, lease.VerbRenew, lease.VerbRelease, lease.VerbCancel} {
		out = append(out, lease.Subject(lease.DefaultPrefix, node, pool, verb))
	}
	return out
}

// bounceWithDirectGets stores forgedMsgs in bucket (one the attacker may
// write, in its own account) and aims a direct get of each, and a stream
// info request, at every target. It returns once the server answered all
// of them: a last direct get, on the attacker's own inbox, comes after.
func BounceWithDirectGets(t testing.TB, nc *nats.Conn, bucket, nonce string, msgs []*nats.Msg, targets []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	get := func(i int) string {
		return fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%s.forged%d", bucket, bucket, i)
	}
	// One at a time: a rollup of everything wipes what came before it.
	for i, m := range msgs {
		m.Subject = fmt.Sprintf("$KV.%s.forged%d", bucket, i)
		m.Header.Set(ForgedHeader, nonce)
		if len(m.Data) == 0 {
			m.Data = []byte(nonce)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("storing forged message %d: %v", i, err)
		}
		for _, target := range targets {
			if err := nc.PublishRequest(get(i), target, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nc.Request(get(i), nil, 10*time.Second); err != nil {
			t.Fatalf("the direct gets were not answered: %v", err)
		}
	}
	for _, target := range targets {
		if err := nc.PublishRequest("$JS.API.STREAM.INFO.KV_"+bucket, target, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The last message survives the rollup of everything before it.
	if _, err := nc.Request(get(len(msgs)-1), nil, 10*time.Second); err != nil {
		t.Fatalf("the direct gets were not answered: %v", err)
	}
}

// bounceWithRequests aims every request the attacker may send (each
// answered by the server or a manager, in whatever account) at every
// target: for a role without JetStream of its own.
func BounceWithRequests(t testing.TB, nc *nats.Conn, subjects []string, nonce string, targets []string) {
	t.Helper()
	for _, target := range targets {
		for _, s := range subjects {
			if err := nc.PublishMsg(&nats.Msg{Subject: s, Reply: target, Header: nats.Header{ForgedHeader: []string{nonce}}, Data: []byte(`{"seq":1,"last_by_subj":"lease.events.>"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// ManagersSpy watches the managers' account for anything the attacks
// bounced there.
type ManagersSpy struct {
	nc    *nats.Conn
	nonce string

	mu          sync.Mutex
	crossed     []string // forged messages that reached a protected subject
	noReply     int      // forged messages that reached a request subject, without a reply
	withReply   []string // forged messages that reached a request subject with a reply
	requestSubs map[string]bool
}

// spyOnManagers subscribes, with the managers' rights, to every subject
// of their state and to the imported request subjects.
func SpyOnManagers(t testing.TB, mgr *nats.Conn, nonce string) *ManagersSpy {
	t.Helper()
	s := &ManagersSpy{nc: mgr, nonce: nonce}
	forged := func(m *nats.Msg) bool {
		return m.Header.Get(ForgedHeader) == nonce || strings.Contains(string(m.Data), nonce)
	}
	for _, subj := range []string{"$KV.>", "$SYS.>", lease.DefaultPrefix + ".events.>", lease.DefaultPrefix + ".*.resize"} {
		if _, err := mgr.Subscribe(subj, func(m *nats.Msg) {
			if forged(m) {
				s.mu.Lock()
				s.crossed = append(s.crossed, m.Subject)
				s.mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{lease.DefaultPrefix + ".*.*.*", lease.DefaultPrefix + ".*.stats", "$SRV.>"} {
		if _, err := mgr.Subscribe(subj, func(m *nats.Msg) {
			if !forged(m) {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if m.Reply == "" {
				s.noReply++
			} else if !strings.HasPrefix(m.Reply, lease.ServiceReplyPrefix+".") {
				s.withReply = append(s.withReply, m.Subject+" reply "+m.Reply)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// check fails the test if a forged message reached the managers' state, or
// a request subject with a reply the attacker chose. It flushes first: a
// message the server delivered to the spy before comes before the PONG.
func (s *ManagersSpy) Check(t testing.TB, who string) (noReply int) {
	t.Helper()
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.crossed) > 0 {
		t.Errorf("%s: forged messages reached the managers' state: %v", who, s.crossed)
	}
	if len(s.withReply) > 0 {
		t.Errorf("%s: forged requests reached the managers with a reply subject of the attacker's: %v", who, s.withReply)
	}
	n := s.noReply
	s.crossed, s.withReply, s.noReply = nil, nil, 0
	return n
}

// DiscoveryRequests are the discovery subjects clients may request by
// name ($SRV.<verb>.leasemgr).
func DiscoveryRequests() []string {
	var out []string
	for _, verb := range lease.DiscoveryVerbs {
		out = append(out, "$SRV."+verb+"."+lease.ServiceName)
	}
	return out
}
