package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// A grant is sent without an acknowledgement, and its holder told once
// the watch shows it stored (grantStore.put). Each way that write can go
// wrong still ends in one stored record, the one the holder is told of,
// and in the slot counted once.
func TestGrantSentWithoutAckSurvivesItsLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    lossyStore
	}{
		// Lost on its way: not seen within the echo wait, not found in
		// the store, so written again with an acknowledgement.
		{"lost", lossyStore{drop: true}},
		// Stored, but the watch never shows it: found in the store.
		{"unseen", lossyStore{blind: true}},
		// Refused at once: written with an acknowledgement.
		{"refused", lossyStore{fail: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.s
			s.grant = "grant-" + tc.name
			n, c := startLossy(t, &s)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := c.Acquire(ctx, "p", 1, lease.WithRequestID(s.grant))
			if err != nil {
				t.Fatal(err)
			}
			if id, rev := storedAt(t, n, lease.RecordKey(node, "p", s.grant)); id != l.ID() || rev != l.Token() {
				t.Fatalf("its key holds %s revision %d, the holder was told %s revision %d", id, rev, l.ID(), l.Token())
			}
			if st := harness.PoolStats(t, n.Manager, "p"); st.InUse != 1 {
				t.Fatalf("%d slots in use, want 1", st.InUse)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 10*time.Second, "the pool idle", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
		})
	}
}
