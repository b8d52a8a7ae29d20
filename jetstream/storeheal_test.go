package jetstream

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
)

// healServer is an embedded server with the roles' accounts, whose store
// syncs every 100 ms (the default is 2 minutes), a lease bucket in the
// managers' account holding key "k", and a bucket in the executors'.
type healServer struct {
	s             *server.Server
	dir           string
	leaders, jobs *LeaseStore
}

func startHealServer(t *testing.T) *healServer {
	t.Helper()
	h := &healServer{dir: t.TempDir()}
	keys, err := EnsureCredentials(filepath.Join(h.dir, "auth"))
	if err != nil {
		t.Fatal(err)
	}
	admin, adminAuth, err := NewJobsAdmin()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := serverOptions(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(h.dir, "store"),
		Users: append(EmbeddedUsers(keys, "lease"), admin)})
	if err != nil {
		t.Fatal(err)
	}
	opts.SyncInterval = 100 * time.Millisecond
	if h.s, err = startServer(opts, false, "test server"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.s.Shutdown()
		h.s.WaitForShutdown()
	})
	managerAuth, err := nats.NkeyOptionFromSeed(config.AuthFile(filepath.Join(h.dir, "auth"), config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(auth nats.Option, bucket string) *LeaseStore {
		nc, err := nats.Connect(h.s.ClientURL(), auth)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		store, err := OpenLeaseStore(ctx, nc, BucketConfig{Name: bucket})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Create(ctx, "k", []byte("before"), time.Hour); err != nil {
			t.Fatal(err)
		}
		return store
	}
	h.leaders, h.jobs = open(managerAuth, "heal_leaders"), open(adminAuth, "heal_jobs")
	return h
}

// breakStore breaks a bucket's store the way a missing descriptor does,
// and returns the function that ends the cause. The store's sync opens
// the stream's index.db; made a directory, the open fails (EISDIR) as it
// failed with EMFILE during a flood of connections, and the store keeps
// the error.
func (h *healServer) breakStore(t *testing.T, account, bucket string) (mend func()) {
	t.Helper()
	index := filepath.Join(h.dir, "store", "jetstream", account, "streams", "KV_"+bucket, "msgs", "index.db")
	if err := os.Remove(index); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Mkdir(index, 0o700); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(index); err != nil {
			t.Fatal(err)
		}
	}
}

// writes reports whether a write to the store is stored within a second.
func writes(store *LeaseStore) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := store.Put(ctx, "probe", []byte("x"))
	return err == nil
}

// The root cause of issue 38, item 6, pinned: once a file the store opens
// could not be opened, the stream takes no write, also after the cause is
// gone, until it is loaded again. If a nats-server release heals by
// itself, this fails, and the healer may go.
func TestStoreWriteErrorIsSticky(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	s, store := h.s, h.leaders
	mend := h.breakStore(t, ManagerAccount, "heal_leaders")
	waitFor(t, 30*time.Second, "the store to refuse writes", func() bool { return !writes(store) })
	mend()
	if writes(store) {
		t.Fatal("a write was stored after the cause was gone, without a reload: nats-server heals by itself now")
	}
	if !slices.ContainsFunc(storeProblems(s), func(p streamProblem) bool { return p.writeErr && p.id.stream == "KV_heal_leaders" }) {
		t.Fatalf("the server's health check no longer reports the stream's write error as such (%+v): the healer would not see it", storeProblems(s))
	}
}

// An idle stream's store keeps the error its sync met without anything
// showing it, until a write is lost to it: then the health check reports
// it. So the healer cannot wait to see every broken stream (it reloads
// every account after an overload).
func TestIdleStoreErrorShowsOnlyAfterALostWrite(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	// The store syncs every 100 ms: a second broken is ten syncs, and a
	// sync that came later still (a loaded machine) is tried again.
	for try := 1; ; try++ {
		mend := h.breakStore(t, ExecutorAccount, "heal_jobs")
		time.Sleep(time.Second)
		mend()
		if slices.ContainsFunc(storeProblems(h.s), func(p streamProblem) bool { return p.id.stream == "KV_heal_jobs" }) {
			t.Fatal("the health check reports the idle stream's error before any write: the healer could wait for it")
		}
		if !writes(h.jobs) {
			break
		}
		if try == 10 {
			t.Fatal("the store took writes after ten broken syncs")
		}
	}
	if !slices.ContainsFunc(storeProblems(h.s), func(p streamProblem) bool { return p.writeErr && p.id.stream == "KV_heal_jobs" }) {
		t.Fatalf("the health check does not report the error after a lost write: %+v", storeProblems(h.s))
	}
}

