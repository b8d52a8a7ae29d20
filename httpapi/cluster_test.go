package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// /v1/cluster lists every node with holders, waiters and (if asked)
// history; a node whose manager stops is kept, stale, with what it last
// showed; bad parameters get a 400 naming them.
func TestClusterView(t *testing.T) {
	e := newEnv(t)
	n2 := harness.StartManager(t, e.url, manager.Config{Node: "n2", Pools: []manager.PoolConfig{{Name: "io", Capacity: 3}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := harness.Client(t, e.url, "n2", lease.WithHolder("h-io")).Acquire(ctx, "io", 2, lease.WithSecret("sekrit-io"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	var c httpapi.Cluster
	e.getJSON("/v1/cluster", &c)
	if c.Prefix != lease.DefaultPrefix || len(c.Nodes) != 2 || c.Nodes[0].Node != "n1" || c.Nodes[1].Node != "n2" {
		t.Fatalf("cluster %+v", c)
	}
	io := c.Nodes[1].Pools[0]
	if c.Nodes[1].Stale || io.Name != "io" || io.InUse != 2 || len(io.Holders) != 1 || io.Holders[0].Holder != "h-io" || io.History != nil {
		t.Fatalf("n2 %+v", c.Nodes[1])
	}
	e.getJSON("/v1/cluster?node=n2&history=1", &c)
	if len(c.Nodes) != 1 || c.Nodes[0].Node != "n2" || len(c.Nodes[0].Pools[0].History) == 0 {
		t.Fatalf("one node with history: %+v", c)
	}
	if _, body := e.do(http.MethodGet, "/v1/cluster?history=1"); strings.Contains(body, "sekrit") {
		t.Fatalf("a secret in /v1/cluster: %s", body)
	}

	if err := n2.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	e.getJSON("/v1/cluster", &c)
	if len(c.Nodes) != 2 || !c.Nodes[1].Stale || c.Nodes[1].Reason == "" || c.Nodes[1].LastSeen.IsZero() || len(c.Nodes[1].Pools) != 1 || c.Nodes[0].Stale {
		t.Fatalf("after n2 stopped: %+v", c)
	}
	e.getJSON("/v1/cluster?node=n2", &c)
	if len(c.Nodes) != 1 || !c.Nodes[0].Stale || !strings.Contains(c.Nodes[0].Reason, "n2") {
		t.Fatalf("n2 asked alone after it stopped: %+v", c)
	}

	for path, want := range map[string]string{
		"/v1/cluster?history=yes":                     "history",
		"/v1/cluster?node=a.b":                        "node",
		"/v1/cluster?node=" + strings.Repeat("x", 65): "node",
		"/v1/cluster/events?limit=0":                  "limit",
		"/v1/cluster/events?limit=501":                "limit",
		"/v1/cluster/events?limit=x":                  "limit",
	} {
		resp, body := e.do(http.MethodGet, path)
		wantStatus(t, resp, body, http.StatusBadRequest)
		var b httpapi.ErrorBody
		if json.Unmarshal([]byte(body), &b) != nil || b.Error.Code != "bad_request" || !strings.HasPrefix(b.Error.Message, want) || len(body) > 300 {
			t.Errorf("%s: %s", path, body)
		}
	}
	// Without an event stream there is nothing to replay, and it says so.
	resp, body := e.do(http.MethodGet, "/v1/cluster/events")
	wantStatus(t, resp, body, http.StatusServiceUnavailable)
	if !strings.Contains(body, "no event stream") {
		t.Errorf("events without a stream: %s", body)
	}
}

// /v1/cluster/events replays every node's last events from the event
// stream, oldest first; /v1/cluster/stream follows every node's events.
func TestClusterEvents(t *testing.T) {
	srv := harness.StartServer(t)
	stream := jetstream.NamesFor(lease.DefaultPrefix).Events
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := jetstream.EnsureAuditStream(ctx, harness.Connect(t, srv.URL), jetstream.AuditConfig{
		Stream: stream, Subjects: lease.DefaultPrefix + ".events.>", MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		harness.StartManager(t, srv.URL, manager.Config{Node: n, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	}
	ts := serveSource(t, srv.URL, func() *manager.Manager { return nil }, httpapi.WithEventStream(stream))

	// Three holds on each node: 3 events each (requested, granted, released).
	for _, n := range []string{"n1", "n2"} {
		c := harness.Client(t, srv.URL, n, lease.WithHolder("h-"+n))
		for range 3 {
			l, err := c.Acquire(ctx, "p", 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The stream stores events as they pass: wait for the last one.
	get := func(limit string) []lease.Event {
		t.Helper()
		var evs []lease.Event
		harness.Eventually(t, 5*time.Second, "the events in the stream", func() bool {
			resp, err := http.Get(ts.URL + "/v1/cluster/events" + limit)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			evs = nil
			if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&evs) != nil {
				return false
			}
			if limit != "" {
				return len(evs) > 0 // asked once the stream was complete
			}
			released := 0
			for _, ev := range evs {
				if ev.Node == "n2" && ev.Kind == lease.EventReleased {
					released++
				}
			}
			return released == 3
		})
		return evs
	}
	all := get("")
	count := map[string]int{}
	for _, ev := range all {
		count[ev.Node+" "+string(ev.Kind)]++
	}
	// (A client may send its acquire twice; each send is a "requested".)
	if all[0].Node != "n1" || all[0].Kind != lease.EventRequested || count["n1 granted"] != 3 || count["n2 granted"] != 3 ||
		count["n1 released"] != 3 || count["n2 released"] != 3 {
		t.Fatalf("all events, oldest first: %d, first %+v, counts %v", len(all), all[0], count)
	}
	last := get("?limit=4")
	if len(last) != 4 || last[0] != all[len(all)-4] || last[3] != all[len(all)-1] {
		t.Fatalf("last 4: %+v, want %+v", last, all[len(all)-4:])
	}

	s := openSSEAt(t, ts.URL+"/v1/cluster/stream")
	for _, n := range []string{"n2", "n1"} {
		l, err := harness.Client(t, srv.URL, n, lease.WithHolder("live-"+n)).Acquire(ctx, "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		ev := s.next(t, "a grant on "+n, func(ev sseEvent) bool { return ev.name == "granted" })
		if !strings.Contains(ev.data, `"node":"`+n+`"`) || !strings.Contains(ev.data, "live-"+n) {
			t.Fatalf("grant on %s: %s", n, ev.data)
		}
		_ = l.Release(ctx)
	}
}

// serveSource serves the API of node n1 over a NATSSource on its own
// connection to url until the test ends.
func serveSource(t *testing.T, url string, manager func() *manager.Manager, opts ...httpapi.SourceOption) *httptest.Server {
	t.Helper()
	src, err := httpapi.NewNATSSource(harness.Connect(t, url), lease.DefaultPrefix, "n1", manager, opts...)
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(src)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	t.Cleanup(api.Close) // before ts.Close, which waits for open streams
	return ts
}

// heldReplays is a NATSSource whose event replays wait until released.
type heldReplays struct {
	*httpapi.NATSSource
	entered chan struct{}
	release chan struct{}
}

func (h *heldReplays) RecentEvents(ctx context.Context, limit int) ([]lease.Event, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.NATSSource.RecentEvents(ctx, limit)
}

// The unauthenticated cluster reads are bounded: with four under way, a
// fifth is answered 503 with Retry-After at once, not queued behind them
// (each asks every node or makes a consumer on the event stream).
func TestClusterReadsAreBounded(t *testing.T) {
	srv := harness.StartServer(t)
	m := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	nsrc, err := httpapi.NewNATSSource(harness.Connect(t, srv.URL), lease.DefaultPrefix, "n1", func() *manager.Manager { return m.Manager },
		httpapi.WithEventStream(jetstream.NamesFor(lease.DefaultPrefix).Events))
	if err != nil {
		t.Fatal(err)
	}
	src := &heldReplays{NATSSource: nsrc, entered: make(chan struct{}, 8), release: make(chan struct{})}
	api, err := httpapi.New(src)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	t.Cleanup(api.Close)

	codes := make(chan string, 4)
	for range 4 {
		go func() {
			resp, err := http.Get(ts.URL + "/v1/cluster/events")
			if err != nil {
				codes <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes <- fmt.Sprintf("%d %s", resp.StatusCode, b)
		}()
	}
	for range 4 {
		select {
		case <-src.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("four replays did not start")
		}
	}
	for _, path := range []string{"/v1/cluster/events", "/v1/cluster"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s with four reads under way: %d (Retry-After %q), want 503 with Retry-After 1", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	close(src.release)
	for range 4 {
		// The harness keeps no event stream: a replay says so (503,
		// "unavailable"); what matters is that it was served, not refused.
		if c := <-codes; strings.Contains(c, `"busy"`) || !(strings.HasPrefix(c, "200 ") || strings.Contains(c, "replaying events")) {
			t.Fatalf("a held replay ended with %s, want it served", c)
		}
	}
	resp, err := http.Get(ts.URL + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/cluster after the reads ended: %d", resp.StatusCode)
	}
}
