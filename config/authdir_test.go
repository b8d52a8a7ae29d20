package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestAuthDirUnder(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:4222": "embedded-127.0.0.1-4222",
		"[::1]:24301":    "embedded-__1-24301",
		":4222":          "embedded-any-4222",
		"localhost:1":    "embedded-127.0.0.1-1", // the same server as 127.0.0.1
	} {
		got, err := AuthDirUnder("/cfg", addr)
		if err != nil || got != filepath.Join("/cfg", "slotlease", want) {
			t.Errorf("AuthDirUnder(%q) = %q, %v; want /cfg/slotlease/%s", addr, got, err, want)
		}
	}
	if _, err := AuthDirUnder("/cfg", "no-port"); err == nil {
		t.Error("an address without a port got an auth directory")
	}
}

func TestAuthDirDefault(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, filepath.Join(cfgDir, "slotlease", "embedded-127.0.0.1-4222")},
		{map[string]string{EnvNATSListen: "127.0.0.1:24301"}, filepath.Join(cfgDir, "slotlease", "embedded-127.0.0.1-24301")},
		{map[string]string{EnvNATSURL: "nats://127.0.0.1:24302"}, filepath.Join(cfgDir, "slotlease", "embedded-127.0.0.1-24302")},
		{map[string]string{EnvNATSURL: "nats://localhost"}, filepath.Join(cfgDir, "slotlease", "embedded-127.0.0.1-4222")},
		{map[string]string{EnvNATSURL: "nats://a:4222,nats://b:4222"}, ""}, // a cluster: none
		{map[string]string{EnvNATSAuthDir: "/etc/slotlease/x"}, "/etc/slotlease/x"},
	} {
		c, err := LoadCommonFrom(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if c.NATSAuthDir != tc.want {
			t.Errorf("%v: NATSAuthDir %q, want %q", tc.env, c.NATSAuthDir, tc.want)
		}
	}
}

func TestEmbeddedAuthDirWithoutHome(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", "")
	c, err := LoadCommonFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EmbeddedAuthDir(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "set "+EnvNATSAuthDir) {
		t.Fatalf("no home: %v, want an error asking for %s", err, EnvNATSAuthDir)
	}
	c.NATSAuthDir = "/srv/auth"
	if dir, err := c.EmbeddedAuthDir(); dir != "/srv/auth" || err != nil {
		t.Fatalf("explicit dir: %q, %v", dir, err)
	}
}

func TestCheckPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil { // t.TempDir follows the umask
		t.Fatal(err)
	}
	file := filepath.Join(dir, "seed")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(dir); err != nil {
		t.Errorf("0700 dir: %v", err)
	}
	if err := CheckPrivateFile(file); err != nil {
		t.Errorf("0600 file: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		check func(string) error
		path  string
		says  string
	}{
		{"group-readable file", 0o640, CheckPrivateFile, file, file + ": is accessible to group or others (mode 0640); run: chmod 600 " + file},
		{"world-readable file", 0o604, CheckPrivateFile, file, "chmod 600"},
		{"group-listable dir", 0o750, CheckPrivateDir, dir, dir + ": is accessible to group or others (mode 0750); run: chmod 700 " + dir},
		{"a file as dir", 0, CheckPrivateDir, file, "is not a directory"},
		{"a symlink", 0, CheckPrivateFile, link, "symbolic link"},
		{"missing", 0, CheckPrivateFile, filepath.Join(dir, "none"), "no such file"},
	} {
		if tc.mode != 0 {
			if err := os.Chmod(tc.path, tc.mode); err != nil {
				t.Fatal(err)
			}
		}
		err := tc.check(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
		_ = os.Chmod(dir, 0o700)
		_ = os.Chmod(file, 0o600)
	}
}

// A directory another user owns is refused even with mode 0700: its owner
// knows what is in it.
func TestCheckPrivateOwner(t *testing.T) {
	foreign := "/" // owned by root: foreign unless the test runs as root
	if os.Getuid() == 0 {
		foreign = filepath.Join(t.TempDir(), "foreign")
		if err := os.Mkdir(foreign, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckPrivateDir(foreign); err == nil || !strings.Contains(err.Error(), "not by this user") {
		t.Fatalf("%s: %v, want refused as owned by another user", foreign, err)
	}
}

func TestMakePrivateDir(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "leasemgr", "n1", "jetstream")
	if err := MakePrivateDir(base, path); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "leasemgr"), filepath.Join(base, "leasemgr", "n1"), path} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, want a 0700 directory", d, err)
		}
	}
	// A parent someone opened (or made before, e.g. with a umask of 022)
	// is refused by name, even though the leaf is private.
	open := filepath.Join(base, "leasemgr")
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakePrivateDir(base, path); err == nil || !strings.Contains(err.Error(), open+": is accessible") {
		t.Fatalf("open parent: %v, want an error naming %s", err, open)
	}
	// An explicit store dir: only it is checked.
	if err := MakePrivateDir("", path); err != nil {
		t.Fatalf("explicit dir: %v", err)
	}
	if err := MakePrivateDir(filepath.Join(base, "other"), path); err == nil {
		t.Fatal("a path outside base was accepted")
	}
}

func TestUseEmbeddedCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	load := func(extra map[string]string) *Common {
		t.Helper()
		env := map[string]string{EnvNATSAuthDir: dir}
		for k, v := range extra {
			env[k] = v
		}
		c, err := LoadCommonFrom(env)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// No directory: nothing changes (a real cluster, or no embedded server).
	c := load(nil)
	if ok, err := c.UseEmbeddedCreds(RoleExecutor); ok || err != nil || c.NATSNKey != "" {
		t.Fatalf("no directory: %v, %v, NATSNKey %q", ok, err, c.NATSNKey)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	for _, r := range Roles {
		if err := os.WriteFile(AuthFile(dir, r), seed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range Roles {
		c := load(nil)
		if ok, err := c.UseEmbeddedCreds(r); !ok || err != nil {
			t.Fatalf("%s: %v, %v", r, ok, err)
		}
		if c.NATSNKey != AuthFile(dir, r) || c.NATSInboxPrefix != r.InboxPrefix() {
			t.Errorf("%s: NATSNKey %q, inbox %q", r, c.NATSNKey, c.NATSInboxPrefix)
		}
	}
	if RoleExecutor.InboxPrefix() != DefaultInboxPrefix || RoleManager.InboxPrefix() == DefaultInboxPrefix || RoleReader.InboxPrefix() == DefaultInboxPrefix || RoleReader.InboxPrefix() == RoleManager.InboxPrefix() {
		t.Error("only executors may share _INBOX; the manager and readers need prefixes of their own")
	}
	if got := EmbeddedReplyPrefixes(); !slices.Equal(got, []string{"_SLOTLEASE_MGR", "_INBOX", "_SLOTLEASE_READ"}) {
		t.Errorf("EmbeddedReplyPrefixes() = %q", got)
	}
	// Explicit credentials win.
	c = load(map[string]string{EnvNATSUser: "u"})
	if ok, _ := c.UseEmbeddedCreds(RoleExecutor); ok || c.NATSNKey != "" {
		t.Errorf("NATS_USER set: embedded credentials used anyway (%q)", c.NATSNKey)
	}
	// Readable by others: refused, naming the file.
	if err := os.Chmod(AuthFile(dir, RoleReader), 0o644); err != nil {
		t.Fatal(err)
	}
	c = load(nil)
	_, err = c.UseEmbeddedCreds(RoleReader)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), AuthFile(dir, RoleReader)) || !strings.Contains(err.Error(), EnvNATSAuthDir) {
		t.Errorf("group-readable seed: %v, want a NATS_AUTH_DIR error naming the file", err)
	}
	if strings.Contains(err.Error(), string(seed)) {
		t.Error("the error shows the seed")
	}
}
