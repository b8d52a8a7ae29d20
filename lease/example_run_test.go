package lease_test

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// The examples are whole programs configured by the environment, as a
// user's would be: they run here against a real manager (pools default=4
// and gpu=1), as an executor, and print what they promise.
func TestExamplesRun(t *testing.T) {
	srv := harness.StartSecureServer(t)
	harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: "ex", TTL: 5 * time.Second,
		Pools:            []manager.PoolConfig{{Name: "default", Capacity: 4}, {Name: "gpu", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject})
	for k, v := range map[string]string{
		"NATS_URL": srv.URL, "NODE_ID": "ex", "NATS_NKEY": config.AuthFile(srv.AuthDir, config.RoleExecutor),
		"NATS_INBOX_PREFIX": config.RoleExecutor.InboxPrefix(), "NATS_CREDS": "", "NATS_USER": "", "NATS_PASSWORD": "",
		"LEASE_SUBJECT_PREFIX": "", "NATS_AUTH_DIR": t.TempDir(),
	} {
		t.Setenv(k, v)
	}
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "worked with 1 slot of pool default\n"},
		{"ExampleLease_Done", ExampleLease_Done, "work: <nil>\n"},
		{"ExampleClient_AcquireAll", ExampleClient_AcquireAll, "default 2\ngpu 1\n"},
		{"ExampleClient_Acquire_errors", ExampleClient_Acquire_errors,
			"tpu does not exist: fix the name\ngpu can never grant 5 slots\ngpu granted\n"},
	} {
		if got := stdoutOf(t, ex.run); got != ex.want {
			t.Errorf("%s printed %q, want %q", ex.name, got, ex.want)
		}
	}
}

// stdoutOf runs f and returns what it wrote on os.Stdout.
func stdoutOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, r)
		close(copied)
	}()
	func() {
		defer func() { os.Stdout = saved; w.Close() }()
		f()
	}()
	<-copied
	r.Close()
	return strings.ReplaceAll(out.String(), "\r", "")
}
