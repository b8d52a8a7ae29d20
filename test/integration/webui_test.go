package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/debpkg"
	"github.com/slotlease/slotlease/test/harness"
)

// The web page, end to end in headless Chromium: load it, see the event
// from before it opened (replayed), acquire a lease,
// and see the pool's numbers and the event list change without a reload;
// then end the event stream and see the page keep up by polling.
//
// Chromium is Debian's chromium package at /usr/bin/chromium; when it is
// missing, the test installs it with apt-get (as root). If that fails the
// test fails: set SLOTLEASE_SKIP_BROWSER=1 to skip it on a machine that
// cannot have a browser. The browser is driven over the Chrome DevTools
// Protocol on a pipe (--remote-debugging-pipe), so no websocket library or
// driver is needed. A screenshot of the page is left in
// /tmp/slotlease-webui.png.
func TestWebUI(t *testing.T) {
	t.Parallel()
	chromium := ensureChromium(t)

	srv := harness.StartServer(t)
	node := harness.StartManager(t, srv.URL, manager.Config{
		Node:  "web",
		Pools: []manager.PoolConfig{{Name: "cpu", Capacity: 8}, {Name: "gpu", Capacity: 2}},
		TTL:   15 * time.Second,
	})
	var active atomic.Pointer[manager.Manager]
	active.Store(node.Manager)
	events := jetstream.NamesFor(lease.DefaultPrefix).Events
	if err := jetstream.EnsureAuditStream(context.Background(), harness.Connect(t, srv.URL), jetstream.AuditConfig{
		Stream: events, Subjects: lease.DefaultPrefix + ".events.>", MaxAge: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	addr, api := serveAPI(t, srv.URL, "web", active.Load, httpapi.WithEventStream(events))
	client := harness.Client(t, srv.URL, "web", lease.WithHolder("webui-test"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Something on the cpu pool before the page loads, so its first
	// numbers come from /v1/pools rather than from an event.
	cpu, err := client.Acquire(ctx, "cpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Release(context.Background())

	b := startBrowser(t, chromium)
	page := b.newPage(t)
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}, nil)
	page.call(t, "Page.navigate", map[string]any{"url": "http://" + addr + "/"}, nil)

	var st pageState
	eventually(t, 15*time.Second, "the page to show the pools and open its event stream", func() bool {
		st = page.state(t)
		return st.Mode == "live" && st.Node == "web" && st.GPU == "0" && st.CPU == "3"
	})
	if st.GPUCapacity != "2" {
		t.Fatalf("page before the acquire: %+v", st)
	}
	// The cpu grant from before the page opened is listed, replayed from
	// the event stream.
	eventually(t, 10*time.Second, "the page to list the cpu grant from before it opened", func() bool {
		st = page.state(t)
		return st.hasRow("granted", "cpu", "webui-test")
	})
	// A reload would drop this.
	page.eval(t, "window.__slotleaseMarker = 42")

	gpu, err := client.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the page to show gpu in_use 1 and a granted event", func() bool {
		st = page.state(t)
		return st.GPU == "1" && st.hasRow("granted", "gpu", "webui-test")
	})
	if st.Marker != 42 {
		t.Fatalf("the page reloaded: %+v", st)
	}
	if st.Mode != "live" {
		t.Errorf("page mode %q, want live", st.Mode)
	}
	if st.GPUHistory == "" {
		t.Errorf("gpu card has no utilisation history drawn")
	}
	page.screenshot(t, "/tmp/slotlease-webui.png")

	if err := gpu.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the page to show gpu in_use 0 and a released event", func() bool {
		st = page.state(t)
		return st.GPU == "0" && st.hasRow("released", "gpu", "webui-test")
	})
	if st.Marker != 42 {
		t.Fatalf("the page reloaded: %+v", st)
	}

	// Without the event stream the page falls back to polling /v1/pools.
	api.Close() // ends the stream and refuses new ones
	eventually(t, 10*time.Second, "the page to notice the stream is gone", func() bool {
		return page.state(t).Mode == "polling"
	})
	gpu, err = client.Acquire(ctx, "gpu", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Release(context.Background())
	eventually(t, 10*time.Second, "the polling page to show gpu in_use 2", func() bool {
		st = page.state(t)
		return st.GPU == "2"
	})
	if st.Marker != 42 || st.Mode != "polling" {
		t.Fatalf("page after polling: %+v", st)
	}
	if ex := b.exceptions(); len(ex) > 0 {
		t.Errorf("the page threw: %v", ex)
	}
}

