package httpapi_test

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/httpapi"
)

// At most WithMaxStreams event streams are open at once; one more is told
// 503 too_many_streams with a Retry-After, and fits once one ends.
func TestEventStreamsAreCapped(t *testing.T) {
	e := newEnv(t, httpapi.WithMaxStreams(2), httpapi.WithHeartbeat(50*time.Millisecond))
	a := openSSE(t, e.ts.URL)
	openSSE(t, e.ts.URL)
	resp, body := e.do(http.MethodGet, "/v1/events")
	wantStatus(t, resp, body, http.StatusServiceUnavailable)
	if resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too_many_streams") {
		t.Fatalf("the third stream: Retry-After %q, body %s", resp.Header.Get("Retry-After"), body)
	}
	a.cancel()
	a.resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := e.do(http.MethodGet, "/v1/status") // not a stream: never capped
		wantStatus(t, resp, body, http.StatusOK)
		req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/v1/events", nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream ended, but another is still refused: %d", r.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LimitListener holds at most n connections: the next one is accepted only
// once one of them closes.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httpapi.LimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	// The third is dialled (the kernel holds it) but not accepted while two
	// are held; the accept loop is blocked in Accept, not in the kernel.
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two are held")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second close gives back nothing more
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the third connection was not accepted after one closed")
	}
	second.Close()
}
