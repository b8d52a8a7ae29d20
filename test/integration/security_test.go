package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// securityConf is the first ```conf block of docs/security.md: the tests
// run the documented layout itself, so the page cannot drift from what
// works.
func securityConf(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```conf\n")
	if !ok {
		t.Fatal("docs/security.md has no ```conf block")
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("docs/security.md: unterminated ```conf block")
	}
	return block
}

// secureServer is a nats-server running docs/security.md's layout.
type secureServer struct {
	srv       *server.Server
	url       string
	passwords map[string]string // by user
	seedFile  string            // executor-c's nkey seed
	log       *violationLog
}

// violationLog keeps the server's permission-violation log lines.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}
func (l *violationLog) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if strings.Contains(line, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
}

// Lines returns the violation lines that contain every one of words.
func (l *violationLog) Lines(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// startSecureServer starts nats-server from docs/security.md's conf block
// with only the listen address and store directory changed, and what
// edits change in the block (none but security_limits_test.go's). The
// passwords and executor-c's public nkey come from the environment, as the
// page says, so the test cannot run in parallel with others.
func startSecureServer(t *testing.T, edits ...func(conf string) string) *secureServer {
	t.Helper()
	ss := &secureServer{passwords: map[string]string{}, log: &violationLog{}}
	// The page's configuration takes its secrets from environment
	// variables; each test's server gets its own values, written in for
	// the variables (so the tests that use it can run in parallel: the
	// environment is the process's).
	vars := map[string]string{}
	for user, env := range map[string]string{
		"leasemgr": "LEASEMGR_PASSWORD", "executor-a": "EXECUTOR_A_PASSWORD", "executor-b": "EXECUTOR_B_PASSWORD",
		"jobs-admin": "JOBS_ADMIN_PASSWORD", "reader": "READER_PASSWORD",
	} {
		pw := "pw" + nuid.Next() // letters and digits only; see the page
		ss.passwords[user] = pw
		vars[env] = pw
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	vars["EXECUTOR_C_NKEY"] = pub
	dir := t.TempDir()
	ss.seedFile = filepath.Join(dir, "executor-c.nk")
	if err := os.WriteFile(ss.seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}

	conf := filepath.Join(dir, "nats-server.conf")
	block := securityConf(t)
	for env, v := range vars {
		if !strings.Contains(block, "$"+env) {
			t.Fatalf("docs/security.md's configuration does not take $%s", env)
		}
		block = strings.ReplaceAll(block, "$"+env, strconv.Quote(v))
	}
	for _, edit := range edits {
		block = edit(block)
	}
	if err := os.WriteFile(conf, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("docs/security.md's configuration: %v", err)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.StoreDir = filepath.Join(dir, "jetstream")
	opts.NoSigs = true
	if !opts.JetStream || len(opts.Users) != 5 || len(opts.Nkeys) != 1 || len(opts.Accounts) != 4 {
		t.Fatalf("configuration: JetStream %v, %d users, %d nkey users, %d accounts; want JetStream, 5, 1 and 4", opts.JetStream, len(opts.Users), len(opts.Nkeys), len(opts.Accounts))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(ss.log, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	ss.srv, ss.url = s, "nats://"+s.Addr().String()
	return ss
}

func (ss *secureServer) userAuth(user string) natsconn.Auth {
	return natsconn.Auth{User: user, Password: ss.passwords[user], InboxPrefix: "_INBOX_" + strings.ReplaceAll(user, "-", "_")}
}

// asyncErrs keeps a connection's asynchronous errors.
type asyncErrs struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}

// refused reports whether the server refused the connection's publish
// ("Publish") or subscription ("Subscription") on subject.
func (a *asyncErrs) refused(op, subject string) bool {
	want := fmt.Sprintf("Permissions Violation for %s to %q", op, subject)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, err := range a.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
			return true
		}
	}
	return false
}

func (a *asyncErrs) all() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// rawRequest sends body on subject and decodes the manager's reply.
func rawRequest(t *testing.T, nc *nats.Conn, subject string, body any) lease.Reply {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	var r lease.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply on %s: %v", subject, err)
	}
	return r
}

// The documented layout, in process: a manager as user leasemgr serves;
// executors a (password) and c (nkey) lease with their own inbox prefixes;
// executor b, which reads the public events, can neither reach the lease
// bucket nor another executor's inbox, nor release a's lease with the id
// and token the events carry.
func TestSecurityLayout(t *testing.T) {
	t.Parallel()
	ss := startSecureServer(t)
	const node, pool = "node1", "gpu"

	var mgrErrs, aErrs, bErrs, cErrs asyncErrs
	mgrNC := harness.ConnectAuth(t, ss.url, natsconn.Auth{User: "leasemgr", Password: ss.passwords["leasemgr"]}, nats.ErrorHandler(mgrErrs.handler))
	mgr := harness.StartManagerConn(t, mgrNC, manager.Config{
		Node: node, Pools: []manager.PoolConfig{{Name: pool, Capacity: 1}}, TTL: 5 * time.Second,
		DisconnectEvents: jetstream.ExecutorDisconnectSubject,
	})

	aNC := harness.ConnectAuth(t, ss.url, ss.userAuth("executor-a"), nats.ErrorHandler(aErrs.handler))
	bNC := harness.ConnectAuth(t, ss.url, ss.userAuth("executor-b"), nats.ErrorHandler(bErrs.handler))
	cNC := harness.ConnectAuth(t, ss.url, natsconn.Auth{NKeySeed: ss.seedFile, InboxPrefix: "_INBOX_executor_c"}, nats.ErrorHandler(cErrs.handler))
	clientA, err := lease.NewClient(aNC, node, lease.WithHolder("executor-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer clientA.Close()
	// c's poll is longer than the test: its grant can only arrive as the
	// manager's second reply to one request (queued, then granted).
	clientC, err := lease.NewClient(cNC, node, lease.WithHolder("executor-c"), lease.WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer clientC.Close()

	// b watches the public event stream.
	events := make(chan *nats.Msg, 256)
	if _, err := bNC.ChanSubscribe("lease.events.>", events); err != nil {
		t.Fatal(err)
	}
	if err := bNC.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Executors may ask for stats and discover managers.
	if _, err := clientA.Stats(ctx); err != nil {
		t.Fatalf("executor a: stats: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	nodes, err := lease.DiscoverNodes(dctx, aNC, lease.DefaultPrefix)
	dcancel()
	if err != nil || len(nodes) != 1 || nodes[0] != node {
		t.Fatalf("executor a: DiscoverNodes = %v, %v; want [%s]", nodes, err, node)
	}

	la, err := clientA.Acquire(ctx, pool, 1)
	if err != nil {
		t.Fatalf("executor a: acquire: %v", err)
	}

	// b learns a's lease id, request id, holder and token from the events.
	var granted lease.Event
	for granted.LeaseID != la.ID() {
		select {
		case msg := <-events:
			evs, _ := lease.DecodeEvents(msg.Data)
			for _, ev := range evs {
				if ev.Kind == lease.EventGranted && ev.LeaseID == la.ID() {
					granted = ev
				}
			}
		case <-ctx.Done():
			t.Fatal("executor b saw no granted event for a's lease")
		}
	}
	if granted.Token != la.Token() || granted.Holder != "executor-a" {
		t.Fatalf("granted event %+v: want a's token %d and holder", granted, la.Token())
	}

	// b cannot write or read the lease bucket, use JetStream, resize, or
	// listen where secrets travel.
	forged := "$KV." + jetstream.NamesFor(lease.DefaultPrefix).Leases + "." + lease.RecordKey(node, pool, "forged")
	if err := bNC.Publish(forged, []byte(`{"id":"forged","slots":1}`)); err != nil {
		t.Fatal(err)
	}
	streamInfo := "$JS.API.STREAM.INFO.KV_" + jetstream.NamesFor(lease.DefaultPrefix).Leases
	if _, err := bNC.Request(streamInfo, nil, 500*time.Millisecond); err == nil {
		t.Errorf("executor b: %s answered", streamInfo)
	}
	resize := lease.ResizeSubject(lease.DefaultPrefix, node)
	if err := bNC.Publish(resize, []byte(`{"pools":{"gpu":100}}`)); err != nil {
		t.Fatal(err)
	}
	aInbox, err := bNC.SubscribeSync("_INBOX_executor_a.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$KV.>", "lease.*.*.acquire", "lease." + node + "." + pool + ".renew", ">"} {
		if _, err := bNC.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	if err := bNC.Flush(); err != nil {
		t.Fatal(err)
	}
	refusals := []struct{ op, subject string }{
		{"Publish", forged}, {"Publish", streamInfo}, {"Publish", resize},
		{"Subscription", "_INBOX_executor_a.>"}, {"Subscription", "$KV.>"}, {"Subscription", "lease.*.*.acquire"},
		{"Subscription", "lease." + node + "." + pool + ".renew"}, {"Subscription", ">"},
	}
	harness.Eventually(t, 5*time.Second, "the server to refuse executor b", func() bool {
		for _, r := range refusals {
			if !bErrs.refused(r.op, r.subject) {
				return false
			}
		}
		return true
	})
	// And the refusals had effect: nothing forged in the bucket, pools
	// unchanged, and a's replies (here to a stats request) not seen by b.
	if _, _, err := mgr.Store.Get(ctx, lease.RecordKey(node, pool, "forged")); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Errorf("forged record: Get err = %v, want not found", err)
	}
	if st, err := clientA.Stats(ctx); err != nil || len(st) != 1 || st[0].Capacity != 1 {
		t.Errorf("stats after b's resize = %+v, %v; want gpu of capacity 1", st, err)
	}
	if msg, err := aInbox.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("executor b read executor a's inbox: %s", msg.Subject)
	}

	// b knows the id and token but not the secret.
	releaseSubj := lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbRelease)
	for _, secret := range []string{"", "guess"} {
		r := rawRequest(t, bNC, releaseSubj, lease.ReleaseRequest{LeaseID: granted.LeaseID, Token: granted.Token, Secret: secret})
		if r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
			t.Errorf("executor b's release of a's lease (secret %q): %+v, want %s", secret, r, lease.CodeTokenMismatch)
		}
	}
	r := rawRequest(t, bNC, lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbRenew), lease.RenewRequest{LeaseID: granted.LeaseID, Token: granted.Token})
	if r.Error == nil || r.Error.Code != lease.CodeTokenMismatch {
		t.Errorf("executor b's renewal of a's lease: %+v, want %s", r, lease.CodeTokenMismatch)
	}
	r = rawRequest(t, bNC, lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbCancel), lease.CancelRequest{RequestID: granted.RequestID, Holder: granted.Holder})
	if r.Error == nil || r.Error.Code != lease.CodeConflict {
		t.Errorf("executor b's cancel of a's request: %+v, want %s", r, lease.CodeConflict)
	}
	// Replaying a's acquire would return the stored grant, secret
	// included, to its rightful holder only.
	r = rawRequest(t, bNC, lease.Subject(lease.DefaultPrefix, node, pool, lease.VerbAcquire), lease.AcquireRequest{RequestID: granted.RequestID, Holder: granted.Holder, Slots: 1})
	if r.Error == nil || r.Error.Code != lease.CodeConflict || r.Lease != nil {
		t.Errorf("executor b's replay of a's acquire: %+v, want %s and no lease", r, lease.CodeConflict)
	}
	select {
	case <-la.Done():
		t.Fatalf("a lost its lease: %v", la.Err())
	default:
	}
	if n := len(mgr.Manager.Leases()); n != 1 {
		t.Fatalf("manager holds %d leases, want a's", n)
	}

	// c queues behind a; a's own release succeeds and c is granted.
	queued := make(chan int, 4)
	type result struct {
		l   *lease.Lease
		err error
	}
	cDone := make(chan result, 1)
	go func() {
		l, err := clientC.Acquire(ctx, pool, 1, lease.OnQueued(func(pos int) { queued <- pos }))
		cDone <- result{l, err}
	}()
	select {
	case pos := <-queued:
		if pos != 1 {
			t.Errorf("executor c queued at %d, want 1", pos)
		}
	case res := <-cDone:
		t.Fatalf("executor c: acquire returned before a released: %v", res.err)
	case <-ctx.Done():
		t.Fatal("executor c was not queued")
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("executor a: release: %v", err)
	}
	var lc *lease.Lease
	select {
	case res := <-cDone:
		if res.err != nil {
			t.Fatalf("executor c: acquire: %v", res.err)
		}
		lc = res.l
	case <-time.After(10 * time.Second):
		t.Fatal("executor c was not granted after a released: the manager's second reply was refused?")
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatalf("executor c: release: %v", err)
	}

	// Only b broke the rules.
	for name, errs := range map[string]*asyncErrs{"leasemgr": &mgrErrs, "executor-a": &aErrs, "executor-c": &cErrs} {
		if e := errs.all(); len(e) > 0 {
			t.Errorf("%s: asynchronous errors %v", name, e)
		}
	}
	for _, line := range ss.log.Lines() {
		if !strings.Contains(line, "executor-b") {
			t.Errorf("server logged a violation by someone other than executor b: %s", line)
		}
	}
}

// The real binaries under the documented layout: leasemgr as user leasemgr
// (buckets, leader election, event stream, micro service), `executor run`
// as executor a with a password and as executor c with an nkey seed.
func TestSecurityLayoutBinaries(t *testing.T) {
	t.Parallel()
	ss := startSecureServer(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	common := []string{"NATS_URL=" + ss.url, "NODE_ID=node1"}
	mgrEnv := append([]string{"NATS_USER=leasemgr", "NATS_PASSWORD=" + ss.passwords["leasemgr"],
		// The job queue's administrator: leasemgr makes the queue and runs
		// its broker, as docs/security.md's settings say.
		"JOBS_NATS_USER=jobs-admin", "JOBS_NATS_PASSWORD=" + ss.passwords["jobs-admin"],
		"POOL_CAPACITIES=gpu=1", "HTTP_ADDR=" + httpAddr, "LOG_LEVEL=debug",
		"DISCONNECT_EVENTS=" + jetstream.ExecutorDisconnectSubject}, common...)
	m := start(t, mgrEnv, "leasemgr")
	eventually(t, 20*time.Second, "leasemgr to be ready", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The HTTP API's live events come from the manager's subscription to
	// lease.events.>.
	sseCtx, sseCancel := context.WithCancel(context.Background())
	defer sseCancel()
	req, err := http.NewRequestWithContext(sseCtx, http.MethodGet, "http://"+httpAddr+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/events: %s", resp.Status)
	}
	var sse struct {
		sync.Mutex
		strings.Builder
	}
	sseDone := make(chan struct{})
	go func() {
		defer close(sseDone)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			sse.Lock()
			sse.Write(buf[:n])
			sse.Unlock()
			if err != nil {
				return
			}
		}
	}()
	defer func() { sseCancel(); <-sseDone }()

	for name, env := range map[string][]string{
		"executor-a": {"NATS_USER=executor-a", "NATS_PASSWORD=" + ss.passwords["executor-a"], "NATS_INBOX_PREFIX=_INBOX_executor_a"},
		"executor-c": {"NATS_NKEY=" + ss.seedFile, "NATS_INBOX_PREFIX=_INBOX_executor_c"},
	} {
		run := start(t, append(env, common...), "executor", "run", "--pool", "gpu", "--", "sh", "-c", `echo "held $LEASE_ID"`)
		if code := run.Wait(t, 30*time.Second); code != 0 || !strings.Contains(run.Output(), "held ") {
			t.Fatalf("%s: executor run exit %d:\n%s", name, code, run.Output())
		}
		// The password never reaches the worker or the output.
		if pw := ss.passwords[name]; pw != "" && strings.Contains(run.Output(), pw) {
			t.Errorf("%s: output shows the password", name)
		}
	}

	eventually(t, 10*time.Second, "the grants on /v1/events", func() bool {
		sse.Lock()
		defer sse.Unlock()
		return strings.Count(sse.String(), "granted") >= 2
	})

	// The job queue in the executors' account: leasemgr, as jobs-admin,
	// made its stream and buckets and runs its broker; executor a submits
	// and serves it with its narrow rights.
	exeA := append([]string{"NATS_USER=executor-a", "NATS_PASSWORD=" + ss.passwords["executor-a"], "NATS_INBOX_PREFIX=_INBOX_executor_a"}, common...)
	sub := start(t, exeA, "executor", "submit", "--pool", "gpu", "--", "true")
	if code := sub.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("executor submit as executor a: exit %d\n%s", code, sub.Output())
	}
	id := strings.TrimSpace(sub.Output())
	// Issue 38, in the layout: executor b, with its own user, can make no
	// consumer on the job queue (an unfiltered durable stopped every
	// serve), and its rewrite of a's queued job to "succeeded" is refused.
	bNC := harness.ConnectAuth(t, ss.url, ss.userAuth("executor-b"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	bjs, err := natsjs.New(bNC)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = bjs.CreateOrUpdateConsumer(cctx, jobs.NamesFor(lease.DefaultPrefix).Stream, natsjs.ConsumerConfig{Durable: "hog", AckPolicy: natsjs.AckExplicitPolicy})
	ccancel()
	if err == nil {
		t.Fatal("executor b made an unfiltered durable on the job stream")
	}
	forged := fmt.Sprintf(`{"id":%q,"state":"succeeded","exit_code":0,"spec":{"pool":"gpu","command":["true"]}}`, id)
	if _, err := bNC.Request("$KV."+jobs.NamesFor(lease.DefaultPrefix).Results+"."+id, []byte(forged), 10*time.Second); err != nil {
		t.Fatalf("executor b's put: %v", err)
	}
	if st := start(t, exeA, "executor", "status", id); st.Wait(t, 20*time.Second) != 0 || !strings.Contains(st.Output(), "REFUSED") {
		t.Fatalf("executor status after b's forgery:\n%s", st.Output())
	}
	serve := start(t, exeA, "executor", "serve", "--pools", "gpu")
	eventually(t, 30*time.Second, "executor a to run the job", func() bool {
		st := start(t, exeA, "executor", "status", id)
		return st.Wait(t, 20*time.Second) == 0 && strings.Contains(st.Output(), "succeeded") && !strings.Contains(st.Output(), "REFUSED")
	})
	_ = serve.cmd.Process.Signal(syscall.SIGTERM)
	serve.Wait(t, 30*time.Second)

	// Issue 13's first attack, and issue 28's, under the documented
	// layout: executor a aims the replies of every request it may send,
	// and the answers of JetStream to direct gets of what it stored, at
	// the managers' state; the reader aims its requests there too. The
	// managers' account sees none of it: a reply crosses back into the
	// requester's own account.
	mgrNC := harness.ConnectAuth(t, ss.url, natsconn.Auth{User: "leasemgr", Password: ss.passwords["leasemgr"]})
	kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer kcancel()
	leaders, err := jetstream.OpenLeaseStore(kctx, mgrNC, jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Leaders})
	if err != nil {
		t.Fatal(err)
	}
	keyBefore, revBefore, err := leaders.Get(kctx, "node1")
	if err != nil {
		t.Fatalf("the leadership key of a ready node: %v", err)
	}
	nonce := nuid.Next()
	spy := harness.SpyOnManagers(t, mgrNC, nonce)
	attacker := harness.ConnectAuth(t, ss.url, ss.userAuth("executor-a"))
	subjs := append(append(verbSubjects("node1", "gpu"), lease.StatsSubject(lease.DefaultPrefix, "node1")), harness.DiscoveryRequests()...)
	replyToLeadershipKey(t, attacker, "node1", subjs)
	targets := harness.BounceTargets("node1", "gpu", "none")
	harness.BounceWithDirectGets(t, attacker, jobs.NamesFor(lease.DefaultPrefix).Results, nonce, harness.ForgedMsgs("node1", "gpu"), targets)
	spy.Check(t, "executor a")
	reader := harness.ConnectAuth(t, ss.url, ss.userAuth("reader"))
	harness.BounceWithRequests(t, reader, append([]string{
		"$JS.API.DIRECT.GET." + jetstream.NamesFor(lease.DefaultPrefix).Events,
		lease.StatsSubject(lease.DefaultPrefix, "node1"), lease.SnapshotSubject(lease.DefaultPrefix, "node1"),
	}, harness.DiscoveryRequests()...), nonce, targets)
	if _, err := reader.Request(lease.StatsSubject(lease.DefaultPrefix, "node1"), nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	spy.Check(t, "reader")
	// The leader renews its key every LEADER_TTL/3, which moves the
	// revision but writes the same value.
	if keyAfter, revAfter, err := leaders.Get(kctx, "node1"); err != nil || string(keyAfter) != string(keyBefore) {
		t.Fatalf("leadership key after the attack: revision %d (was %d), %q (was %q), %v", revAfter, revBefore, keyAfter, keyBefore, err)
	}
	again := start(t, exeA, "executor", "run", "--pool", "gpu", "--", "true")
	if code := again.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("executor run after the attack: exit %d\n%s", code, again.Output())
	}

	// The reader's commands, with the reader's credentials.
	readerEnv := append([]string{"NATS_USER=reader", "NATS_PASSWORD=" + ss.passwords["reader"], "NATS_INBOX_PREFIX=_INBOX_reader"}, common...)
	rpools := start(t, readerEnv, "leasemgr", "pools", "--all")
	if code := rpools.Wait(t, 20*time.Second); code != 0 || !regexp.MustCompile(`node1\s+gpu\s+1\s`).MatchString(rpools.Output()) {
		t.Fatalf("leasemgr pools --all as reader: exit %d:\n%s", code, rpools.Output())
	}
	rwatch := start(t, readerEnv, "leasemgr", "watch", "--since", "1h")
	eventually(t, 10*time.Second, "watch --since as reader to replay the grants", func() bool {
		return strings.Count(rwatch.Output(), "granted") >= 2
	})

	// Administrative commands run with the manager's credentials.
	pools := start(t, mgrEnv, "leasemgr", "pools", "--all")
	if code := pools.Wait(t, 20*time.Second); code != 0 || !regexp.MustCompile(`node1\s+gpu\s+1\s`).MatchString(pools.Output()) {
		t.Fatalf("leasemgr pools --all: exit %d:\n%s", code, pools.Output())
	}
	watch := start(t, mgrEnv, "leasemgr", "watch", "--since", "1h")
	eventually(t, 10*time.Second, "watch --since to replay the grants", func() bool {
		return strings.Count(watch.Output(), "granted") >= 2
	})

	// Only executor b's attack broke the rules.
	var others []string
	for _, line := range ss.log.Lines() {
		if !strings.Contains(line, "executor-b") {
			others = append(others, line)
		}
	}
	if len(others) > 0 {
		t.Errorf("permission violations under the documented layout:\n%s\nleasemgr output:\n%s", strings.Join(others, "\n"), m.Output())
	}
}

// simpleManagerEnv is a leasemgr on its own embedded server, HTTP off.
func simpleManagerEnv(t *testing.T, extra ...string) (env []string, natsURL string) {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return append([]string{
		"NODE_ID=logs", "NATS_LISTEN=" + listen, "HTTP_ADDR=",
		"NATS_STORE_DIR=" + filepath.Join(t.TempDir(), "js"),
		"HOME=" + testHome(t),
	}, extra...), "nats://" + listen
}

// waitServing polls the manager's stats over NATS until it answers.
func waitServing(t *testing.T, url, node string) {
	t.Helper()
	eventually(t, 20*time.Second, "leasemgr to serve", func() bool {
		nc, err := connectAs(t, testHome(t), url, config.RoleReader, nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		defer nc.Close()
		c, err := lease.NewClient(nc, node)
		if err != nil {
			return false
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = c.Stats(ctx)
		return err == nil
	})
}

func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	env, url := simpleManagerEnv(t, "LOG_FORMAT=json", "LOG_LEVEL=debug")
	m := start(t, env, "leasemgr")
	waitServing(t, url, "logs")
	eventually(t, 10*time.Second, "a pool log line", func() bool { return strings.Contains(m.Output(), `"msg":"pool"`) })
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d:\n%s", code, m.Output())
	}
	out := strings.TrimSpace(m.Output())
	lines := strings.Split(out, "\n")
	if len(lines) < 3 {
		t.Fatalf("want several log lines, got:\n%s", out)
	}
	msgs := map[string]bool{}
	for _, line := range lines {
		var rec struct {
			Time  time.Time
			Level string
			Msg   string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line is not JSON: %q: %v", line, err)
		}
		if rec.Time.IsZero() || rec.Level == "" || rec.Msg == "" {
			t.Errorf("line lacks time, level or msg: %q", line)
		}
		msgs[rec.Msg] = true
	}
	for _, want := range []string{"embedded NATS server with JetStream", "pool", "shut down"} {
		if !msgs[want] {
			t.Errorf("no %q line in:\n%s", want, out)
		}
	}
}

// LOG_LEVEL=warn drops the info lines a normal start prints; text is the
// default format.
func TestLogLevelWarnText(t *testing.T) {
	t.Parallel()
	env, url := simpleManagerEnv(t, "LOG_LEVEL=warn")
	m := start(t, env, "leasemgr")
	waitServing(t, url, "logs")
	if err := m.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d:\n%s", code, m.Output())
	}
	if out := m.Output(); strings.Contains(out, "level=INFO") || strings.Contains(out, "shut down") {
		t.Errorf("LOG_LEVEL=warn printed info lines:\n%s", out)
	}

	env, url = simpleManagerEnv(t)
	m = start(t, env, "leasemgr")
	waitServing(t, url, "logs")
	eventually(t, 10*time.Second, "an info line", func() bool { return strings.Contains(m.Output(), "level=INFO") })
	if strings.Contains(m.Output(), `"level"`) {
		t.Errorf("default format is not text:\n%s", m.Output())
	}
}

// A bad value of each security or log variable stops both programs at
// start-up with exit code 2 and a message naming the variable.
func TestAuthAndLogBadValuesExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := filepath.Join(dir, "user.creds")
	notPEM := filepath.Join(dir, "not.pem")
	for _, f := range []string{creds, notPEM} {
		if err := os.WriteFile(f, []byte("not what it should be"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	const password = "hunter2-do-not-print"
	tests := []struct {
		env     []string
		wantVar string
	}{
		{[]string{"LOG_LEVEL=verbose"}, "LOG_LEVEL"},
		{[]string{"LOG_FORMAT=yaml"}, "LOG_FORMAT"},
		{[]string{"NATS_NKEY=" + missing}, "NATS_NKEY"},
		{[]string{"NATS_NKEY=" + notPEM}, "NATS_NKEY"},
		{[]string{"NATS_USER=u", "NATS_PASSWORD=" + password, "NATS_CREDS=" + creds}, "NATS_USER"},
		{[]string{"NATS_PASSWORD=" + password}, "NATS_PASSWORD"},
		{[]string{"NATS_TLS_CA=" + missing}, "NATS_TLS_CA"},
		{[]string{"NATS_TLS_CA=" + notPEM}, "NATS_TLS_CA"},
		{[]string{"NATS_TLS_CERT=" + notPEM}, "NATS_TLS_KEY"},
		{[]string{"NATS_TLS_KEY=" + notPEM}, "NATS_TLS_CERT"},
		{[]string{"NATS_TLS_CERT=" + notPEM, "NATS_TLS_KEY=" + notPEM}, "NATS_TLS_CERT"},
		{[]string{"NATS_INBOX_PREFIX=_INBOX.>"}, "NATS_INBOX_PREFIX"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			for _, args := range [][]string{{"leasemgr"}, {"executor", "run", "--pool", "default", "--", "true"}} {
				p := start(t, tt.env, args[0], args[1:]...)
				code := p.Wait(t, 20*time.Second)
				out := p.Output()
				if code != 2 || !strings.Contains(out, tt.wantVar+": ") {
					t.Errorf("%s: exit %d, want 2 and a message naming %s:\n%s", args[0], code, tt.wantVar, out)
				}
				if strings.Contains(out, password) {
					t.Errorf("%s: output shows NATS_PASSWORD:\n%s", args[0], out)
				}
			}
		})
	}
}
