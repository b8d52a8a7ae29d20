package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/raceexit"
)

// The limits per account (issue 38, docs/security.md "Limits per
// account"): an executor credential fills what it may write of the store,
// or opens connections, until the server refuses it, and the managers do
// not notice. These run the real leasemgr with its embedded server; the
// same attacks on docs/security.md's layout are in
// security_limits_test.go.

// queueTargets are the streams of the job queue an executor may write, and
// how: the two buckets by key, the job stream by its submit subjects.
func queueTargets() []string {
	n := jobs.NamesFor(lease.DefaultPrefix)
	return []string{"KV_" + n.Results, "KV_" + n.Dead, n.Stream}
}

// fillQueue is issue 38's attack from nc: values of about 500 kB under
// distinct keys into each bucket of the job queue (200 kB messages into
// the job stream, whose messages are smaller), until the server refuses
// one. It returns each stream's refusal; a stream the credential may not
// write at all (its first write fails on a timeout or a permission) is
// left out.
func fillQueue(t *testing.T, nc *nats.Conn) map[string]error {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := jobs.NamesFor(lease.DefaultPrefix)
	put := func(stream string, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		switch stream {
		case n.Stream:
			_, err := js.Publish(ctx, n.Subject("gpu", jobs.Normal, ""), junk(i, 200_000))
			return err
		default:
			_, err := js.Publish(ctx, "$KV."+strings.TrimPrefix(stream, "KV_")+".junk"+strconv.Itoa(i), junk(i, 500_000))
			return err
		}
	}
	refused := map[string]error{}
	for _, stream := range queueTargets() {
		for i := 0; ; i++ {
			err := put(stream, i)
			if err == nil {
				continue
			}
			if i == 0 && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)) {
				t.Logf("%s: not writable with this credential (%v)", stream, err)
				break
			}
			t.Logf("%s: %d writes, then: %v", stream, i, err)
			refused[stream] = err
			break
		}
	}
	if refused["KV_"+n.Results] == nil {
		t.Fatalf("the results bucket, issue 38's target, was never refused: %v", refused)
	}
	return refused
}

// junk is n bytes of i (the streams do not compress).
func junk(i, n int) []byte { return bytes.Repeat([]byte{byte(i)}, n) }

// queueBytes is what the job queue's streams hold, by stream, read with
// nc's rights (executors may read every stream's info).
func queueBytes(t *testing.T, nc *nats.Conn) map[string]uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[string]uint64{}
	for _, name := range queueTargets() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().State.Bytes
	}
	return out
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// heldRun is an executor run on pool that holds its slot until release
// is called, and then must end with exit 0: the slot was held throughout.
type heldRun struct {
	p    *proc
	stop string
}

func startHeldRun(t *testing.T, env []string, pool string) *heldRun {
	t.Helper()
	dir := sharedDir(t)
	h := &heldRun{stop: filepath.Join(dir, "stop")}
	h.p = start(t, env, "executor", "run", "--pool", pool, "--writable", dir, "--env", "STOP="+h.stop,
		"--", "sh", "-c", `while [ ! -e "$STOP" ]; do sleep 0.1; done`)
	return h
}

func (h *heldRun) release(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(h.stop, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if code := h.p.Wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the executor run that held its slot through the attack: exit %d\n%s", code, h.p.Output())
	}
}

// renewedAfter waits until the node's lease on pool was stored again
// after t0: its holder renewed it, and the manager wrote the renewal to
// its store, after the attack.
func renewedAfter(t *testing.T, httpAddr, pool string, t0 time.Time) {
	t.Helper()
	eventually(t, 60*time.Second, "the held lease to be renewed after the attack", func() bool {
		for _, r := range httpLeases(t, httpAddr) {
			if r.Pool == pool && r.ExpiresAt.After(t0.Add(r.TTL())) {
				return true
			}
		}
		return false
	})
}

// An executor fills its account's store (NATS_EXECUTORS_MAX_STORE, 64 MiB
// here) through every stream it may write: each refuses it at its cap,
// with the server's error, and all of them together stay within the cap.
// The managers' account is not touched: the lease held before keeps being
// renewed and runs to its end, a new executor run is granted, and
// leasemgr restarted takes its node's leadership again and serves, the
// junk still there. (Issue 38: with no cap, 10.5 GB of junk filled the
// server's store, and the manager could not renew its leadership, not
// even after a restart.)
func TestExecutorStorageIsBounded(t *testing.T) {
	t.Parallel()
	const store = 64 << 20
	env, httpAddr := managerEnv(t, "fill", "gpu=1", "15s")
	env = append(env, config.EnvNATSExecutorsMaxStore+"=64MiB")
	m := startManager(t, env, httpAddr)
	if !strings.Contains(m.Output(), "executors_store="+strconv.Itoa(store)) {
		t.Fatalf("leasemgr does not log the executors' store cap:\n%s", m.Output())
	}
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)

	held := startHeldRun(t, env, "gpu")
	eventually(t, 30*time.Second, "the first executor run to hold gpu", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })

	attacker := mustConnectAs(t, home, url, config.RoleExecutor)
	refused := fillQueue(t, attacker)
	for stream, err := range refused {
		if !strings.Contains(err.Error(), "maximum bytes exceeded") && !strings.Contains(err.Error(), "maximum messages exceeded") {
			t.Errorf("%s refused with %v, want the server's cap error", stream, err)
		}
	}
	filled := queueBytes(t, attacker)
	t.Logf("the job queue holds %v bytes, %d in all, of the executors' %d", filled, sum(filled), store)
	if sum(filled) > store {
		t.Fatalf("the executors' streams hold %d bytes, over their account's cap of %d", sum(filled), store)
	}
	attacked := time.Now()

	renewedAfter(t, httpAddr, "gpu", attacked)
	held.release(t)
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor run after the attack: exit %d\n%s", code, out)
	}

	stopManager(t, m)
	startManager(t, env, httpAddr) // ready: it holds the node's leadership again
	// Its server stopped with it, and the attacker's connection too.
	if after := queueBytes(t, mustConnectAs(t, home, url, config.RoleExecutor)); sum(after) != sum(filled) {
		t.Fatalf("the junk changed across the restart: %v, was %v", after, filled)
	}
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor run after the restart: exit %d\n%s", code, out)
	}
}

