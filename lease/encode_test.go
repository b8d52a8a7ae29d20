package lease

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// sameJSON checks that got decodes to the same value as json.Marshal(v).
func sameJSON(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("encoded\n%s\nencoding/json\n%s", got, want)
	}
}

func randomString(r *rand.Rand) string {
	pieces := []string{"", "a", "job-42", `"`, `\`, "\x00", "\x1f", "\n", "\r", "\t", "<", ">", "&", "é", "\u2028", "\u2029", "\xff", "日本", " ", "/"}
	var s string
	for range r.IntN(5) {
		s += pieces[r.IntN(len(pieces))]
	}
	return s
}

func TestEncodersMatchEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{{}, time.Date(2026, 11, 22, 9, 10, 1, 502236011, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))}
	for range 2000 {
		rec := Record{
			ID: randomString(r), Node: randomString(r), Pool: randomString(r), Slots: r.Int64N(3) - 1, Holder: randomString(r),
			Token: r.Uint64N(3) * 1e18, TTLMs: r.Int64N(20000), GrantedAt: times[r.IntN(len(times))], ExpiresAt: times[r.IntN(len(times))],
			Term: r.Uint64N(3) * 1e18, Manager: randomString(r), Secret: randomString(r), Tenant: randomString(r), Priority: r.IntN(3) - 1,
			ConnServer: randomString(r), ConnID: r.Uint64N(3) * 1e18, DisconnectGraceMs: r.Int64N(3) * 400,
		}
		sameJSON(t, appendRecord(nil, &rec), rec)

		reply := Reply{Status: randomString(r), Position: r.IntN(3), Existing: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			reply.Lease = &rec
		}
		got, err := appendReply(nil, &reply)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got, reply)

		ev := Event{Kind: EventKind(randomString(r)), Time: times[r.IntN(len(times))], Node: randomString(r), Pool: randomString(r),
			RequestID: randomString(r), LeaseID: randomString(r), Holder: randomString(r), Slots: r.Int64N(3), Tenant: randomString(r),
			Token: r.Uint64N(3), Position: r.IntN(3), WaitMs: r.Int64N(3), Code: Code(randomString(r)), Message: randomString(r),
			Stats: pools.Stats{Capacity: r.Int64N(5), InUse: r.Int64N(5), Available: r.Int64N(5), QueuedRequests: r.IntN(5), QueuedSlots: r.Int64N(5),
				Policy: pools.Policy(randomString(r)), MaxQueue: r.IntN(3), TenantCap: r.Int64N(3)}}
		sameJSON(t, ev.AppendJSON(nil), ev)
	}
	// Replies with stats or an error take encoding/json's path.
	for _, reply := range []Reply{
		{Status: StatusError, Error: &Error{Code: CodeUnknownPool, Message: "no pool"}},
		{Status: StatusOK, Node: "n", Pools: []PoolStats{{Name: "p"}}},
	} {
		got, err := appendReply(nil, &reply)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got, reply)
	}
}
