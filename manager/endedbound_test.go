package manager

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// The memory of ended requests keeps at most maxEnded ends, each for
// endedFor, and forgets the oldest first; an id that ends again is
// remembered from its latest end.
func TestEndedRequestsAreBounded(t *testing.T) {
	var n endedRequests
	now := time.Unix(1000, 0)
	cancelled := errorf(lease.CodeCancelled, "cancelled by the holder")
	req := func(id string) *lease.AcquireRequest {
		return &lease.AcquireRequest{RequestID: id, Holder: "h", Secret: "s"}
	}
	for i := range maxEnded + 10 {
		n.add("p", fmt.Sprint(i), "h", "s", cancelled, now)
	}
	if len(n.byKey) != maxEnded || len(n.order)-n.head != maxEnded {
		t.Fatalf("%d ends remembered (%d in order), want %d", len(n.byKey), len(n.order)-n.head, maxEnded)
	}
	if _, ok := n.recall("p", req("9"), now); ok {
		t.Fatal("the oldest end is still remembered past the bound")
	}
	if _, ok := n.recall("p", req("10"), now); !ok {
		t.Fatal("the oldest end within the bound is forgotten")
	}
	if cap(n.order) > 4*maxEnded {
		t.Fatalf("the order grew to %d places", cap(n.order))
	}
	// Ended again: remembered from its latest end, when its first place
	// is forgotten.
	later := now.Add(endedFor / 2)
	n.add("p", "10", "h", "s", cancelled, later)
	n.add("p", "x", "h", "s", cancelled, now.Add(endedFor+time.Second))
	if _, ok := n.recall("p", req("10"), now.Add(endedFor+time.Second)); !ok {
		t.Fatal("an id that ended again is forgotten with its first end")
	}
	if len(n.byKey) != 2 {
		t.Fatalf("%d ends remembered after endedFor, want 2", len(n.byKey))
	}
	// Past endedFor it is not recalled, even before it is forgotten.
	if _, ok := n.recall("p", req("x"), now.Add(2*endedFor+2*time.Second)); ok {
		t.Fatal("an end older than endedFor is recalled")
	}
	// Another holder or secret is another request.
	other := req("x")
	other.Secret = "t"
	if _, ok := n.recall("p", other, now.Add(endedFor+time.Second)); ok {
		t.Fatal("recalled for another secret")
	}
	n.forget("p", "x")
	if _, ok := n.recall("p", req("x"), now.Add(endedFor+time.Second)); ok {
		t.Fatal("recalled after forget")
	}
}

// The memory of ended requests holds at most about 8 MB: maxEnded ends at
// the protocol's longest request ids and holders and secrets (kept as a
// hash), each with its own 300-byte error message (7.7 MB measured).
func TestEndedRequestsMemory(t *testing.T) {
	holder, secret := strings.Repeat("h", lease.MaxHolderLen), strings.Repeat("s", lease.MaxSecretLen)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var n endedRequests
	now := time.Now()
	for i := range maxEnded {
		id := fmt.Sprintf("%0128d", i) // lease.MaxRequestIDLen, kept by the memory
		n.add("pool", id, holder, secret, errorf(lease.CodeWaitExpired, "%s", strings.Repeat("m", 300)), now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d ends hold %.1f MB (%d bytes each, ids and errors included)", maxEnded, float64(held)/(1<<20), held/maxEnded)
	if held > 9<<20 { // the documented 8 MB, and room for the map's next growth
		t.Errorf("%d ends hold %d bytes, over the documented 8 MB", maxEnded, held)
	}
	runtime.KeepAlive(&n)
}
