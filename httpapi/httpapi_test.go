package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// env is a real nats-server, a real manager of node "n1" with pools gpu=2
// and cpu=4, and the API over a NATSSource on its own connection.
type env struct {
	t      *testing.T
	url    string
	node   *harness.Node
	active atomic.Pointer[manager.Manager]
	src    *httpapi.NATSSource
	api    *httpapi.Handler
	ts     *httptest.Server
}

// The lease manager is what a NATSSource asks in process.
var _ httpapi.Manager = (*manager.Manager)(nil)

func newEnv(t *testing.T, opts ...httpapi.Option) *env {
	t.Helper()
	srv := harness.StartServer(t)
	e := &env{t: t, url: srv.URL}
	e.node = harness.StartManager(t, srv.URL, manager.Config{
		Node:  "n1",
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 2}, {Name: "cpu", Capacity: 4}},
		TTL:   10 * time.Second,
	})
	e.active.Store(e.node.Manager)
	src, err := httpapi.NewNATSSource(harness.Connect(t, srv.URL), lease.DefaultPrefix, "n1", e.active.Load)
	if err != nil {
		t.Fatal(err)
	}
	e.src = src
	api, err := httpapi.New(src, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e.api = api
	e.ts = httptest.NewServer(api)
	t.Cleanup(e.ts.Close)
	t.Cleanup(api.Close) // before ts.Close, which waits for open streams
	return e
}

// do sends a request and returns the response with its body read.
func (e *env) do(method, path string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(body)
}

func (e *env) getJSON(path string, v any) *http.Response {
	e.t.Helper()
	resp, body := e.do(http.MethodGet, path)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("GET %s: Content-Type %q, want application/json; body %s", path, ct, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		e.t.Fatalf("GET %s: %v; body %s", path, err, body)
	}
	return resp
}

func wantStatus(t *testing.T, resp *http.Response, body string, want int) {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, want, body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	e := newEnv(t)
	resp, body := e.do(http.MethodGet, "/healthz")
	wantStatus(t, resp, body, http.StatusOK)
	if body != "ok\n" {
		t.Errorf("healthz body %q", body)
	}
	resp, body = e.do(http.MethodGet, "/readyz")
	wantStatus(t, resp, body, http.StatusOK)

	var st httpapi.Status
	e.getJSON("/v1/status", &st)
	if !reflect.DeepEqual(st, httpapi.Status{Node: "n1", Ready: true}) {
		t.Errorf("status %+v", st)
	}

	// Standing by: alive, not ready, and no lease state to show.
	e.active.Store(nil)
	resp, body = e.do(http.MethodGet, "/healthz")
	wantStatus(t, resp, body, http.StatusOK)
	resp, body = e.do(http.MethodGet, "/readyz")
	wantStatus(t, resp, body, http.StatusServiceUnavailable)
	if !strings.Contains(body, "standing by") {
		t.Errorf("readyz reason %q does not say it stands by", body)
	}
	for _, path := range []string{"/v1/pools", "/v1/leases"} {
		var eb httpapi.ErrorBody
		resp := e.getJSON(path, &eb)
		wantStatus(t, resp, "", http.StatusServiceUnavailable)
		if eb.Error.Code != "not_ready" || !strings.Contains(eb.Error.Message, "standing by") {
			t.Errorf("GET %s while standing by: %+v", path, eb)
		}
	}
	e.getJSON("/v1/status", &st)
	if st.Ready || !strings.Contains(st.Reason, "standing by") {
		t.Errorf("status while standing by: %+v", st)
	}

	e.active.Store(e.node.Manager)
	resp, body = e.do(http.MethodGet, "/readyz")
	wantStatus(t, resp, body, http.StatusOK)
}

func TestNotReadyWithoutNATS(t *testing.T) {
	e := newEnv(t)
	nc := harness.Connect(t, e.url)
	src, err := httpapi.NewNATSSource(nc, "", "n1", e.active.Load)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := src.Ready(); err == nil || !strings.Contains(err.Error(), "NATS connection is CLOSED") {
		t.Fatalf("Ready with a closed connection: %v", err)
	}
}