// After an overload (descriptors short, here made so), the healer
// reloads the accounts from disk once descriptors are free again, every
// account, also one whose broken store no write has shown yet: writes are
// stored again, the first to the idle bucket too, the records written
// before are still there, and each account keeps its JetStream limits.
// While descriptors are short it waits (a recovery that runs out of them
// leaves streams unloaded).
func TestHealerReloadsBrokenStores(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	limits := map[string]limitsByTier{}
	for _, name := range []string{ManagerAccount, ExecutorAccount} {
		acc, err := h.s.LookupAccount(name)
		if err != nil {
			t.Fatal(err)
		}
		limits[name] = accountLimits(acc.JetStreamUsage())
	}
	var logs logBuffer
	healer := newStoreHealer(h.s, slog.New(slog.NewTextHandler(&logs, nil)))
	healer.descriptors = func() (int, int) { return healMinFree - 1, 1024 }

	mendLeaders := h.breakStore(t, ManagerAccount, "heal_leaders")
	mendJobs := h.breakStore(t, ExecutorAccount, "heal_jobs")
	waitFor(t, 30*time.Second, "the leadership bucket to refuse writes", func() bool { return !writes(h.leaders) })
	time.Sleep(time.Second) // ten syncs of the idle bucket's store, broken
	mendLeaders()
	mendJobs()
	healer.check()
	if strings.Contains(logs.String(), "reloaded an account") || !strings.Contains(logs.String(), "reloaded once descriptors are free") {
		t.Fatalf("the healer with %d descriptors free:\n%s", healMinFree-1, logs.String())
	}
	if writes(h.leaders) {
		t.Fatal("the store took a write before the reload")
	}

	healer.descriptors = func() (int, int) { return healMinFree, 1024 }
	healer.check()
	if !writes(h.jobs) {
		t.Fatalf("the idle bucket lost its first write after the reload:\n%s", logs.String())
	}
	if !writes(h.leaders) {
		t.Fatalf("the leadership bucket refuses writes after the reload:\n%s", logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, store := range map[string]*LeaseStore{ManagerAccount: h.leaders, ExecutorAccount: h.jobs} {
		if v, _, err := store.Get(ctx, "k"); err != nil || string(v) != "before" {
			t.Fatalf("%s: the record written before the break: %q, %v", name, v, err)
		}
		acc, err := h.s.LookupAccount(name)
		if err != nil {
			t.Fatal(err)
		}
		if after := accountLimits(acc.JetStreamUsage()); !maps.EqualFunc(limits[name], after, func(a, b server.JetStreamAccountLimits) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("%s: the account's limits changed in the reload: %+v, were %+v", name, after, limits[name])
		}
		if !strings.Contains(logs.String(), "account="+name) {
			t.Fatalf("the healer did not reload %s:\n%s", name, logs.String())
		}
	}
	if next := healer.check(); next != healCheckEvery || !strings.Contains(logs.String(), "JetStream store healthy again") {
		t.Fatalf("the healer after the reload (next look in %v):\n%s", next, logs.String())
	}
}

// A stream the healer's reload could not load (descriptors ran out again
// in the middle, here a metadata file that cannot be read) is the
// healer's to retry: the next reload loads it, once it can.
func TestHealerRetriesAStreamItsReloadLost(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	var logs logBuffer
	healer := newStoreHealer(h.s, slog.New(slog.NewTextHandler(&logs, nil)))
	healer.descriptors = func() (int, int) { return healMinFree, 1024 }
	mend := h.breakStore(t, ManagerAccount, "heal_leaders")
	waitFor(t, 30*time.Second, "the store to refuse writes", func() bool { return !writes(h.leaders) })
	mend()
	meta := filepath.Join(h.dir, "store", "jetstream", ManagerAccount, "streams", "KV_heal_leaders", "meta.inf")
	if err := os.Rename(meta, meta+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	healer.check()
	if !strings.Contains(logs.String(), "a stream was not loaded by the reload") {
		t.Fatalf("the healer after a reload that could not load the stream:\n%s", logs.String())
	}
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(meta+".away", meta); err != nil {
		t.Fatal(err)
	}
	healer.check()
	if !writes(h.leaders) {
		t.Fatalf("the stream refuses writes after the second reload:\n%s", logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, _, err := h.leaders.Get(ctx, "k"); err != nil || string(v) != "before" {
		t.Fatalf("the record written before the break: %q, %v", v, err)
	}
}

// The healer as leasemgr runs it: it finds a broken store by itself and
// reloads it, and Shutdown stops it before the server.
func TestHealingServerHealsByItself(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	healing := HealStores(h.s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mend := h.breakStore(t, ManagerAccount, "heal_leaders")
	waitFor(t, 30*time.Second, "the store to refuse writes", func() bool { return !writes(h.leaders) })
	mend()
	mended := time.Now()
	waitFor(t, time.Minute, "writes to be stored again", func() bool { return writes(h.leaders) })
	t.Logf("writes stored again %v after the cause was gone", time.Since(mended).Round(time.Millisecond))
	healing.Shutdown()
	healing.WaitForShutdown()
}

// A stream directory the server could not load at its start (here one
// without its metadata) is reported by the health check too, but it is
// not the healer's: reloading cannot load it, and reloading every few
// seconds would restart the account's consumers for nothing.
func TestHealerLeavesAStreamItDidNotBreak(t *testing.T) {
	t.Parallel()
	h := startHealServer(t)
	junk := filepath.Join(h.s.JetStreamConfig().StoreDir, ManagerAccount, "streams", "junk")
	if err := os.Mkdir(junk, 0o700); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(storeProblems(h.s), func(p streamProblem) bool { return !p.writeErr && p.id.stream == "junk" }) {
		t.Fatalf("the health check does not report the unloadable stream: %+v", storeProblems(h.s))
	}
	var logs logBuffer
	healer := newStoreHealer(h.s, slog.New(slog.NewTextHandler(&logs, nil)))
	if next := healer.check(); next != healCheckEvery || logs.String() != "" {
		t.Fatalf("the healer acted on a stream it did not break (next look in %v):\n%s", next, logs.String())
	}
	if !writes(h.leaders) {
		t.Fatal("the store refuses writes")
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logBuffer collects a logger's lines, written from the healer's goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
