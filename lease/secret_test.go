package lease_test

import (
	"context"
	"encoding/base64"
	"maps"
	"math/bits"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// commonPrefix is the length of the longest prefix a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Issue 38: the client drew a lease's secret from the NUID generator right
// after its request id, so the secret was the public lease id plus 33..333
// in its last digits (22 characters, the first 12 to 21 the same). 10,000
// acquires through the real client and manager: every secret is 16 bytes
// in canonical base64url, all are distinct, none shares a prefix of 6
// characters with its lease id nor one of 8 with another secret, and their
// bits are balanced. (4 characters of 64 would match by chance in about
// one run of 1,600; 6 in one of 7 million, 8 of another secret in one of
// 5 million.)
func TestSecretsAreRandomAndApartFromTheID(t *testing.T) {
	t.Parallel()
	const n, workers = 10000, 32
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: node, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2 * workers}}})
	c := harness.Client(t, srv.URL, node)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var mu sync.Mutex
	secrets := make(map[string]string, n) // secret -> lease id
	var failed error
	var wg sync.WaitGroup
	todo := make(chan struct{}, n)
	for range n {
		todo <- struct{}{}
	}
	close(todo)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for range todo {
				l, err := c.Acquire(ctx, "p", 1)
				if err == nil {
					err = l.Release(ctx)
				}
				mu.Lock()
				if err != nil {
					failed = err
				} else {
					secrets[l.Record().Secret] = l.ID()
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%d acquires and releases in %v", n, time.Since(start).Round(time.Millisecond))
	if len(secrets) != n {
		t.Fatalf("%d distinct secrets among %d leases", len(secrets), n)
	}
	ones := 0
	for secret, id := range secrets {
		b, err := base64.RawURLEncoding.DecodeString(secret)
		if err != nil || len(b) != lease.SecretBytes || base64.RawURLEncoding.EncodeToString(b) != secret {
			t.Fatalf("secret %q: %d bytes (%v), want %d in canonical base64url", secret, len(b), err, lease.SecretBytes)
		}
		if p := commonPrefix(secret, id); p >= 6 {
			t.Fatalf("secret %q shares %d characters with its lease id %q", secret, p, id)
		}
		for _, x := range b {
			ones += bits.OnesCount8(x)
		}
	}
	sorted := slices.Sorted(maps.Keys(secrets))
	for i := 1; i < len(sorted); i++ {
		if p := commonPrefix(sorted[i-1], sorted[i]); p >= 8 {
			t.Fatalf("secrets %q and %q share %d characters: drawn in sequence, not at random", sorted[i-1], sorted[i], p)
		}
	}
	// n x 128 bits, half of them ones: the standard deviation is 566.
	total := n * lease.SecretBytes * 8
	if d := ones - total/2; d < -3400 || d > 3400 {
		t.Fatalf("%d of %d secret bits are ones: %d from half, more than 6 standard deviations", ones, total, d)
	}
}
