package typescript

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/cluster"
	"github.com/slotlease/slotlease/test/harness"
)

// The TypeScript client's side of test/cluster's
// TestLameDuckStopCostsAHolderNothing: a server stopped in lame duck mode
// (a rolling restart) costs a holder nothing, however long it takes to
// reconnect. Told by its server (nats.js's "ldm" status), the holder, a
// Node.js process on the built client (dist/esm), takes its lease off fast
// release before the server closes its connection, so the close is no
// longer a deadline. Here it cannot reconnect for several times the grace
// after the close, which would lose a bound lease at 3/4 of the grace; it
// keeps it, the waiter behind it is not granted, and its first renewal on
// the new connection binds the lease there again.
//
// Not parallel: TestTypeScriptClient's npm pack rebuilds dist/.
func TestLameDuckStopCostsATypeScriptHolderNothing(t *testing.T) {
	node, _ := built(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := cluster.StartLameDuckStage(ctx, t)
	h := startHolder(ctx, t, node, "gpu", append(s.Cluster.Env(config.RoleExecutor),
		config.EnvNATSURL+"="+s.Proxy.URL(), config.EnvNodeID+"=node1", config.EnvSubjectPrefix+"="+s.Settings.Prefix))
	granted := h.wait(t, time.Minute, "the holder is granted", "holding ")
	var id, token, connServer string
	var fastMs int
	if _, err := fmt.Sscanf(granted, "holding %s %s %s %d", &id, &token, &connServer, &fastMs); err != nil {
		t.Fatalf("holder said %q: %v", granted, err)
	}
	if fastMs == 0 {
		t.Fatal("granted without fast release")
	}
	if connServer != s.Server1 {
		t.Fatalf("the holder's lease is bound to server %q, want server 1 (%q)", connServer, s.Server1)
	}
	grace := time.Duration(fastMs) * time.Millisecond
	got := s.QueueWaiter(ctx, t)
	stored := func() lease.Record { return s.Stored(ctx, "gpu", id) }
	if r := stored(); r.ConnServer != s.Server1 {
		t.Fatalf("lease stored bound to %q, want the holder's server %q", r.ConnServer, s.Server1)
	}

	// Server 1 enters lame duck mode; the holder cannot come back.
	at := s.StopServer1(t)
	var unboundAt time.Time
	harness.Eventually(t, time.Minute, "the lease is stored unbound, or server 1 closes the holder's connection", func() bool {
		if r := stored(); r.ID == id && r.ConnServer == "" {
			unboundAt = time.Now()
			return true
		}
		return h.said("status disconnect")
	})
	h.wait(t, time.Minute, "server 1 closes the holder's connection", "status disconnect")
	dropped := time.Now()
	switch {
	case unboundAt.IsZero():
		t.Errorf("the lease was still stored bound to server 1 when it closed the holder's connection, %v after the lame duck stop began", dropped.Sub(at).Round(time.Millisecond))
	default:
		t.Logf("unbound %v after the lame duck stop began; connection closed %v after it began", unboundAt.Sub(at).Round(time.Millisecond), dropped.Sub(at).Round(time.Millisecond))
	}
	if !h.said("status ldm") {
		t.Errorf("the holder printed no ldm status before the close")
	}
	// Kept out for 4 graces: a lease still bound to the closed connection
	// would be lost at 3/4 of one.
	keptOut := time.After(4 * grace)
	for out := false; !out; {
		select {
		case line := <-h.lost:
			t.Fatalf("the holder lost its lease while it could not reconnect: %s", line)
		case w := <-got:
			t.Fatalf("the waiter was granted a live holder's slot: %+v", w.Record())
		case <-h.exit:
			last, _ := h.find("lost")
			t.Fatalf("the holder exited while it could not reconnect (%s)", last)
		case <-keptOut:
			out = true
		}
	}
	if r := stored(); r.ID != id {
		t.Fatalf("the lease's record is gone while its holder could not reconnect (stored: %+v)", r)
	}

	s.Allow()
	h.wait(t, time.Minute, "the holder reconnects", "status reconnect")
	harness.Eventually(t, time.Minute, "the lease moves to the holder's new connection", func() bool {
		r := stored()
		return r.ID == id && r.ConnServer != "" && r.ConnServer != s.Server1
	})
	t.Logf("bound again %v after the close", time.Since(dropped).Round(time.Millisecond))
	select {
	case line := <-h.lost:
		t.Fatalf("the holder lost its lease: %s", line)
	case w := <-got:
		t.Fatalf("the waiter was granted a live holder's slot: %+v", w.Record())
	default:
	}
	h.release(t)
	s.WaiterGranted(ctx, t, got)
}

// tsHolder is a running test/fixtures/ldmholder.mjs.
type tsHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // every line it prints after "holder: "
	lost  chan string // its "lost" line
	exit  chan error  // closed once it exited, after its output

	mu   sync.Mutex
	seen []string
}

// startHolder runs the fixture for pool with env added to the test's own;
// it is killed at the end of the test.
func startHolder(ctx context.Context, t *testing.T, node, pool string, env []string) *tsHolder {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "fixtures", "ldmholder.mjs"), pool)
	// The test's environment without anything that would steer connect()
	// elsewhere, then the cluster's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "NODE_ID=") && !strings.HasPrefix(kv, "LEASE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = &testWriter{t: t, prefix: "holder stderr: "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &tsHolder{cmd: cmd, stdin: stdin, lines: make(chan string, 64), lost: make(chan string, 1), exit: make(chan error)}
	start := time.Now()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			t.Logf("%6.3fs holder: %s", time.Since(start).Seconds(), strings.TrimPrefix(line, "holder: "))
			rest, ok := strings.CutPrefix(line, "holder: ")
			if !ok {
				continue
			}
			h.mu.Lock()
			h.seen = append(h.seen, rest)
			h.mu.Unlock()
			if strings.HasPrefix(rest, "lost") {
				h.lost <- rest
			}
			select {
			case h.lines <- rest:
			default:
			}
		}
		err := cmd.Wait()
		h.mu.Lock()
		h.seen = append(h.seen, fmt.Sprintf("exited: %v", err))
		h.mu.Unlock()
		close(h.exit)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.exit
	})
	return h
}

// said reports whether the holder printed a line starting with prefix.
func (h *tsHolder) said(prefix string) bool {
	_, ok := h.find(prefix)
	return ok
}

func (h *tsHolder) find(prefix string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.seen {
		if strings.HasPrefix(l, prefix) {
			return l, true
		}
	}
	return "", false
}

// wait waits up to d for a line starting with prefix and returns it; it
// fails the test if the holder loses its lease or exits first.
func (h *tsHolder) wait(t *testing.T, d time.Duration, what, prefix string) string {
	t.Helper()
	deadline := time.After(d)
	for {
		if l, ok := h.find(prefix); ok {
			return l
		}
		select {
		case line := <-h.lost:
			t.Fatalf("waiting for %s: the holder lost its lease: %s", what, line)
		case <-h.exit:
			if l, ok := h.find(prefix); ok {
				return l
			}
			t.Fatalf("waiting for %s: the holder exited", what)
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-h.lines:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// release has the holder release its lease and waits for it to exit.
func (h *tsHolder) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "release\n"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, time.Minute, "the holder's release", "released")
	select {
	case <-h.exit:
	case <-time.After(time.Minute):
		t.Fatal("the holder did not exit after its release")
	}
	if err := h.cmd.ProcessState; err != nil && !err.Success() {
		t.Fatalf("the holder exited with %v", err)
	}
}

// testWriter logs what a child writes, a line at a time.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}
