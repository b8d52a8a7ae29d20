package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// procFDs counts a process's open descriptors.
func procFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// procRSS reads a process's resident memory, in MiB.
func procRSS(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb / 1024
		}
	}
	return -1
}

// A flood from one executor credential (issue 28: 100,000 queued acquires
// were all accepted, and 2,000 held event streams took as many
// descriptors of the process that hosts the embedded NATS server): 20,000
// acquires from one connection queue up to MAX_QUEUED_PER_CONNECTION and
// get queue_full beyond it; 3,000 clients holding /v1/events get at most
// DefaultMaxStreams streams and at most DefaultMaxConns connections; the
// manager's descriptors stay bounded, and an executor still gets a slot.
func TestFloodsAreBounded(t *testing.T) {
	t.Parallel()
	const node = "flood"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	pid := m.cmd.Process.Pid
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)
	fds0, rss0 := procFDs(t, pid), procRSS(t, pid)

	holder, err := lease.NewClient(mustConnectAs(t, home, url, config.RoleExecutor), node)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	held, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}

	// 20,000 acquires on one connection, all different request ids.
	const flood = 20000
	flooder := mustConnectAs(t, home, url, config.RoleExecutor)
	count := acquireFlood(t, ctx, flooder, lease.Subject(lease.DefaultPrefix, node, "gpu", lease.VerbAcquire), "flood", flood)
	t.Logf("answers to %d acquires from one connection: %v", flood, count)
	if count[string(lease.StatusQueued)] != config.DefaultMaxQueuedPerConnection || count[string(lease.CodeQueueFull)] != flood-config.DefaultMaxQueuedPerConnection {
		t.Fatalf("answers %v: want %d queued and the rest queue_full", count, config.DefaultMaxQueuedPerConnection)
	}
	if q := httpPools(t, httpAddr)["gpu"].QueuedRequests; q != config.DefaultMaxQueuedPerConnection {
		t.Fatalf("%d requests queued after the flood, want %d", q, config.DefaultMaxQueuedPerConnection)
	}
	fds1, rss1 := procFDs(t, pid), procRSS(t, pid)

	// 3,000 clients ask for the event stream and hold on.
	const clients = 3000
	var ok, refused, waiting atomic.Int64
	var wg sync.WaitGroup
	var conns sync.Map
	for i := range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", httpAddr)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			conns.Store(i, c)
			_, _ = fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\n\r\n", httpAddr)
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			status, err := bufio.NewReader(c).ReadString('\n')
			switch {
			case err != nil:
				waiting.Add(1) // not accepted: in the kernel's backlog
			case strings.Contains(status, " 200 "):
				ok.Add(1)
			case strings.Contains(status, " 503 "):
				refused.Add(1)
			default:
				t.Errorf("client %d: %q", i, status)
			}
		})
	}
	wg.Wait()
	fds2 := procFDs(t, pid)
	t.Logf("%d clients: %d streams, %d refused (too_many_streams), %d not accepted", clients, ok.Load(), refused.Load(), waiting.Load())
	if ok.Load() > 256 || ok.Load() == 0 {
		t.Errorf("%d event streams open at once, want 1 to 256", ok.Load())
	}

	// With all of that held, an executor still gets a slot.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out := runExecutor(t, env, "run", "--pool", "default", "--", "true"); code != 0 {
		t.Fatalf("executor run during the floods: exit %d\n%s", code, out)
	}
	t.Logf("leasemgr: descriptors %d at start, %d after the acquire flood, %d with %d HTTP clients; RSS %d MiB at start, %d after the acquire flood",
		fds0, fds1, fds2, clients, rss0, rss1)
	if fds2-fds0 > 512+64 {
		t.Errorf("leasemgr holds %d more descriptors with %d HTTP clients, want at most about 512 (DefaultMaxConns)", fds2-fds0, clients)
	}
	conns.Range(func(_, c any) bool { c.(net.Conn).Close(); return true })
}

// acquireFlood sends n acquires of one slot on nc, request ids prefix0,
// prefix1, ..., all at once, and counts their first answers by status or
// error code.
func acquireFlood(t *testing.T, ctx context.Context, nc *nats.Conn, subject, prefix string, n int) map[string]int {
	t.Helper()
	replies := make(chan *nats.Msg, n)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i := range n {
		data, _ := json.Marshal(lease.AcquireRequest{RequestID: fmt.Sprintf("%s%d", prefix, i), Holder: "mallory", Slots: 1})
		if err := nc.PublishRequest(subject, fmt.Sprintf("%s.%d", inbox, i), data); err != nil {
			t.Fatal(err)
		}
	}
	// Many requests take a while to pass on a loaded machine: the budget
	// only catches a server that never answers.
	if err := nc.FlushTimeout(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for range n {
		select {
		case msg := <-replies:
			var r lease.Reply
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				t.Fatal(err)
			}
			key := string(r.Status)
			if r.Error != nil {
				key = string(r.Error.Code)
			}
			count[key]++
		case <-ctx.Done():
			t.Fatalf("answers so far: %v", count)
		}
	}
	return count
}
