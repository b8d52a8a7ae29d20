package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// The README's setup, attacked with the credentials leasemgr makes for its
// embedded server (issue 13, "secure by default"): no anonymous access;
// executor and the leasemgr subcommands work with zero configuration; the
// executor role cannot touch lease state or events, the reader role
// cannot write anything; the files are private and never printed.
func TestEmbeddedServerSecureByDefault(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "sec", "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)
	dir := authDirFor(t, home, url)

	t.Run("files are private", func(t *testing.T) {
		checkMode(t, dir, 0o700)
		for _, r := range config.Roles {
			checkMode(t, config.AuthFile(dir, r), 0o600)
		}
		checkMode(t, envValue(env, "NATS_STORE_DIR"), 0o700)
	})

	t.Run("anonymous refused", func(t *testing.T) {
		nc, err := nats.Connect(url, nats.MaxReconnects(0), nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Fatal("an anonymous client connected to the embedded server")
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("anonymous connect: %v, want an authorization error", err)
		}
	})

	// Zero configuration: the manager's environment only says where the
	// server listens, as in the README.
	t.Run("zero configuration", func(t *testing.T) {
		shared := sharedDir(t)
		dump := filepath.Join(shared, "worker-env")
		if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--writable", shared, "--env", "DUMP="+dump, "--", "sh", "-c", `env > "$DUMP"`); code != 0 {
			t.Fatalf("executor run: exit %d\n%s", code, out)
		}
		workerEnv, err := os.ReadFile(dump)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(workerEnv), "NATS_") || strings.Contains(string(workerEnv), dir) {
			t.Errorf("the worker's environment names NATS credentials:\n%s", workerEnv)
		}
		if code, out := runLeasemgr(t, env, "resize", "gpu=2"); code != 0 {
			t.Fatalf("leasemgr resize: exit %d\n%s", code, out)
		}
		code, out := runLeasemgr(t, env, "pools")
		if code != 0 || !regexp.MustCompile(`sec\s+gpu\s+2\s`).MatchString(out) {
			t.Fatalf("leasemgr pools: exit %d, want gpu with capacity 2:\n%s", code, out)
		}
		watch := start(t, env, "leasemgr", "watch", "--since", "1h")
		eventually(t, 20*time.Second, "watch --since to replay the grant", func() bool {
			out := watch.Output()
			return strings.Contains(out, "granted") && strings.Contains(out, "released") && strings.Contains(out, "sec/gpu")
		})
		// The job queue, with the executor role's narrow JetStream rights.
		work := sharedDir(t)
		code, out = runExecutor(t, env, "submit", "--pool", "gpu", "--writable", work, "--env", "OUT="+work, "--", "sh", "-c", `touch "$OUT/done"`)
		if code != 0 {
			t.Fatalf("executor submit: exit %d\n%s", code, out)
		}
		id := strings.TrimSpace(out)
		serve := start(t, env, "executor", "serve", "--pools", "gpu")
		eventually(t, 30*time.Second, "the job to run under executor serve", func() bool {
			_, err := os.Stat(filepath.Join(work, "done"))
			return err == nil
		})
		eventually(t, 20*time.Second, "executor status to show success", func() bool {
			code, out := runExecutor(t, env, "status", id)
			return code == 0 && strings.Contains(out, "succeeded")
		})
		if code, out := runExecutor(t, env, "jobs"); code != 0 || !strings.Contains(out, id) {
			t.Fatalf("executor jobs: exit %d, want job %s listed:\n%s", code, id, out)
		}
		_ = serve.cmd.Process.Signal(syscall.SIGTERM)
		if code := serve.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("executor serve: exit %d after SIGTERM", code)
		}
	})

	t.Run("executor role uses the job queue without violations", func(t *testing.T) {
		var errs asyncErrs
		nc := mustConnectAs(t, home, url, config.RoleExecutor, nats.ErrorHandler(errs.handler))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		q, err := jobs.Open(ctx, nc, jobs.Config{Prefix: lease.DefaultPrefix})
		if err != nil {
			t.Fatal(err)
		}
		// Serve: durable consumers, fetch, heartbeats, results, a retry
		// and a dead letter, all as the executor role.
		client, err := lease.NewClient(nc, "sec")
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		srv, err := jobs.NewServer(jobs.ServerConfig{
			Queue: q, Conn: nc, Leases: client, Pools: []string{"gpu"}, Logger: slog.New(slog.DiscardHandler),
			PollInterval: 50 * time.Millisecond, Backoff: 50 * time.Millisecond, KillGrace: 200 * time.Millisecond,
			Env: func([]*lease.Lease, map[string]string) map[string]string {
				return map[string]string{"PATH": os.Getenv("PATH")}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(sctx) }()
		defer func() {
			stop()
			<-served
		}()
		ok, bad := jobs.NewSpec(), jobs.NewSpec()
		ok.Pool, ok.Command = "gpu", []string{"true"}
		bad.Pool, bad.Command, bad.MaxAttempts = "gpu", []string{"false"}, 2
		var ids []string
		for _, spec := range []jobs.Spec{ok, bad} {
			rec, err := q.Submit(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
		}
		for i, want := range []jobs.State{jobs.StateSucceeded, jobs.StateDead} {
			eventually(t, 30*time.Second, "job "+ids[i]+" to end "+string(want), func() bool {
				rec, err := q.Get(ctx, ids[i])
				return err == nil && rec.State == want
			})
		}
		if _, err := q.DeadLetter(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := q.List(ctx, 0, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Depths(ctx); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("permission violations: %v", e)
		}
	})

	t.Run("reader role reads the cluster view without violations", func(t *testing.T) {
		var errs asyncErrs
		nc := mustConnectAs(t, home, url, config.RoleReader, nats.ErrorHandler(errs.handler))
		src, err := httpapi.NewNATSSource(nc, lease.DefaultPrefix, "sec", func() *manager.Manager { return nil },
			httpapi.WithEventStream(jetstream.NamesFor(lease.DefaultPrefix).Events))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// An event to replay, made with the executor's rights.
		client, err := lease.NewClient(mustConnectAs(t, home, url, config.RoleExecutor), "sec")
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		l, err := client.Acquire(ctx, "gpu", 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		nodes, err := src.Discover(ctx)
		if err != nil || !slices.Equal(nodes, []string{"sec"}) {
			t.Fatalf("discover: %v, %v", nodes, err)
		}
		res := src.Snapshots(ctx, nodes, true)
		if res[0].Err != nil || len(res[0].Snapshot.Pools) == 0 || len(res[0].Snapshot.Pools[0].History) == 0 {
			t.Fatalf("snapshot: %+v", res[0])
		}
		eventually(t, 5*time.Second, "the release in the event stream", func() bool {
			evs, err := src.RecentEvents(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(evs, func(ev lease.Event) bool {
				return ev.Kind == lease.EventReleased && ev.LeaseID == l.Record().ID
			})
		})
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("permission violations: %v", e)
		}
	})

	mgr := mustConnectAs(t, home, url, config.RoleManager)
	// The record an attacker would forge or delete, and the leader key it
	// would break: read with the manager's rights before and after.
	kvKeys := func(bucket string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		js, err := natsjs.New(mgr)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.Keys(ctx)
		if err != nil && !errors.Is(err, natsjs.ErrNoKeysFound) {
			t.Fatal(err)
		}
		return keys
	}
	buckets := []string{jetstream.NamesFor(lease.DefaultPrefix).Leases, jetstream.NamesFor(lease.DefaultPrefix).Leaders, jetstream.NamesFor(lease.DefaultPrefix).Pools}
	// The pool counts the manager stores within a second of the lease
	// cycle above: there before the keys are compared, and a target.
	eventually(t, 30*time.Second, "the pool counts stored", func() bool { return slices.Contains(kvKeys(buckets[2]), "sec.counts") })
	before := map[string][]string{}
	for _, b := range buckets {
		before[b] = kvKeys(b)
	}
	if len(before[jetstream.NamesFor(lease.DefaultPrefix).Leaders]) == 0 {
		t.Fatal("no leadership key to protect")
	}
	events := make(chan *nats.Msg, 64)
	evSub, err := mgr.ChanSubscribe("lease.events.>", events)
	if err != nil {
		t.Fatal(err)
	}
	defer evSub.Unsubscribe()
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}

	// Every write an executor or a reader might try: each must be refused
	// by the server.
	writes := []string{
		"lease.events.sec.gpu.granted",
		"$JS.API.STREAM.CREATE.evil", "$JS.API.STREAM.UPDATE.lease_jobs",
		"$JS.API.STREAM.DELETE.lease_events", "$JS.API.STREAM.PURGE.lease_events",
		"$JS.API.DIRECT.GET.KV_lease_leases", "$JS.API.DIRECT.GET.KV_lease_leases.$KV.lease_leases.sec.gpu.x",
		"$JS.API.STREAM.MSG.GET.KV_lease_leases", "$JS.API.CONSUMER.CREATE.KV_lease_leases.x",
		"$JS.API.CONSUMER.CREATE.KV_lease_leases.x.$KV.lease_leases.sec",
		"lease.sec.resize",
	}
	for _, b := range buckets {
		writes = append(writes, "$KV."+b+".sec.gpu.forged", "$JS.API.STREAM.PURGE.KV_"+b, "$JS.API.STREAM.INFO.KV_"+b)
	}
	writes = append(writes, "$KV."+buckets[2]+".sec.counts")
	readerWrites := append([]string{
		"lease.sec.gpu.acquire", "lease.sec.gpu.release", "lease.jobs.queue.gpu.normal",
		"$KV.lease_job_results.x", "$JS.API.STREAM.INFO.lease_jobs",
	}, writes...)
	for _, tc := range []struct {
		role   config.Role
		pubs   []string
		subs   []string
		attack string
	}{
		{config.RoleExecutor, writes, []string{"lease.*.*.acquire", "lease.sec.gpu.renew", "_SLOTLEASE_MGR.>", "_SLOTLEASE_READ.>", "$KV.>", ">"}, "executor"},
		{config.RoleReader, readerWrites, []string{"lease.*.*.acquire", "_INBOX.>", "_SLOTLEASE_MGR.>", ">"}, "reader"},
	} {
		t.Run(tc.attack+" is refused", func(t *testing.T) {
			var errs asyncErrs
			nc := mustConnectAs(t, home, url, tc.role, nats.ErrorHandler(errs.handler))
			for _, subj := range tc.pubs {
				if err := nc.PublishRequest(subj, nc.NewInbox(), []byte(`{"stream_name":"evil","config":{"name":"evil","subjects":["lease.>"]}}`)); err != nil {
					t.Fatal(err)
				}
			}
			for _, subj := range tc.subs {
				if _, err := nc.Subscribe(subj, func(*nats.Msg) {}); err != nil {
					t.Fatal(err)
				}
			}
			for _, subj := range tc.pubs {
				eventually(t, 10*time.Second, "publish to "+subj+" refused", func() bool { return errs.refused("Publish", subj) })
			}
			if tc.role == config.RoleExecutor {
				pushIntoLeaseState(t, nc, mgr)
			}
			for _, subj := range tc.subs {
				eventually(t, 10*time.Second, "subscription to "+subj+" refused", func() bool { return errs.refused("Subscription", subj) })
			}
		})
	}

	// Nothing the attackers tried had an effect.
	for _, b := range buckets {
		if got := kvKeys(b); strings.Join(got, ",") != strings.Join(before[b], ",") {
			t.Errorf("bucket %s: keys %v, before the attacks %v", b, got, before[b])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := natsjs.New(mgr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "evil"); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("stream evil: %v, want not found", err)
	}
	select {
	case msg := <-events:
		t.Errorf("an event reached the event subjects during the attacks: %s %s", msg.Subject, msg.Data)
	default:
	}
	if code, out := runLeasemgr(t, env, "pools"); code != 0 {
		t.Fatalf("the node stopped serving after the attacks: exit %d\n%s", code, out)
	}

	// No seed in anything the programs printed.
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)
	for _, r := range config.Roles {
		seed, err := os.ReadFile(config.AuthFile(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(seed)); s == "" || strings.Contains(m.Output(), s) {
			t.Errorf("leasemgr's output shows the %s seed (or the seed file is empty)", r)
		}
	}
}

// Credentials others could read are refused at start, by leasemgr and by
// the executor, with a message naming the file and the fix.
func TestEmbeddedCredentialsMustBePrivate(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "priv", "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)
	dir := authDirFor(t, testHome(t), "nats://"+envValue(env, "NATS_LISTEN"))

	file := config.AuthFile(dir, config.RoleExecutor)
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"leasemgr"}, {"executor", "run", "--pool", "gpu", "--", "true"}} {
		p := start(t, env, args[0], args[1:]...)
		code := p.Wait(t, 20*time.Second)
		if out := p.Output(); code != 2 || !strings.Contains(out, file) || !strings.Contains(out, "group or others") || !strings.Contains(out, "chmod 600") {
			t.Errorf("%s with a group-readable %s: exit %d, want 2 naming the file and the fix:\n%s", args[0], file, code, out)
		}
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := start(t, env, "leasemgr")
	if code := p.Wait(t, 20*time.Second); code != 2 || !strings.Contains(p.Output(), dir+": is accessible to group or others") {
		t.Errorf("leasemgr with a 0755 credentials directory: exit %d, want 2 naming it:\n%s", code, p.Output())
	}
}

// pushIntoLeaseState tries the write path the executor's job-queue rights
// used to leave: a push consumer on a bucket it may write, delivering into
// the event subjects and the lease bucket. Executors make no consumer at
// all now (the job broker makes the job stream's, jobs/broker.go): every
// such request is refused by the server's permissions. The caller checks
// that nothing arrived in the managers' account either.
func pushIntoLeaseState(t *testing.T, nc, mgr *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "lease_job_results")
	if err != nil {
		t.Fatal(err)
	}
	const forged = `{"kind":"granted","node":"sec","pool":"gpu","slots":99}`
	if _, err := kv.Put(ctx, "forged", []byte(forged)); err != nil {
		t.Fatal(err)
	}
	for i, deliver := range []string{"lease.events.sec.gpu.granted", "$KV.lease_leases.sec.gpu.forged", "$KV.lease_leaders.forged"} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := js.CreateOrUpdateConsumer(cctx, "KV_lease_job_results", natsjs.ConsumerConfig{Name: fmt.Sprintf("push%d", i), DeliverSubject: deliver, AckPolicy: natsjs.AckNonePolicy})
		ccancel()
		if err == nil {
			t.Fatalf("a push consumer delivering to %s was made with the executor credential", deliver)
		}
	}
	// Had anything crossed into the managers' account, it would have
	// arrived there before this round trip returns.
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %04o, want %04o", path, got, want)
	}
}

func mustConnectAs(t *testing.T, home, url string, role config.Role, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := connectAs(t, home, url, role, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// runLeasemgr runs one leasemgr subcommand to its end.
func runLeasemgr(t *testing.T, env []string, args ...string) (code int, out string) {
	t.Helper()
	p := start(t, env, "leasemgr", args...)
	code = p.Wait(t, 30*time.Second)
	return code, p.Output()
}