func TestPoolsAndLeases(t *testing.T) {
	e := newEnv(t)
	var np lease.NodePools
	resp := e.getJSON("/v1/pools", &np)
	wantStatus(t, resp, "", http.StatusOK)
	stats := np.Pools
	if np.Node != "n1" || len(stats) != 2 || stats[0].Name != "cpu" || stats[1].Name != "gpu" || stats[1].Capacity != 2 || stats[1].Available != 2 || stats[1].InUse != 0 {
		t.Fatalf("pools %+v", stats)
	}

	// No leases is an empty array, not null.
	resp, body := e.do(http.MethodGet, "/v1/leases")
	wantStatus(t, resp, body, http.StatusOK)
	if strings.TrimSpace(body) != "[]" {
		t.Fatalf("leases with none held: %s", body)
	}

	c := harness.Client(t, e.url, "n1", lease.WithHolder("tester"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	e.getJSON("/v1/pools", &np)
	stats = np.Pools
	if stats[1].InUse != 2 || stats[1].Available != 0 {
		t.Fatalf("gpu after acquiring 2: %+v", stats[1])
	}

	// The wire names matter to scripts: read them as raw JSON.
	var raw []map[string]any
	e.getJSON("/v1/leases", &raw)
	if len(raw) != 1 {
		t.Fatalf("leases: %v", raw)
	}
	for _, k := range []string{"id", "pool", "slots", "holder", "token", "expires_at"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("lease has no %q: %v", k, raw[0])
		}
	}
	var recs []lease.Record
	e.getJSON("/v1/leases", &recs)
	r := recs[0]
	if r.ID != l.ID() || r.Pool != "gpu" || r.Slots != 2 || r.Holder != "tester" || r.Token != l.Token() || r.Token == 0 || !r.ExpiresAt.After(time.Now()) {
		t.Errorf("lease %+v; acquired id %s token %d", r, l.ID(), l.Token())
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The manager forgets the lease when the store's delete comes back to it.
	harness.Eventually(t, 5*time.Second, "the lease to leave /v1/leases", func() bool {
		e.getJSON("/v1/leases", &recs)
		return len(recs) == 0
	})
}

func TestMethodsAndNotFound(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/pools", "GET, HEAD"},
		{http.MethodDelete, "/v1/leases", "GET, HEAD"},
		{http.MethodPost, "/v1/events", "GET"},
		{http.MethodPut, "/readyz", "GET, HEAD"},
		{http.MethodPost, "/", "GET, HEAD"},
	} {
		resp, body := e.do(tc.method, tc.path)
		wantStatus(t, resp, body, http.StatusMethodNotAllowed)
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		var eb httpapi.ErrorBody
		if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error.Code != "method_not_allowed" {
			t.Errorf("%s %s: body %s", tc.method, tc.path, body)
		}
	}

	resp, body := e.do(http.MethodHead, "/v1/pools")
	wantStatus(t, resp, body, http.StatusOK)

	resp, body = e.do(http.MethodGet, "/v1/nope")
	wantStatus(t, resp, body, http.StatusNotFound)
	if !strings.Contains(body, `"not_found"`) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("unknown endpoint: %s", body)
	}
	resp, body = e.do(http.MethodGet, "/metrics")
	wantStatus(t, resp, body, http.StatusNotFound)
}