// serveAPI serves httpapi for node on a loopback port until the test ends.
func serveAPI(t *testing.T, natsURL, node string, manager func() *manager.Manager, opts ...httpapi.SourceOption) (string, *httpapi.Handler) {
	t.Helper()
	src, err := httpapi.NewNATSSource(harness.Connect(t, natsURL), lease.DefaultPrefix, node, manager, opts...)
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(src)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	hs.RegisterOnShutdown(api.Close)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("http shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("http serve: %v", err)
		}
	})
	return ln.Addr().String(), api
}

// pageState is what the test reads from the page's DOM.
type pageState struct {
	Mode        string `json:"mode"`
	Node        string `json:"node"`
	Marker      int    `json:"marker"`
	GPU         string `json:"gpu"`
	GPUCapacity string `json:"gpuCapacity"`
	GPUHistory  string `json:"gpuHistory"`
	CPU         string `json:"cpu"`
	Rows        []struct {
		Kind, Pool, Holder string
	} `json:"rows"`
}

func (s pageState) hasRow(kind, pool, holder string) bool {
	for _, r := range s.Rows {
		if r.Kind == kind && r.Pool == pool && r.Holder == holder {
			return true
		}
	}
	return false
}

const readPage = `(() => {
  if (document.readyState === 'loading') return '{}'; // not parsed yet: parts may be missing
  const f = (pool, name) => {
    const el = document.querySelector('[data-pool="' + pool + '"] [data-field="' + name + '"]');
    return el ? el.textContent : null;
  };
  const line = document.querySelector('[data-pool="gpu"] svg .line');
  const rows = [...document.querySelectorAll('#events tbody tr')].map((r) => ({
    kind: r.dataset.kind,
    pool: r.dataset.pool,
    holder: r.querySelector('[data-field="holder"]').textContent,
  }));
  return JSON.stringify({
    mode: document.body.dataset.mode,
    node: document.getElementById('node').textContent,
    marker: window.__slotleaseMarker || 0,
    gpu: f('gpu', 'in_use'),
    gpuCapacity: f('gpu', 'capacity'),
    gpuHistory: line ? line.getAttribute('d') : '',
    cpu: f('cpu', 'in_use'),
    rows: rows,
  });
})()`

func (p *cdpPage) state(t *testing.T) pageState {
	t.Helper()
	var st pageState
	if s, ok := p.eval(t, readPage).(string); ok {
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			t.Fatalf("page state %q: %v", s, err)
		}
	}
	return st
}

// ensureChromium returns the path of Debian's chromium, installing it if it
// is missing.
func ensureChromium(t *testing.T) string {
	t.Helper()
	return debpkg.Tool{Path: "/usr/bin/chromium", Pkg: "chromium", SkipEnv: "SLOTLEASE_SKIP_BROWSER", Test: "the browser test"}.Ensure(t)
}

