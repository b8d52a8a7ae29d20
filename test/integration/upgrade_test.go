package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// An install made by the version before the executors' account upgrades
// in place (issue 28): that version kept everything, the job queue
// included, in one account (SLOTLEASE), its buckets without size caps
// (issue 38), and pool changes unmarked under the node's key. The store is
// made the way it was, by a server with that one account, and then the
// new leasemgr starts on it: the buckets get their caps, the queued job is
// still there and runs, the resize is still applied, and the credentials
// are the same files.
func TestUpgradeKeepsJobsPoolsAndCredentials(t *testing.T) {
	t.Parallel()
	const node = "upg"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	store := envValue(env, "NATS_STORE_DIR")
	home := testHome(t)
	url := "nats://" + envValue(env, "NATS_LISTEN")
	authDir := authDirFor(t, home, url)
	if _, err := jetstream.EnsureCredentials(authDir); err != nil {
		t.Fatal(err)
	}
	seed := func() string {
		data, err := os.ReadFile(config.AuthFile(authDir, config.RoleExecutor))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	before := seed()

	// The earlier version's store: one account, the job queue in it, a
	// queued job and an unmarked resize of gpu to 3.
	old, err := jetstream.StartServer(jetstream.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: store, Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	nc := harness.Connect(t, old.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := jobs.NamesFor(lease.DefaultPrefix)
	ojs, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{names.Results, names.Dead} { // as that version made them: no MaxBytes
		if _, err := ojs.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: b, History: 1, TTL: time.Hour, MaxValueSize: 2 * jobs.MaxSpecBytes, Storage: natsjs.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := jobs.Open(ctx, nc, jobs.Config{Prefix: lease.DefaultPrefix})
	if err != nil {
		t.Fatal(err)
	}
	work := sharedDir(t) // the confined worker writes only there
	spec := jobs.NewSpec()
	spec.ID, spec.Pool, spec.Command = "queued-before-the-upgrade", "gpu", []string{"sh", "-c", "touch " + filepath.Join(work, "ran")}
	spec.Writable = []string{work}
	if _, err := q.Submit(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pools, err := jetstream.OpenLeaseStore(ctx, nc, jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Pools})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Put(ctx, node, []byte(`{"set":{"gpu":3}}`)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	old.Shutdown()
	old.WaitForShutdown()

	m := startManager(t, env, httpAddr)
	eventually(t, 10*time.Second, "leasemgr to say it moved the job queue", func() bool {
		return strings.Contains(m.Output(), "job queue moved to the executors' account")
	})
	if code, out := runLeasemgr(t, env, "pools"); code != 0 || !regexp.MustCompile(`upg\s+gpu\s+3\s`).MatchString(out) {
		t.Fatalf("leasemgr pools after the upgrade: exit %d, want gpu at the resized capacity 3:\n%s", code, out)
	}
	if code, out := runExecutor(t, env, "status", spec.ID); code != 0 || !strings.Contains(out, "queued") {
		t.Fatalf("executor status of the job queued before the upgrade: exit %d\n%s", code, out)
	}
	exe, err := natsjs.New(mustConnectAs(t, home, url, config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	for bucket, want := range map[string]int64{names.Results: config.DefaultExecutorsMaxStore / 4, names.Dead: config.DefaultExecutorsMaxStore / 8} {
		s, err := exe.Stream(ctx, "KV_"+bucket)
		if err != nil || s.CachedInfo().Config.MaxBytes != want {
			t.Fatalf("bucket %s after the upgrade: %v, want capped at %d bytes", bucket, err, want)
		}
	}
	serve := start(t, env, "executor", "serve", "--pools", "gpu")
	eventually(t, 30*time.Second, "the job queued before the upgrade to run", func() bool {
		_, err := os.Stat(filepath.Join(work, "ran"))
		return err == nil
	})
	eventually(t, 20*time.Second, "its record to say so", func() bool {
		code, out := runExecutor(t, env, "status", spec.ID)
		return code == 0 && strings.Contains(out, "succeeded")
	})
	_ = serve.cmd.Process.Signal(syscall.SIGTERM)
	serve.Wait(t, 30*time.Second)
	if seed() != before {
		t.Fatal("the executor's credentials changed across the upgrade")
	}

	// A second start moves nothing and keeps the resize.
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)
	m = startManager(t, env, httpAddr)
	if strings.Contains(m.Output(), "job queue moved") {
		t.Fatalf("the second start moved the job queue again:\n%s", m.Output())
	}
	if code, out := runLeasemgr(t, env, "pools"); code != 0 || !regexp.MustCompile(`upg\s+gpu\s+3\s`).MatchString(out) {
		t.Fatalf("leasemgr pools after a second start: exit %d:\n%s", code, out)
	}
}
