package integration

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

// The executors' connection cap of docs/security.md's layout, and what
// TestSecurityLayoutLimits lowers it to so that it can reach it.
const (
	layoutExecutorConns = "limits { max_connections: 4096, max_subscriptions: 1000 }"
	lowExecutorConns    = 12
)

// Issue 38's attacks on docs/security.md's layout, run by the real
// leasemgr and executors. The layout's caps are the embedded server's
// defaults; the test makes two of them small enough to reach: the
// executors' connections (12 instead of 4096, in the conf block) and,
// once jobs-admin has made the job queue, whose 1.75 GiB of caps the
// layout's 2 GiB fits, their store (64 MiB, on the running server). An
// executor filling the store is refused at its account's cap, and the
// lease held before keeps being renewed, a new run is granted, and
// leasemgr restarted serves; an executor opening connections is refused
// at the cap, and the reader, the managers and a lease on a connection
// opened before carry on.
func TestSecurityLayoutLimits(t *testing.T) {
	t.Parallel()
	doc := securityConf(t)
	if want := fmt.Sprintf("limits { max_connections: %d, max_subscriptions: %d }", config.DefaultExecutorsMaxConnections, jetstream.ExecutorSubscriptions); strings.Count(doc, want) != 1 || want != layoutExecutorConns {
		t.Fatalf("the layout's executors' connection caps are not the embedded server's (%q)", want)
	}
	ss := startSecureServer(t, func(conf string) string {
		return strings.Replace(conf, layoutExecutorConns, fmt.Sprintf("limits { max_connections: %d, max_subscriptions: 1000 }", lowExecutorConns), 1)
	})
	account := func(name string) *server.Account {
		a, err := ss.srv.LookupAccount(name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	exeAcc := account(jetstream.ExecutorAccount)
	want := server.JetStreamAccountLimits{MaxMemory: 0, MaxStore: config.DefaultExecutorsMaxStore, MaxStreams: jetstream.ExecutorStreams,
		MaxConsumers: config.DefaultExecutorsMaxConsumers, MaxAckPending: -1, MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1}
	if got := exeAcc.JetStreamUsage().Limits; got != want {
		t.Fatalf("the layout's executors' JetStream caps %+v, want the embedded server's %+v", got, want)
	}
	if got := account(jetstream.ReaderAccount).MaxActiveConnections(); got != config.DefaultReadersMaxConnections || account(jetstream.ReaderAccount).JetStreamEnabled() {
		t.Fatalf("the layout's readers: %d connections, JetStream %v", got, account(jetstream.ReaderAccount).JetStreamEnabled())
	}
	if got := account(jetstream.ManagerAccount).MaxActiveConnections(); got != -1 {
		t.Fatalf("the layout caps the managers' connections at %d", got)
	}

	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	common := []string{"NATS_URL=" + ss.url, "NODE_ID=node1"}
	mgrEnv := append([]string{"NATS_USER=leasemgr", "NATS_PASSWORD=" + ss.passwords["leasemgr"], "POOL_CAPACITIES=gpu=1", "HTTP_ADDR=" + httpAddr,
		"DISCONNECT_EVENTS=" + jetstream.ExecutorDisconnectSubject,
		"JOBS_NATS_USER=jobs-admin", "JOBS_NATS_PASSWORD=" + ss.passwords["jobs-admin"]}, common...)
	startLayoutManager := func() *proc {
		m := start(t, mgrEnv, "leasemgr")
		eventually(t, 30*time.Second, "leasemgr to be ready", func() bool { return ready(httpAddr) })
		return m
	}
	m := startLayoutManager()
	roleEnv := func(user string) []string {
		a := ss.userAuth(user)
		return append([]string{"NATS_USER=" + user, "NATS_PASSWORD=" + a.Password, "NATS_INBOX_PREFIX=" + a.InboxPrefix}, common...)
	}
	exeC := append([]string{"NATS_NKEY=" + ss.seedFile, "NATS_INBOX_PREFIX=_INBOX_executor_c"}, common...)
	if code, out := runExecutor(t, exeC, "submit", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("a submit to the job queue leasemgr made as jobs-admin: exit %d\n%s", code, out)
	}

	// The store.
	held := startHeldRun(t, roleEnv("executor-a"), "gpu")
	eventually(t, 30*time.Second, "executor a to hold gpu", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })
	small := want
	small.MaxStore = 64 << 20
	if err := exeAcc.UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": small}); err != nil {
		t.Fatal(err)
	}
	attacker := connectUser(t, ss.url, ss.userAuth("executor-b"))
	for stream, err := range fillQueue(t, attacker) {
		if !strings.Contains(err.Error(), "resource limits exceeded for account") {
			t.Errorf("%s refused with %v, want the account's cap", stream, err)
		}
	}
	used := exeAcc.JetStreamUsage().Store
	t.Logf("the executors' account holds %d bytes of its cap of %d", used, small.MaxStore)
	if used > uint64(small.MaxStore) {
		t.Fatalf("the executors' account holds %d bytes, over its cap of %d", used, small.MaxStore)
	}
	renewedAfter(t, httpAddr, "gpu", time.Now())
	held.release(t)
	if code, out := runExecutor(t, exeC, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor c's run after the attack: exit %d\n%s", code, out)
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	if code := m.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d on SIGTERM", code)
	}
	m = startLayoutManager() // ready: it holds node1's leadership again
	if after := exeAcc.JetStreamUsage().Store; after != used {
		t.Fatalf("the junk changed across the restart: %d bytes, was %d", after, used)
	}

	// The connections.
	holderNC := connectUser(t, ss.url, ss.userAuth("executor-a"))
	holder, err := lease.NewClient(holderNC, "node1")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var flood []*nats.Conn
	defer func() {
		for _, nc := range flood {
			nc.Close()
		}
	}()
	var refusal error
	for len(flood) < lowExecutorConns {
		nc, err := natsconn.Connect(ss.url, ss.userAuth("executor-b"), t.Name(), nats.MaxReconnects(0))
		if err != nil {
			refusal = err
			break
		}
		flood = append(flood, nc)
	}
	// The account holds the holder's connection, the attacker's first and
	// leasemgr's as jobs-admin: the flood gets the rest of the cap.
	t.Logf("executor b: %d connections more, then: %v", len(flood), refusal)
	if refusal == nil || !strings.Contains(refusal.Error(), "maximum account active connections exceeded") || len(flood) != lowExecutorConns-3 {
		t.Fatalf("%d connections, then %v; want %d and the server's refusal", len(flood), refusal, lowExecutorConns-3)
	}
	// NATS caps an account's connections, not a user's: executor c, and
	// jobs-admin, share the cap with executor b (docs/security.md).
	if _, err := natsconn.Connect(ss.url, natsconn.Auth{NKeySeed: ss.seedFile, InboxPrefix: "_INBOX_executor_c"}, t.Name(), nats.MaxReconnects(0)); err == nil {
		t.Fatal("executor c connected into a full account")
	}
	readerEnv := roleEnv("reader")
	if code, out := runLeasemgr(t, readerEnv, "pools", "--all"); code != 0 || !regexp.MustCompile(`node1\s+gpu\s+1\s`).MatchString(out) {
		t.Fatalf("leasemgr pools as the reader during the flood: exit %d\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatalf("acquire on a connection opened before the flood: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + httpAddr + "/v1/pools")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/pools during the flood: %v, %v", resp, err)
	}
	resp.Body.Close()

	for _, nc := range flood {
		nc.Close()
	}
	flood = nil
	eventually(t, 30*time.Second, "executor c to connect after the flood", func() bool {
		nc, err := natsconn.Connect(ss.url, natsconn.Auth{NKeySeed: ss.seedFile, InboxPrefix: "_INBOX_executor_c"}, t.Name(), nats.MaxReconnects(0))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	})
	if code, out := runExecutor(t, exeC, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor c's run after the flood: exit %d\n%s", code, out)
	}

	// A leasemgr that starts while the flood fills the account serves its
	// leases, and the job queue as soon as the flood lets go: its
	// administrator's connection is tried again until admitted.
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	if code := m.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d on SIGTERM", code)
	}
	for {
		nc, err := natsconn.Connect(ss.url, ss.userAuth("executor-b"), t.Name(), nats.MaxReconnects(0))
		if err != nil {
			break
		}
		flood = append(flood, nc)
	}
	m = startLayoutManager()
	eventually(t, 30*time.Second, "leasemgr to say it serves leases without the job queue", func() bool {
		return strings.Contains(m.Output(), "serving leases without the job queue for now")
	})
	for _, nc := range flood {
		nc.Close()
	}
	flood = nil
	eventually(t, time.Minute, "leasemgr to serve the job queue once the flood let go", func() bool {
		return strings.Contains(m.Output(), "the job queue is served again")
	})
	code, out := runExecutor(t, exeC, "submit", "--pool", "gpu", "--", "true")
	if code != 0 {
		t.Fatalf("submit once the job queue is served again: exit %d\n%s", code, out)
	}
	serve := start(t, exeC, "executor", "serve", "--pools", "gpu")
	defer func() { _ = serve.cmd.Process.Kill() }()
	if code, out := runExecutor(t, exeC, "wait", "--timeout", "60s", strings.TrimSpace(out)); code != 0 {
		t.Fatalf("the job, once the job queue is served again: exit %d\n%s", code, out)
	}
}

// connectUser opens a connection with auth that does not reconnect,
// closed at the end of the test.
func connectUser(t *testing.T, url string, auth natsconn.Auth) *nats.Conn {
	t.Helper()
	nc, err := natsconn.Connect(url, auth, t.Name(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