func TestPage(t *testing.T) {
	e := newEnv(t)
	resp, body := e.do(http.MethodGet, "/")
	wantStatus(t, resp, body, http.StatusOK)
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("page Content-Type %q", ct)
	}
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("page CSP %q", resp.Header.Get("Content-Security-Policy"))
	}
	for _, want := range []string{`<template id="pool-card">`, `data-field="in_use"`, `/assets/app.js`, `id="events"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// Self-contained: nothing from another origin.
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Errorf("page refers to another origin")
	}
	for path, ct := range map[string]string{"/assets/app.js": "text/javascript; charset=utf-8", "/assets/style.css": "text/css; charset=utf-8"} {
		resp, body := e.do(http.MethodGet, path)
		wantStatus(t, resp, body, http.StatusOK)
		if got := resp.Header.Get("Content-Type"); got != ct {
			t.Errorf("%s Content-Type %q, want %q", path, got, ct)
		}
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Errorf("%s refers to another origin", path)
		}
	}
	resp, body = e.do(http.MethodGet, "/assets/nope.js")
	wantStatus(t, resp, body, http.StatusNotFound)
	resp, body = e.do(http.MethodGet, "/nope")
	wantStatus(t, resp, body, http.StatusNotFound)
}

func TestMetricsMounted(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "# metrics\n")
	})
	e := newEnv(t, httpapi.WithMetrics(metrics))
	resp, body := e.do(http.MethodGet, "/metrics")
	wantStatus(t, resp, body, http.StatusOK)
	if body != "# metrics\n" {
		t.Errorf("metrics body %q", body)
	}
}

func TestOptionsValidate(t *testing.T) {
	e := newEnv(t)
	if _, err := httpapi.New(nil); err == nil {
		t.Error("New(nil) did not fail")
	}
	for name, opt := range map[string]httpapi.Option{
		"zero heartbeat": httpapi.WithHeartbeat(0),
		"nil metrics":    httpapi.WithMetrics(nil),
		"nil logger":     httpapi.WithLogger(nil),
	} {
		if _, err := httpapi.New(e.src, opt); err == nil {
			t.Errorf("%s: New did not fail", name)
		}
	}
	if _, err := httpapi.NewNATSSource(nil, "", "n1", e.active.Load); err == nil {
		t.Error("NewNATSSource(nil conn) did not fail")
	}
}

// sse is a client reading one event stream.
type sse struct {
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent // closed when the stream ends
}

type sseEvent struct {
	name, data string
	comment    bool
}

func openSSE(t *testing.T, url string) *sse {
	t.Helper()
	return openSSEAt(t, url+"/v1/events")
}

func openSSEAt(t *testing.T, url string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("events: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{resp: resp, cancel: cancel, events: make(chan sseEvent, 100)}
	go func() { // ends when the body does: at the latest on cancel
		defer close(s.events)
		var ev sseEvent
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.comment = true
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	return s
}

// next returns the next event for which keep is true.
func (s *sse) next(t *testing.T, what string, keep func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended while waiting for %s", what)
			}
			if keep(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ended waits for the stream to end, skipping what is left of it.
func (s *sse) ended(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the stream did not end")
		}
	}
}

func TestEventsStream(t *testing.T) {
	e := newEnv(t, httpapi.WithHeartbeat(50*time.Millisecond))
	s := openSSE(t, e.ts.URL)

	first := s.next(t, "the pools snapshot", func(sseEvent) bool { return true })
	var snap lease.NodePools
	if first.name != httpapi.EventPools || json.Unmarshal([]byte(first.data), &snap) != nil || snap.Node != "n1" || len(snap.Pools) != 2 {
		t.Fatalf("first event %+v, want a pools snapshot", first)
	}

	// The stream is subscribed once its headers arrived: this acquire's
	// events must come through.
	c := harness.Client(t, e.url, "n1", lease.WithHolder("sse-tester"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	got := s.next(t, "a granted event", func(ev sseEvent) bool { return ev.name == "granted" })
	var ev lease.Event
	if err := json.Unmarshal([]byte(got.data), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != lease.EventGranted || ev.Node != "n1" || ev.Pool != "gpu" || ev.Holder != "sse-tester" || ev.Slots != 1 || ev.Token != l.Token() || ev.Stats.InUse != 1 || ev.Stats.Capacity != 2 {
		t.Errorf("granted event %+v", ev)
	}
	s.next(t, "a heartbeat", func(ev sseEvent) bool { return ev.comment })

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.next(t, "a released event", func(ev sseEvent) bool { return ev.name == "released" })
}

// The handler returns, and the source unsubscribes, when the client goes
// away; and Close ends open streams.
func TestEventsStreamEnds(t *testing.T) {
	srv := harness.StartServer(t)
	node := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}})
	nc := harness.Connect(t, srv.URL)
	src, err := httpapi.NewNATSSource(nc, "", "n1", func() *manager.Manager { return node.Manager })
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(src, httpapi.WithHeartbeat(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64
	returned := make(chan struct{}, 10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer func() {
			running.Add(-1)
			returned <- struct{}{}
		}()
		api.ServeHTTP(w, r)
	}))
	defer ts.Close()
	baseSubs := nc.NumSubscriptions()

	waitReturned := func(what string) {
		t.Helper()
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatalf("the events handler did not return after %s", what)
		}
		harness.Eventually(t, 5*time.Second, "the event subscription to end", func() bool {
			return nc.NumSubscriptions() == baseSubs
		})
	}

	s := openSSE(t, ts.URL)
	s.next(t, "the pools snapshot", func(sseEvent) bool { return true })
	if n := nc.NumSubscriptions(); n != baseSubs+1 {
		t.Fatalf("%d subscriptions with a stream open, want %d", n, baseSubs+1)
	}
	s.cancel() // the client goes away
	waitReturned("the client went away")

	s = openSSE(t, ts.URL)
	s.next(t, "the pools snapshot", func(sseEvent) bool { return true })
	api.Close()
	waitReturned("Close")
	s.ended(t)
	if n := running.Load(); n != 0 {
		t.Errorf("%d handlers still running", n)
	}

	// After Close, new streams are refused.
	resp, err := http.Get(ts.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-returned
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("events after Close: status %d", resp.StatusCode)
	}
}
