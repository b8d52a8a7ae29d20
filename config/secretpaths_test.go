package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSecretPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := &Common{NATSCreds: "/etc/slotlease/exec.creds", NATSNKey: "exec.nk", NATSTLSKey: "/etc/slotlease/key.pem", NATSTLSCA: "/etc/ca.pem", NATSTLSCert: "/etc/cert.pem",
		NATSAuthDir: "/var/lib/slotlease-auth"}
	env := map[string]string{EnvNATSStoreDir: "/var/lib/leasemgr/js"}
	cfgDir := func() (string, error) { return "/home/u/.config", nil }
	stateDir := func() (string, error) { return "/home/u/.local/state", nil }
	got := c.secretPaths(func(k string) string { return env[k] }, cfgDir, stateDir, "/tmp")
	want := []string{"/home/u/.config/slotlease", "/var/lib/slotlease-auth", "/etc/slotlease/exec.creds",
		filepath.Join(wd, "exec.nk"), "/etc/slotlease/key.pem", "/var/lib/leasemgr/js"}
	if !slices.Equal(got, want) {
		t.Errorf("SecretPaths = %q,\nwant %q", got, want)
	}

	// Defaults: no files, no overrides: the default store of every node,
	// and the old default, are hidden.
	got = (&Common{}).secretPaths(func(string) string { return "" }, cfgDir, stateDir, "/tmp")
	if want := []string{"/home/u/.config/slotlease", "/home/u/.local/state/slotlease", "/tmp/leasemgr"}; !slices.Equal(got, want) {
		t.Errorf("SecretPaths = %q, want %q", got, want)
	}
	// No config or state dir ($HOME unset, no account): the old default
	// store of every node is still hidden.
	noDir := func() (string, error) { return "", errors.New("no home") }
	got = (&Common{}).secretPaths(func(string) string { return "" }, noDir, noDir, "/tmp")
	if want := []string{"/tmp/leasemgr"}; !slices.Equal(got, want) {
		t.Errorf("SecretPaths = %q, want %q", got, want)
	}
}

// The default store the manager computes lies under the hidden one.
func TestSecretPathsCoverDefaultStore(t *testing.T) {
	m, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	paths := m.SecretPaths()
	state, err := StateHome()
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(state, "slotlease")
	if !slices.Contains(paths, store) {
		t.Fatalf("SecretPaths %q lacks %s", paths, store)
	}
	if !strings.HasPrefix(m.NATSStoreDir, store+string(filepath.Separator)) {
		t.Errorf("default store %s is not under %s", m.NATSStoreDir, store)
	}
}
