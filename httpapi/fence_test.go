package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

type flipFence struct{ valid atomic.Bool }

func (f *flipFence) Valid() bool  { return f.valid.Load() }
func (f *flipFence) Term() uint64 { return 7 }

// /readyz turns 503 the moment the active manager's fence is invalid:
// before the manager (or whoever owns it) noticed the end of its term.
func TestNotReadyOnceTheFenceIsInvalid(t *testing.T) {
	srv := harness.StartServer(t)
	fence := &flipFence{}
	fence.valid.Store(true)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 10 * time.Second, Fence: fence,
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}})
	ts := serveSource(t, srv.URL, func() *manager.Manager { return n.Manager })
	readyz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz with a valid fence: %d %q", code, body)
	}
	fence.valid.Store(false)
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "leadership term is over") {
		t.Fatalf("readyz with an invalid fence: %d %q, want 503 naming the term's end", code, body)
	}
}