// withoutDBus drops the lines where chromium says it has no D-Bus, which a
// headless browser in a container never has.
func withoutDBus(out []byte) []byte {
	var keep [][]byte
	for _, line := range bytes.Split(out, []byte("\n")) {
		if !bytes.Contains(line, []byte("dbus")) {
			keep = append(keep, line)
		}
	}
	return bytes.Join(keep, []byte("\n"))
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// browser is a headless Chromium driven over the DevTools protocol on a
// pipe: commands go to its fd 3 and replies come from its fd 4, one JSON
// message each, ended by a NUL byte.
type browser struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // chromium's own log, shown when the test fails
	w      *os.File
	exited chan struct{}

	mu      sync.Mutex
	nextID  int
	pending map[int]chan cdpMessage
	thrown  []string
	readErr error
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func startBrowser(t *testing.T, path string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe() // test -> browser
	if err != nil {
		t.Fatal(err)
	}
	respR, respW, err := os.Pipe() // browser -> test
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{w: cmdW, exited: make(chan struct{}), pending: map[int]chan cdpMessage{}}
	b.cmd = exec.Command(path,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, respW} // fd 3 and fd 4
	b.cmd.Stdout = &b.stderr
	b.cmd.Stderr = &b.stderr
	// Its own process group, so its renderer and helper processes can be
	// stopped with it if it does not close by itself.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	cmdR.Close()
	respW.Close()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		b.read(respR)
	}()
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.send(ctx, "", "Browser.close", nil, nil)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			t.Logf("chromium did not close; killing its process group")
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.exited
		}
		cmdW.Close()
		<-readerDone
		respR.Close()
		if t.Failed() {
			t.Logf("chromium output, less its D-Bus complaints:\n%s", tail(withoutDBus(b.stderr.Bytes()), 4000))
		}
	})
	return b
}

// read dispatches replies to their callers and keeps page exceptions, until
// the browser closes its end.
func (b *browser) read(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		data, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readErr = fmt.Errorf("chromium closed the DevTools pipe: %w", err)
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var msg cdpMessage
		if json.Unmarshal(data[:len(data)-1], &msg) != nil {
			continue
		}
		b.mu.Lock()
		if ch := b.pending[msg.ID]; msg.ID != 0 && ch != nil {
			delete(b.pending, msg.ID)
			ch <- msg // buffered
		} else if msg.Method == "Runtime.exceptionThrown" {
			b.thrown = append(b.thrown, string(msg.Params))
		}
		b.mu.Unlock()
	}
}

func (b *browser) exceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.thrown...)
}

// send calls method, in session if it is not empty, and decodes the result
// into result if it is not nil.
func (b *browser) send(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return b.readErr
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()

	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case reply, ok := <-ch:
		if !ok {
			b.mu.Lock()
			defer b.mu.Unlock()
			return fmt.Errorf("%s: %w", method, b.readErr)
		}
		if reply.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, reply.Error.Message, reply.Error.Code)
		}
		if result != nil {
			return json.Unmarshal(reply.Result, result)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// cdpPage is one tab, attached with its own session.
type cdpPage struct {
	b       *browser
	session string
}

func (b *browser) newPage(t *testing.T) *cdpPage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.send(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.send(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		t.Fatalf("attach to the tab: %v", err)
	}
	p := &cdpPage{b: b, session: attached.SessionID}
	p.call(t, "Page.enable", nil, nil)
	p.call(t, "Runtime.enable", nil, nil) // reports exceptions the page throws
	return p
}

func (p *cdpPage) call(t *testing.T, method string, params, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.b.send(ctx, p.session, method, params, result); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page and returns its value.
func (p *cdpPage) eval(t *testing.T, expr string) any {
	t.Helper()
	return p.evaluate(t, expr, false, 0)
}

// evaluate runs Runtime.evaluate for expr, awaiting a promise's value if
// await, within timeout (0: call's), and fails the test on an exception.
func (p *cdpPage) evaluate(t *testing.T, expr string, await bool, timeout time.Duration) any {
	t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	params := map[string]any{"expression": expr, "returnByValue": true}
	if await {
		params["awaitPromise"] = true
	}
	if timeout == 0 {
		p.call(t, "Runtime.evaluate", params, &r)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.b.send(ctx, p.session, "Runtime.evaluate", params, &r); err != nil {
			t.Fatal(err)
		}
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg = e.Exception.Description
		}
		t.Fatalf("evaluating in the page: %s", msg)
	}
	return r.Result.Value
}

func (p *cdpPage) screenshot(t *testing.T, path string) {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	p.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