// descriptorLimit is the soft RLIMIT_NOFILE leasemgr runs with in
// TestExecutorConnectionsAreBounded: low, so that the limits it derives
// from it are small enough to reach.
const descriptorLimit = 1536

// An executor credential opens connections until its account's cap,
// which leasemgr derived from its descriptor limit (set low here, so the
// cap is a few hundred), refuses more with the server's error. Meanwhile
// leasemgr keeps descriptors to spare, the reader's leasemgr pools, a
// lease on an executor connection opened before and the HTTP API work;
// once the flood ends a new executor connects and is granted. (Issue 38:
// 20,000 executor connections took every descriptor of leasemgr, which
// hosts the embedded server; executors could not connect and the HTTP
// API stopped answering.)
func TestExecutorConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "conns", "gpu=1", "15s")
	m := launch(t, managerCommand(t, env, descriptorLimit))
	eventually(t, 20*time.Second, "leasemgr to be ready", func() bool { return ready(httpAddr) })
	limit := loggedLimit(t, m, "executors_connections")
	url := "nats://" + envValue(env, "NATS_LISTEN")
	home := testHome(t)

	holderNC := mustConnectAs(t, home, url, config.RoleExecutor)
	holder, err := lease.NewClient(holderNC, "conns")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	// The executors' account holds leasemgr's own job queue connection
	// and the holder's: the flood gets the rest of the cap.
	var flood []*nats.Conn
	defer func() {
		for _, nc := range flood {
			nc.Close()
		}
	}()
	var refusal error
	for len(flood) <= limit {
		nc, err := connectAs(t, home, url, config.RoleExecutor)
		if err != nil {
			refusal = err
			break
		}
		flood = append(flood, nc)
	}
	t.Logf("executors' cap %d: %d more connections, then: %v; leasemgr holds %d descriptors of %d", limit, len(flood), refusal, procFDs(t, m.cmd.Process.Pid), descriptorLimit)
	if refusal == nil || !strings.Contains(refusal.Error(), "maximum account active connections exceeded") {
		t.Fatalf("connection %d of the executors' account: %v, want the server's refusal", len(flood)+2, refusal)
	}
	if len(flood) > limit-2 {
		t.Fatalf("%d connections admitted beside leasemgr's and the holder's, over the cap of %d", len(flood), limit)
	}
	if _, err := connectAs(t, home, url, config.RoleExecutor); err == nil {
		t.Fatal("an executor connection was admitted during the flood")
	}

	// The rest of the node works.
	if code, out := runLeasemgr(t, env, "pools"); code != 0 || !regexp.MustCompile(`conns\s+gpu\s+1\s`).MatchString(out) {
		t.Fatalf("leasemgr pools (the reader) during the flood: exit %d\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatalf("acquire on an executor connection opened before the flood: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if np := httpNodePools(t, httpAddr); np.Node != "conns" {
		t.Fatalf("/v1/pools during the flood: %+v", np)
	}
	if fds := procFDs(t, m.cmd.Process.Pid); fds >= descriptorLimit-256 {
		t.Fatalf("leasemgr holds %d descriptors of %d during the flood", fds, descriptorLimit)
	}

	for _, nc := range flood {
		nc.Close()
	}
	flood = nil
	eventually(t, 30*time.Second, "an executor to connect after the flood", func() bool {
		nc, err := connectAs(t, home, url, config.RoleExecutor)
		if err != nil {
			return false
		}
		nc.Close()
		return true
	})
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor run after the flood: exit %d\n%s", code, out)
	}
}

// managerCommand is leasemgr with env, its descriptor limit set to
// descriptors (soft and hard: it cannot raise it).
func managerCommand(t *testing.T, env []string, descriptors int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", `ulimit -n "$1" && exec "$0"`, filepath.Join(binDir, "leasemgr"), strconv.Itoa(descriptors))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), raceexit.Env()}, env...)
	return cmd
}

// loggedLimit is the value leasemgr's start logged for key (its
// "embedded NATS server limits" line).
func loggedLimit(t *testing.T, m *proc, key string) int {
	t.Helper()
	match := regexp.MustCompile(`embedded NATS server limits.* ` + key + `=(\d+)`).FindStringSubmatch(m.Output())
	if match == nil {
		t.Fatalf("leasemgr did not log %s:\n%s", key, m.Output())
	}
	n, _ := strconv.Atoi(match[1])
	return n
}
