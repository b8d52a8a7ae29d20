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

// without returns env without the variable key.
func without(env []string, key string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// The default store lives in the user's state directory, and a leasemgr
// upgraded from a version that kept it in the temp directory carries the
// old store over: a pool resized before the upgrade keeps its size
// (issue 31).
func TestDefaultStoreInStateDirCarriesTheOldOneOver(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	env, httpAddr := managerEnv(t, "xdg", "gpu=1", "15s")
	home := envValue(env, "HOME")
	env = append(without(env, "NATS_STORE_DIR"), "TMPDIR="+tmp)
	old := filepath.Join(tmp, "leasemgr", "xdg", "jetstream")
	store := config.StoreDirUnder(filepath.Join(home, ".local", "state"), "xdg")

	// A leasemgr as versions before the state directory ran it: its
	// default store in the temp directory.
	m := startManager(t, append(env, "NATS_STORE_DIR="+old), httpAddr)
	if code, out := runManagerCmd(t, env, "resize", "gpu=3"); code != 0 {
		t.Fatalf("resize: exit %d\n%s", code, out)
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)

	m = startManager(t, env, httpAddr)
	if got := httpPools(t, httpAddr)["gpu"].Capacity; got != 3 {
		t.Errorf("gpu's capacity after the upgrade is %d, want 3: the old store's resize is lost", got)
	}
	if !strings.Contains(m.Output(), "moved the store out of the temp directory") {
		t.Errorf("leasemgr does not say it moved the store:\n%s", m.Output())
	}
	if _, err := os.Stat(filepath.Join(tmp, "leasemgr")); !os.IsNotExist(err) {
		t.Errorf("the old store's directories are still in the temp directory: %v", err)
	}
	if err := config.CheckPrivateTree(home, store); err != nil {
		t.Errorf("the new store: %v", err)
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	m.Wait(t, 30*time.Second)

	// An old store beside a new one is left alone, and leasemgr says so.
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	m = startManager(t, env, httpAddr)
	if !strings.Contains(m.Output(), "an old default store is left where it is, unused") {
		t.Errorf("leasemgr does not warn of the old store beside the new:\n%s", m.Output())
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the old store beside the new one was touched: %v", err)
	}
}

// runManagerCmd runs a leasemgr subcommand to its end.
func runManagerCmd(t *testing.T, env []string, args ...string) (code int, out string) {
	t.Helper()
	p := start(t, env, "leasemgr", args...)
	code = p.Wait(t, 30*time.Second)
	return code, p.Output()
}
