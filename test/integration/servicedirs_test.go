package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
)

// As a systemd unit runs it (docs/deploy.md): with STATE_DIRECTORY set
// (StateDirectory=) leasemgr keeps its store and the embedded server's
// credentials there, nothing in the home directory, and a client with the
// same STATE_DIRECTORY finds them; with CREDENTIALS_DIRECTORY
// (LoadCredential=) a relative NATS_NKEY is a file there, in a directory
// of mode 0500 and a file of 0400 as systemd makes them. leasemgr health,
// the container's HEALTHCHECK, says whether it is alive and ready.
func TestServiceDirectories(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "svc", "gpu=2", "15s")
	home := envValue(env, "HOME")
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o755); err != nil { // StateDirectoryMode='s default
		t.Fatal(err)
	}
	env = append(without(env, "NATS_STORE_DIR"), "STATE_DIRECTORY="+state)
	m := startManager(t, env, httpAddr)

	listen := envValue(env, "NATS_LISTEN")
	auth := filepath.Join(state, "embedded-"+strings.ReplaceAll(listen, ":", "-"))
	if err := config.CheckPrivateTree(state, filepath.Join(state, "svc", "jetstream")); err != nil {
		t.Errorf("the store in STATE_DIRECTORY: %v", err)
	}
	if err := config.CheckPrivateFile(config.AuthFile(auth, config.RoleReader)); err != nil {
		t.Errorf("the credentials in STATE_DIRECTORY: %v", err)
	}
	for _, p := range []string{".config", ".local"} {
		if _, err := os.Stat(filepath.Join(home, p)); !os.IsNotExist(err) {
			t.Errorf("leasemgr with STATE_DIRECTORY wrote %s in the home directory (%v)", p, err)
		}
	}

	if code, out := runManagerCmd(t, env, "health"); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("leasemgr health: exit %d, want 0 and ok:\n%s", code, out)
	}
	if code, out := runManagerCmd(t, env, "health", "--ready"); code != 0 || !strings.HasPrefix(out, "ready") {
		t.Errorf("leasemgr health --ready: exit %d, want 0 and ready:\n%s", code, out)
	}
	// A client of the same service directory: the reader's credentials.
	if code, out := runManagerCmd(t, env, "pools"); code != 0 || !strings.Contains(out, "gpu") {
		t.Errorf("leasemgr pools with STATE_DIRECTORY: exit %d\n%s", code, out)
	}

	// LoadCredential=reader.nk:...: systemd's copy, root's or the
	// service's, 0400 in a 0500 directory.
	creds := filepath.Join(t.TempDir(), "credentials")
	seed, err := os.ReadFile(config.AuthFile(auth, config.RoleReader))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "reader.nk"), seed, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(creds, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(creds, 0o700) })
	client := []string{"HOME=" + t.TempDir(), "NATS_URL=nats://" + listen, "CREDENTIALS_DIRECTORY=" + creds,
		"NATS_NKEY=reader.nk", "NATS_INBOX_PREFIX=" + config.RoleReader.InboxPrefix(), "NODE_ID=svc"}
	if code, out := runManagerCmd(t, client, "pools"); code != 0 || !strings.Contains(out, "gpu") {
		t.Errorf("leasemgr pools with NATS_NKEY=reader.nk in CREDENTIALS_DIRECTORY: exit %d\n%s", code, out)
	}
	missing := append(without(client, "NATS_NKEY"), "NATS_NKEY=executor.nk")
	if code, out := runManagerCmd(t, missing, "pools"); code != 2 || !strings.Contains(out, filepath.Join(creds, "executor.nk")) {
		t.Errorf("a credential missing from CREDENTIALS_DIRECTORY: exit %d, want 2 naming %s:\n%s", code, filepath.Join(creds, "executor.nk"), out)
	}

	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)
	if code, out := runManagerCmd(t, env, "health"); code != 1 || !strings.Contains(out, "/healthz") {
		t.Errorf("leasemgr health with leasemgr stopped: exit %d, want 1 naming /healthz:\n%s", code, out)
	}
	if code, out := runManagerCmd(t, append(without(env, "HTTP_ADDR"), "HTTP_ADDR="), "health"); code != 2 || !strings.Contains(out, "HTTP_ADDR") {
		t.Errorf("leasemgr health with HTTP_ADDR empty: exit %d, want 2 naming HTTP_ADDR:\n%s", code, out)
	}
}
