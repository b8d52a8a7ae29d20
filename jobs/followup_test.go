package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// channelJob is a job that publishes its command channel to dir/name.chan
// and runs until dir/name.stop exists.
func channelJob(dir, name string) jobs.Spec {
	s := spec("p", "sh", "-c", `printf '%s\n%s\n' "$SLOTLEASE_JOB_SOCKET" "$SLOTLEASE_JOB_TOKEN" > "$DIR/$NAME.tmp" && mv "$DIR/$NAME.tmp" "$DIR/$NAME.chan"
while [ ! -e "$DIR/$NAME.stop" ]; do sleep 0.05; done`)
	s.Env = map[string]string{"DIR": dir, "NAME": name}
	return s
}

// readChannel waits for a channelJob's socket and token.
func readChannel(t *testing.T, dir, name string) (socket, token string) {
	t.Helper()
	var lines []string
	harness.Eventually(t, 20*time.Second, name+"'s command channel", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, name+".chan"))
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return err == nil && len(lines) == 2
	})
	return lines[0], lines[1]
}

// raw sends bytes on the channel the way a hostile worker could, and
// returns the answer.
func raw(t *testing.T, socket string, body []byte) jobs.FollowUpReply {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	go func() { _, _ = conn.Write(body) }() // the executor may stop reading early
	var reply jobs.FollowUpReply
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		t.Fatalf("no answer to %.60q...: %v", body, err)
	}
	return reply
}

func followUp(t *testing.T, socket, token, specJSON string) jobs.FollowUpReply {
	t.Helper()
	reply, err := jobs.SubmitFollowUp(context.Background(), socket, token, []byte(specJSON))
	if err != nil {
		t.Fatal(err)
	}
	return *reply
}

