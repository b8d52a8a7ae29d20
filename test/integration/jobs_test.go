package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/raceexit"
)

// runExecutor runs one executor command to its end.
func runExecutor(t *testing.T, env []string, args ...string) (code int, out string) {
	t.Helper()
	p := start(t, env, "executor", args...)
	code = p.Wait(t, 30*time.Second)
	return code, p.Output()
}

// natsURL returns the client URL of the embedded server a manager's env
// starts (NATS_LISTEN), or the NATS_URL it joins.
func natsURL(env []string) string {
	url := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NATS_URL="); ok {
			return v
		}
		if v, ok := strings.CutPrefix(kv, "NATS_LISTEN="); ok {
			url = "nats://" + v
		}
	}
	return url
}

// jobQueue binds the job queue from the test, to watch records cheaply.
func jobQueue(t *testing.T, env []string) *jobs.Queue {
	t.Helper()
	nc, err := connectAs(t, envValue(env, "HOME"), natsURL(env), config.RoleExecutor)
	if dir := envValue(env, "NATS_AUTH_DIR"); dir != "" {
		nc, err = natsconn.Connect(natsURL(env), natsconn.Auth{NKeySeed: config.AuthFile(dir, config.RoleExecutor), InboxPrefix: config.RoleExecutor.InboxPrefix()},
			t.Name(), nats.MaxReconnects(0))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var q *jobs.Queue
	eventually(t, 10*time.Second, "the job queue to exist", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		q, err = jobs.Bind(ctx, nc, "lease")
		return err == nil
	})
	return q
}

func record(q *jobs.Queue, id string) *jobs.Record {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rec, err := q.Get(ctx, id)
	if err != nil {
		return &jobs.Record{}
	}
	return rec
}

