package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// refusedReplies reads lease_replies_refused_total for node from /metrics,
// or -1 if the series is not there.
func refusedReplies(t *testing.T, httpAddr, node string) int {
	t.Helper()
	return int(metricValue(t, httpAddr, "lease_replies_refused_total", "node", node))
}

// attackBodies are what the reply-subject attack sends to subj: garbage,
// and a request that would be granted or acted on.
func attackBodies(subj string) []string {
	if strings.HasSuffix(subj, ".resize") {
		return []string{"x", `{"set":{"gpu":5}}`}
	}
	return []string{"x", `{"request_id":"r1","holder":"mallory","slots":1}`}
}

// verbSubjects are the four lease verbs' subjects of node's pool.
func verbSubjects(node, pool string) []string {
	var out []string
	for _, verb := range []string{lease.VerbAcquire, lease.VerbRenew, lease.VerbRelease, lease.VerbCancel} {
		out = append(out, lease.Subject(lease.DefaultPrefix, node, pool, verb))
	}
	return out
}

// replyToLeadershipKey sends every attack body to every subject with the
// node's leadership key as the reply subject (issue 13's first attack):
// two requests per subject.
func replyToLeadershipKey(t *testing.T, nc *nats.Conn, node string, subjs []string) {
	t.Helper()
	key := "$KV." + jetstream.NamesFor(lease.DefaultPrefix).Leaders + "." + node
	for _, subj := range subjs {
		for _, b := range attackBodies(subj) {
			if err := nc.PublishRequest(subj, key, []byte(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Issue 13's first attack through the real binary: a request to the
// node's acquire subject whose reply subject is the node's leadership key.
// The manager used to write its error reply there and lose its leadership
// for good. Now it answers nothing, counts the refusal, keeps its key and
// keeps serving executors.
func TestReplyToLeadershipKeyRefused(t *testing.T) {
	t.Parallel()
	const node = "victim"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	if got := refusedReplies(t, httpAddr, node); got != 0 {
		t.Fatalf("lease_replies_refused_total before any refusal: %d, want the series at 0", got)
	}

	var url string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NATS_LISTEN="); ok {
			url = "nats://" + v
		}
	}
	// With the manager role's credentials (leasemgr made them for its
	// embedded server): every publish below passes the server, so only the
	// manager's own reply rule stands between them and the key.
	nc := mustConnectAs(t, envValue(env, "HOME"), url, config.RoleManager)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders, err := jetstream.OpenLeaseStore(ctx, nc, jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Leaders})
	if err != nil {
		t.Fatal(err)
	}
	before, rev, err := leaders.Get(ctx, node)
	if err != nil {
		t.Fatalf("the leadership key of a ready node: %v", err)
	}

	subjs := append(verbSubjects(node, "gpu"), lease.StatsSubject(lease.DefaultPrefix, node), lease.ResizeSubject(lease.DefaultPrefix, node), "$SRV.PING", "$SRV.INFO."+lease.ServiceName, "$SRV.STATS")
	replyToLeadershipKey(t, nc, node, subjs)
	sent := 2 * len(subjs)
	eventually(t, 30*time.Second, "the refusals to show in /metrics", func() bool { return refusedReplies(t, httpAddr, node) >= sent })
	if got := refusedReplies(t, httpAddr, node); got != sent {
		t.Fatalf("lease_replies_refused_total = %d, want %d", got, sent)
	}

	// Still the leader, still ready, still serving executors; the resize
	// aimed at the key changed nothing.
	// (Its revision moves with the leader's own renewals, every
	// LEADER_TTL/3, which write the same value.)
	after, rev2, err := leaders.Get(ctx, node)
	if err != nil || string(after) != string(before) {
		t.Fatalf("leadership key after the attack: revision %d (was %d), %q (was %q), %v", rev2, rev, after, before, err)
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d after the attack", resp.StatusCode)
	}
	if c := httpPools(t, httpAddr)["gpu"].Capacity; c != 1 {
		t.Fatalf("gpu capacity %d after a resize with a refused reply subject, want 1", c)
	}
	run := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	if code := run.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("executor run after the attack: exit %d\n%s", code, run.Output())
	}
	eventually(t, 15*time.Second, "the refusal in the log", func() bool {
		return strings.Contains(m.Output(), "reply subject is not an inbox")
	})
}

// NATS_REPLY_PREFIXES through the binaries: an executor whose inbox prefix
// is listed is served, one whose prefix is not hears nothing,
// and `leasemgr pools` run with the manager's own settings (its own
// NATS_INBOX_PREFIX) is answered without listing it.
func TestReplyPrefixesBinaries(t *testing.T) {
	t.Parallel()
	const node = "prefixed"
	// Executors' own inbox prefixes belong to a real nats-server's layout:
	// the embedded server's executor role may use only "_INBOX". So the
	// programs join a separate server (anonymous: permissions are not the
	// point here) with NATS_URL.
	srv := harness.StartServer(t)
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	env = append(env, "NATS_URL="+srv.URL)
	mgrEnv := append(append([]string(nil), env...), "NATS_INBOX_PREFIX=_INBOX_admin", "NATS_REPLY_PREFIXES=_INBOX_exec_a")
	startManager(t, mgrEnv, httpAddr)

	pools := start(t, mgrEnv, "leasemgr", "pools")
	if code := pools.Wait(t, 30*time.Second); code != 0 || !strings.Contains(pools.Output(), "gpu") {
		t.Fatalf("leasemgr pools with the manager's inbox prefix: exit %d\n%s", code, pools.Output())
	}
	listed := start(t, append(env, "NATS_INBOX_PREFIX=_INBOX_exec_a"), "executor", "run", "--pool", "gpu", "--", "true")
	if code := listed.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("executor with a listed inbox prefix: exit %d\n%s", code, listed.Output())
	}
	eventually(t, 15*time.Second, "the listed executor's slot to be free", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 0 })
	before := refusedReplies(t, httpAddr, node)
	// It hears nothing, so it keeps re-sending its acquire (the test's
	// cleanup stops it); each one is counted and dropped.
	start(t, append(env, "NATS_INBOX_PREFIX=_INBOX_exec_b"), "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 30*time.Second, "the unlisted executor's acquire to be refused", func() bool {
		return refusedReplies(t, httpAddr, node) > before
	})
	if in := httpPools(t, httpAddr)["gpu"].InUse; in != 0 {
		t.Fatalf("gpu in use %d after the refused executor: its acquire was acted on", in)
	}
}