// A running job submits follow-up jobs through its command channel: the
// executor records parent, depth, batch and tenant (and caps the priority
// at the parent's); it refuses garbage, huge input, a wrong token, fields
// the job may not set, requests beyond the job's limits and beyond the
// depth limit, each with a clear answer; the channel dies with the job.
func TestFollowUpChannel(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{MaxDepth: 2, MaxChildren: 3})
	dir := t.TempDir()

	parentSpec := channelJob(dir, "parent")
	parentSpec.Batch, parentSpec.Tenant, parentSpec.Priority, parentSpec.Key = "b1", "team-a", jobs.Low, "cust-7"
	parent := submit(t, q, parentSpec)
	socket, token := readChannel(t, dir, "parent")

	refused := []struct {
		name, body, says string
		invalid          bool
	}{
		{"garbage", "GET / HTTP/1.0\r\n\r\n", "not a follow-up request", true},
		{"huge", `{"token":"` + strings.Repeat("a", 2*jobs.MaxFollowUpBytes) + `"}`, "not a follow-up request", true},
		{"unknown verb", `{"token":"` + token + `","cancel":"` + parent + `"}`, `unknown field "cancel"`, true},
		{"wrong token", `{"token":"x","spec":{"command":["true"]}}`, "wrong token", false},
	}
	for _, tc := range refused {
		r := raw(t, socket, []byte(tc.body))
		if !strings.Contains(r.Error, tc.says) || r.Invalid != tc.invalid || r.ID != "" {
			t.Fatalf("%s: answer %+v, want an error saying %q", tc.name, r, tc.says)
		}
	}

	// Authenticated requests: three allowed (MaxChildren), whatever comes of them.
	r := followUp(t, socket, token, `{"pool":"p","priority":"high","command":["true"]}`)
	if r.Error != "" || r.Parent != parent || r.Depth != 1 {
		t.Fatalf("follow-up: %+v", r)
	}
	child := waitState(t, q, r.ID, jobs.StateSucceeded, 20*time.Second)
	if s := child.Spec; s.Parent != parent || s.Depth != 1 || s.Batch != "b1" || s.Tenant != "team-a" || s.Priority != jobs.Low || s.Key != "cust-7" {
		t.Fatalf("child spec %+v: want parent %s, depth 1, batch b1, tenant team-a, priority low, key cust-7 (the parent's)", s, parent)
	}
	for _, tc := range []struct{ spec, says string }{
		{`{"command":["true"],"parent":"x","depth":5}`, "parent and depth are set by the executor"},
		{`{"command":["true"],"batch":"other"}`, `batch "other": a follow-up job is in its parent's batch ("b1")`},
	} {
		if r := followUp(t, socket, token, tc.spec); !r.Invalid || !strings.Contains(r.Error, tc.says) {
			t.Fatalf("spec %s: answer %+v, want refused saying %q", tc.spec, r, tc.says)
		}
	}
	if r := followUp(t, socket, token, `{"command":["true"]}`); r.Invalid || !strings.Contains(r.Error, "has made 3 follow-up requests") {
		t.Fatalf("fourth request: %+v, want the limit of 3", r)
	}

	// A job at the depth limit may submit nothing.
	deep := channelJob(dir, "deep")
	deep.Parent, deep.Depth = parent, 2
	deepID := submit(t, q, deep)
	dsock, dtok := readChannel(t, dir, "deep")
	if r := followUp(t, dsock, dtok, `{"command":["true"]}`); !strings.Contains(r.Error, "depth limit: job "+deepID+" is at depth 2, its follow-ups would be at 3, more than the executor's --max-depth 2") {
		t.Fatalf("follow-up at the depth limit: %+v", r)
	}
	// The token of one job does not open another's channel.
	if r := followUp(t, dsock, token, `{"command":["true"]}`); !strings.Contains(r.Error, "wrong token") {
		t.Fatalf("another job's token: %+v", r)
	}

	// The channel dies with the job.
	for _, name := range []string{"parent", "deep"} {
		if err := os.WriteFile(filepath.Join(dir, name+".stop"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, q, parent, jobs.StateSucceeded, 20*time.Second)
	waitState(t, q, deepID, jobs.StateSucceeded, 20*time.Second)
	if _, err := jobs.SubmitFollowUp(context.Background(), socket, token, []byte(`{"command":["true"]}`)); !errors.Is(err, jobs.ErrNoChannel) {
		t.Fatalf("submit after the job ended: %v, want ErrNoChannel", err)
	}
	if _, err := os.Stat(filepath.Dir(socket)); !os.IsNotExist(err) {
		t.Fatalf("the channel's directory outlived the job: %v", err)
	}
}

// A follow-up job is never looser than its parent: a parent without a
// network, in its own namespaces, with memory, process, file, time and CPU
// limits and one attempt submits children asking for none of that, or for
// more; each child's stored spec (what its record shows and what it runs
// with) has the parent's flags and at most its limits and attempts, and a
// child asking for less keeps its own.
func TestFollowUpInheritsLimits(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	dir := t.TempDir()

	parentSpec := channelJob(dir, "parent")
	parentSpec.NoNetwork, parentSpec.Isolate = true, true
	parentSpec.MemoryBytes, parentSpec.MaxProcs, parentSpec.MaxOpenFiles = 256<<20, 64, 128
	parentSpec.Timeout, parentSpec.CPU = jobs.Duration(2*time.Minute), jobs.Duration(time.Minute)
	parentSpec.MaxAttempts = 1
	parent := submit(t, q, parentSpec)
	socket, token := readChannel(t, dir, "parent")
	defer os.WriteFile(filepath.Join(dir, "parent.stop"), nil, 0o600)

	for _, tc := range []struct {
		name, spec string
		want       func(s jobs.Spec) bool
		limited    int
	}{
		{"asks for nothing", `{"pool":"p","command":["true"]}`, func(s jobs.Spec) bool {
			return s.NoNetwork && s.Isolate && s.MemoryBytes == 256<<20 && s.MaxProcs == 64 && s.MaxOpenFiles == 128 &&
				s.Timeout == jobs.Duration(2*time.Minute) && s.CPU == jobs.Duration(time.Minute) && s.MaxAttempts == 1
		}, 8},
		{"asks for more", `{"pool":"p","command":["true"],"memory_bytes":1073741824,"max_procs":1000,"max_open_files":4096,"timeout":"1h","cpu":"1h","max_attempts":100}`, func(s jobs.Spec) bool {
			return s.MemoryBytes == 256<<20 && s.MaxProcs == 64 && s.MaxOpenFiles == 128 &&
				s.Timeout == jobs.Duration(2*time.Minute) && s.CPU == jobs.Duration(time.Minute) && s.MaxAttempts == 1
		}, 8},
		{"asks for less", `{"pool":"p","command":["true"],"no_network":true,"isolate":true,"memory_bytes":1048576,"max_procs":4,"max_open_files":16,"timeout":"5s","cpu":"1s","max_attempts":1}`, func(s jobs.Spec) bool {
			return s.MemoryBytes == 1<<20 && s.MaxProcs == 4 && s.MaxOpenFiles == 16 &&
				s.Timeout == jobs.Duration(5*time.Second) && s.CPU == jobs.Duration(time.Second) && s.MaxAttempts == 1
		}, 0},
	} {
		r := followUp(t, socket, token, tc.spec)
		if r.Error != "" || r.Parent != parent {
			t.Fatalf("%s: %+v", tc.name, r)
		}
		if len(r.Limited) != tc.limited {
			t.Errorf("%s: the answer says %d things were tightened, want %d: %q", tc.name, len(r.Limited), tc.limited, r.Limited)
		}
		rec := get(t, q, r.ID)
		if !tc.want(rec.Spec) {
			t.Errorf("%s: the child's record has spec %+v, want the parent's flags and at most its limits", tc.name, rec.Spec)
		}
	}
}
