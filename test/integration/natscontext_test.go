package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/test/asuser"
)

// `leasemgr nats-context` makes the nats CLI ready in one command, for an
// ordinary user in the CLI's own default place: each role's context
// connects with the role's key and inbox prefix, and so has exactly the
// role's rights (issue 31: `nats micro ls` worked only with manager.nk,
// and the docs named no inbox prefix).
func TestNATSContextPerRole(t *testing.T) {
	t.Parallel()
	natsDir := natsCLI(t)
	u := asuser.New(t, asuser.Plain, 42205, 0)
	nats := u.Executable(t, filepath.Join(natsDir, "nats"))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := []string{
		"NODE_ID=ctx", "POOL_CAPACITIES=gpu=1",
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", freePort(t)), "HTTP_ADDR=" + httpAddr,
	}
	startManagerAs(t, u, env, httpAddr)
	run := func(extra []string, name string, args ...string) (string, int) {
		t.Helper()
		p := startAs(t, u, append(append([]string{}, env...), extra...), name, args...)
		code := p.Wait(t, 30*time.Second)
		return p.Output(), code
	}
	runNATS := func(args ...string) (string, int) {
		t.Helper()
		p := launch(t, u.Command(nil, nats, args...))
		code := p.Wait(t, 30*time.Second)
		return p.Output(), code
	}

	out, code := run(nil, "leasemgr", "nats-context")
	if code != 0 {
		t.Fatalf("leasemgr nats-context: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "nats --context slotlease-reader micro ls leasemgr") {
		t.Errorf("leasemgr nats-context suggests no reader's command:\n%s", out)
	}
	// Where the nats CLI looks by default: the user's ~/.config (it
	// reads the home directory from the user database, not $HOME).
	ctxDir := filepath.Join(u.Home, ".config", "nats", "context")
	authDir := filepath.Join(u.Home, ".config", "slotlease", "embedded-"+strings.ReplaceAll(envValue(env, "NATS_LISTEN"), ":", "-"))
	for _, r := range config.Roles {
		path := filepath.Join(ctxDir, "slotlease-"+string(r)+".json")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("role %s: %v\n%s", r, err, out)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || int(st.Uid) != u.UID {
			t.Errorf("%s: mode %v, owner %d; want 0600, %d", path, fi.Mode().Perm(), st.Uid, u.UID)
		}
		var c struct {
			URL, NKey   string
			InboxPrefix string `json:"inbox_prefix"`
		}
		b, _ := os.ReadFile(path)
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if c.NKey != config.AuthFile(authDir, r) || c.InboxPrefix != r.InboxPrefix() || c.URL != "nats://"+envValue(env, "NATS_LISTEN") {
			t.Errorf("%s: %s; want nkey %s, inbox prefix %s", path, b, config.AuthFile(authDir, r), r.InboxPrefix())
		}
	}

	// Each context has its role's rights, and no more.
	if out, code := runNATS("--context", "slotlease-reader", "micro", "ls", "leasemgr"); code != 0 || !strings.Contains(out, "slot-lease manager for node ctx") {
		t.Errorf("nats micro ls leasemgr as the reader: exit %d\n%s", code, out)
	}
	if out, code := runNATS("--context", "slotlease-executor", "micro", "info", "leasemgr"); code != 0 || !strings.Contains(out, "lease.ctx.stats") {
		t.Errorf("nats micro info leasemgr as an executor: exit %d\n%s", code, out)
	}
	if out, code := runNATS("--context", "slotlease-reader", "req", "-r", "lease.ctx.stats", "{}"); code != 0 || !strings.Contains(out, `"capacity":1`) {
		t.Errorf("nats req lease.ctx.stats as the reader: exit %d\n%s", code, out)
	}
	if out, code := runNATS("--context", "slotlease-manager", "kv", "ls", "--names"); code != 0 || !strings.Contains(out, "lease_leases") {
		t.Errorf("nats kv ls as the manager: exit %d\n%s", code, out)
	}
	for _, role := range []string{"reader", "executor"} {
		if out, code := runNATS("--context", "slotlease-"+role, "kv", "ls", "--names"); code == 0 && strings.Contains(out, "lease_leases") {
			t.Errorf("nats kv ls as the %s lists the managers' buckets:\n%s", role, out)
		}
	}

	// Someone else's context of that name is never overwritten.
	foreign := filepath.Join(ctxDir, "mine-reader.json")
	if err := os.WriteFile(foreign, []byte(`{"description":"my own","url":"nats://example:4222"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	if out, code := run(nil, "leasemgr", "nats-context", "--name", "mine"); code == 0 || !strings.Contains(out, "is not a context leasemgr nats-context wrote") {
		t.Errorf("nats-context over a foreign context: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(foreign); !strings.Contains(string(b), "my own") {
		t.Errorf("the foreign context was changed: %s", b)
	}
	if fileExists(filepath.Join(ctxDir, "mine-manager.json")) {
		t.Error("refused for one role, nats-context still wrote another's context: all or none")
	}

	// One role, another name.
	if out, code := run(nil, "leasemgr", "nats-context", "--role", "reader", "--name", "ro"); code != 0 {
		t.Fatalf("nats-context --role reader: exit %d\n%s", code, out)
	}
	for name, want := range map[string]bool{"ro-reader": true, "ro-manager": false, "ro-executor": false} {
		if got := fileExists(filepath.Join(ctxDir, name+".json")); got != want {
			t.Errorf("--role reader --name ro: %s.json exists %v, want %v", name, got, want)
		}
	}
	if out, code := run(nil, "leasemgr", "nats-context", "--role", "admin"); code != 2 || !strings.Contains(out, `unknown role "admin"`) {
		t.Errorf("--role admin: exit %d\n%s", code, out)
	}

	// Credentials the environment names: one context with them.
	explicit := []string{"NATS_NKEY=" + config.AuthFile(authDir, config.RoleReader), "NATS_INBOX_PREFIX=" + config.RoleReader.InboxPrefix()}
	if out, code := run(explicit, "leasemgr", "nats-context", "--name", "mine-explicit"); code != 0 {
		t.Fatalf("nats-context with NATS_NKEY: exit %d\n%s", code, out)
	}
	if out, code := runNATS("--context", "mine-explicit", "micro", "ls", "leasemgr"); code != 0 || !strings.Contains(out, "node ctx") {
		t.Errorf("nats micro ls with the NATS_NKEY context: exit %d\n%s", code, out)
	}
	if out, code := run(explicit, "leasemgr", "nats-context", "--role", "reader"); code != 2 || !strings.Contains(out, "NATS_NKEY") {
		t.Errorf("--role with NATS_NKEY set: exit %d\n%s", code, out)
	}
}
