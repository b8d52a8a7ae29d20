package jobs_test

import (
	"context"
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/harness"
)

// brokers are the running brokers, one per test server (by URL): what
// leasemgr runs beside the queue. Every broker of one server signs with the
// same key, as a cluster's do.
var brokers = struct {
	sync.Mutex
	by map[string]*jobs.Broker
}{by: map[string]*jobs.Broker{}}

// testKey is the broker key of the server at url.
func testKey(url string) []byte {
	sum := sha256.Sum256([]byte("jobs test key " + url))
	return sum[:]
}

// ensureBroker starts the broker of the server at url, once (the queue
// must exist); it stops when the test that started it ends.
func ensureBroker(t *testing.T, url string) {
	t.Helper()
	brokers.Lock()
	defer brokers.Unlock()
	if brokers.by[url] != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := jobs.StartBroker(ctx, jobs.BrokerConfig{Conn: harness.Connect(t, url), Key: testKey(url), Logger: harness.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	brokers.by[url] = b
	t.Cleanup(func() {
		b.Close()
		brokers.Lock()
		delete(brokers.by, url)
		brokers.Unlock()
	})
}