// The user's path: bad input is refused with a clear message, a submitted
// job runs under serve and shows in status and jobs, and serve stops
// cleanly on SIGTERM.
func TestJobsCLI(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "cli", "p=2", "15s")
	startManager(t, env, httpAddr)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Before any job exists, and after, an unknown id is an error that says so.
	if code, out := runExecutor(t, env, "status", "nope"); code != 1 || !strings.Contains(out, `job "nope" not found`) {
		t.Fatalf("status of an unknown id before any job: exit %d\n%s", code, out)
	}

	bad := []struct {
		name string
		args []string
		says string
	}{
		{"unknown priority", []string{"submit", "--pool", "p", "--priority", "urgent", "--", "true"}, `--priority "urgent": must be high, normal or low`},
		{"zero slots", []string{"submit", "--pool", "p", "--slots", "0", "--", "true"}, "--slots 0: must be a positive integer"},
		{"no command", []string{"submit", "--pool", "p"}, "no command"},
		{"bad pool", []string{"submit", "--pool", "a.b", "--", "true"}, `pool "a.b"`},
		{"malformed spec", []string{"submit", "--spec", write("bad.json", `{"pool":"p","slots":"two","command":["true"]}`)}, `field "slots": want an integer, got string`},
		{"spec syntax", []string{"submit", "--spec", write("syntax.json", "{\n  \"pool\": \"p\",\n  \"command\": [\"true\",]\n}")}, "malformed JSON on line 3"},
		{"spec empty command", []string{"submit", "--spec", write("empty.json", `{"pool":"p","command":[]}`)}, "command: must not be empty"},
		{"spec and flags", []string{"submit", "--spec", write("ok.json", `{"command":["true"]}`), "--pool", "p"}, "not both"},
		{"missing spec file", []string{"submit", "--spec", filepath.Join(dir, "none.json")}, "no such file"},
		{"status without id", []string{"status"}, "usage: executor status"},
		{"jobs bad state", []string{"jobs", "--state", "done"}, `--state "done"`},
		{"serve unknown pool", []string{"serve", "--pools", "nope"}, `node cli has no pool "nope"`},
	}
	t.Run("bad input", func(t *testing.T) {
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if code, out := runExecutor(t, env, tc.args...); code != 2 || !strings.Contains(out, tc.says) {
					t.Fatalf("exit %d, want 2 saying %q:\n%s", code, tc.says, out)
				}
			})
		}
	})

	// A spec on stdin.
	cmd := exec.Command(filepath.Join(binDir, "executor"), "submit", "--spec", "-")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), raceexit.Env()}, env...)
	cmd.Stdin = strings.NewReader(`{"pool":"p","priority":"low","max_attempts":1,"command":["sh","-c","echo no >&2; exit 4"]}`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("submit --spec -: %v\n%s", err, out)
	}
	deadID := strings.TrimSpace(string(out))

	code, out2 := runExecutor(t, env, "submit", "--pool", "p", "--priority", "high", "--env", "GREETING=hello", "--",
		"sh", "-c", `echo "$GREETING from $LEASE_NODE"`)
	id := strings.TrimSpace(out2)
	if code != 0 || !regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString(id) {
		t.Fatalf("submit: exit %d, output %q, want a job id", code, out2)
	}
	q := jobQueue(t, env)
	if st := record(q, id).State; st != jobs.StateQueued {
		t.Fatalf("submitted job is %q, want queued", st)
	}

	serve := start(t, env, "executor", "serve", "--pools", "p")
	eventually(t, 20*time.Second, "both jobs to end", func() bool {
		return record(q, id).State == jobs.StateSucceeded && record(q, deadID).State == jobs.StateDead
	})

	code, out2 = runExecutor(t, env, "status", id)
	for _, want := range []string{"state      succeeded", "hello from cli", "exit code  0", "attempts   1 of 3", "node       cli"} {
		if code != 0 || !strings.Contains(out2, want) {
			t.Fatalf("status: exit %d, missing %q:\n%s", code, want, out2)
		}
	}
	code, out2 = runExecutor(t, env, "status", "--json", deadID)
	var rec jobs.Record
	if err := json.Unmarshal([]byte(out2), &rec); code != 0 || err != nil || rec.State != jobs.StateDead || rec.Error != "exit code 4: no" || rec.Attempts != 1 {
		t.Fatalf("status --json of the dead job: exit %d, %v:\n%s", code, err, out2)
	}
	if code, out := runExecutor(t, env, "status", "nope"); code != 1 || !strings.Contains(out, `job "nope" not found`) {
		t.Fatalf("status of an unknown id: exit %d\n%s", code, out)
	}

	code, out2 = runExecutor(t, env, "jobs")
	if code != 0 || !regexp.MustCompile(`(?m)^p\s+high\s+0\s+0\s+0$`).MatchString(out2) ||
		!regexp.MustCompile(`(?m)^`+id+`\s+succeeded\s+p\s+high\s+1/3\s+cli\s+0\s`).MatchString(out2) ||
		!regexp.MustCompile(`(?m)^`+deadID+`\s+dead\s+p\s+low\s+1/1`).MatchString(out2) {
		t.Fatalf("jobs: exit %d\n%s", code, out2)
	}
	code, out2 = runExecutor(t, env, "jobs", "--json", "--state", "dead")
	var listing struct {
		Queues []jobs.Depth  `json:"queues"`
		Jobs   []jobs.Record `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out2), &listing); code != 0 || err != nil || len(listing.Jobs) != 1 || listing.Jobs[0].ID != deadID || len(listing.Queues) != 3 {
		t.Fatalf("jobs --json --state dead: exit %d, %v\n%s", code, err, out2)
	}

	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := serve.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM, want 0", code)
	}
}

// SIGKILL an executor serve mid-job: the job runs again on another node
// once its claim lapses, and the killed node's slots come back within the
// lease TTL plus 2s.
func TestServeKilledMidJob(t *testing.T) {
	t.Parallel()
	envA, httpA := managerEnv(t, "a", "p=1", "2s")
	envA = append(envA, "LEADER_TTL=1s") // LEASE_TTL must be longer (config refuses it otherwise)
	startManager(t, envA, httpA)
	envB, httpB := managerEnv(t, "b", "p=1", "2s")
	envB = append(envB, "LEADER_TTL=1s", "NATS_URL="+natsURL(envA))
	startManager(t, envB, httpB)

	dir := sharedDir(t)
	serveArgs := []string{"serve", "--pools", "p", "--ack-wait", "2s", "--poll", "100ms", "--kill-grace", "200ms"}
	serveA := start(t, envA, "executor", serveArgs...)
	// umask 0: the attempt on b, with ids of its own, appends to the file
	// the attempt on a made.
	code, out := runExecutor(t, envA, "submit", "--pool", "p", "--writable", dir, "--env", "OUT="+dir, "--",
		"sh", "-c", `umask 0; echo "$LEASE_NODE $JOB_ATTEMPT" >> "$OUT/runs"; sleep 3`)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	q := jobQueue(t, envA)
	// Running, and its command has written its line: a kill before the
	// shell got that far (a busy machine) would leave nothing to compare.
	eventually(t, time.Minute, "the job to run on node a", func() bool {
		r := record(q, id)
		runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
		return r.State == jobs.StateRunning && r.Node == "a" && httpPools(t, httpA)["p"].InUse == 1 && string(runs) == "a 1\n"
	})
	// Node b serves the same pool from now on; the job is a's until its
	// claim lapses.
	start(t, envB, "executor", serveArgs...)

	if err := serveA.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	serveA.Wait(t, 5*time.Second)
	eventually(t, 2*time.Second+2*time.Second, "node a's slot to come back", func() bool {
		return httpPools(t, httpA)["p"].InUse == 0
	})
	t.Logf("node a's slot came back %v after the kill", time.Since(killed).Round(10*time.Millisecond))

	eventually(t, 20*time.Second, "the job to succeed on node b", func() bool {
		r := record(q, id)
		return r.State == jobs.StateSucceeded && r.Node == "b"
	})
	rec := record(q, id)
	if rec.Attempts != 2 {
		t.Fatalf("attempts %d, want 2 (the lost one on a, then b)", rec.Attempts)
	}
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil || string(runs) != "a 1\nb 2\n" {
		t.Fatalf("runs of the job: %q, %v; want a then b", runs, err)
	}
}

// `executor submit --idempotency-key` run twice prints the same job id and
// says the second time that the job exists; another command under the same
// key is refused with a usage error.
func TestSubmitIdempotencyKey(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "idem", "p=1", "15s")
	startManager(t, env, httpAddr)
	submit := func(cmd ...string) (int, string) {
		return runExecutor(t, env, append([]string{"submit", "--pool", "p", "--tenant", "team-a", "--idempotency-key", "release 1.4 / linux-arm64", "--"}, cmd...)...)
	}
	code, first := submit("echo", "hi")
	if code != 0 || !strings.HasPrefix(first, jobs.TenantScope("team-a")+"k-") {
		t.Fatalf("first submit: exit %d\n%s\nwant an id in tenant team-a's scope", code, first)
	}
	code, again := submit("echo", "hi")
	if code != 0 || !strings.HasPrefix(again, strings.TrimSpace(first)) || !strings.Contains(again, "exists (queued)") {
		t.Fatalf("second submit: exit %d\n%s\nwant the id %s and that it exists", code, again, first)
	}
	if code, out := submit("echo", "bye"); code != 2 || !strings.Contains(out, "another spec") {
		t.Fatalf("another command under the same key: exit %d\n%s", code, out)
	}
}
