package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nkeys"
)

// systemd's StateDirectory=: the default store and the embedded server's
// credentials go into $STATE_DIRECTORY (its first entry); explicit
// NATS_STORE_DIR and NATS_AUTH_DIR still win, and without it the XDG
// defaults hold.
func TestStateDirectory(t *testing.T) {
	t.Setenv(EnvXDGStateHome, "/xdg/state")
	t.Setenv("XDG_CONFIG_HOME", "/xdg/config")
	load := func(m map[string]string) *Manager {
		t.Helper()
		m[EnvNodeID] = "n1"
		c, err := LoadManagerFrom(m)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := load(map[string]string{EnvStateDirectory: "/var/lib/slotlease:/var/lib/other"})
	if c.NATSStoreDir != "/var/lib/slotlease/n1/jetstream" || !c.NATSStoreDirDefault || c.NATSStoreBase != "/var/lib/slotlease" {
		t.Errorf("with STATE_DIRECTORY: store %q (default %v, base %q), want /var/lib/slotlease/n1/jetstream below /var/lib/slotlease", c.NATSStoreDir, c.NATSStoreDirDefault, c.NATSStoreBase)
	}
	if c.NATSAuthDir != "/var/lib/slotlease/embedded-127.0.0.1-4222" {
		t.Errorf("with STATE_DIRECTORY: auth dir %q", c.NATSAuthDir)
	}
	if dir, err := c.EmbeddedAuthDir(); err != nil || dir != c.NATSAuthDir {
		t.Errorf("EmbeddedAuthDir = %q, %v", dir, err)
	}

	c = load(map[string]string{EnvStateDirectory: "/var/lib/slotlease", EnvNATSStoreDir: "/srv/store", EnvNATSAuthDir: "/srv/auth"})
	if c.NATSStoreDir != "/srv/store" || c.NATSStoreDirDefault || c.NATSAuthDir != "/srv/auth" {
		t.Errorf("explicit variables over STATE_DIRECTORY: store %q (default %v), auth %q", c.NATSStoreDir, c.NATSStoreDirDefault, c.NATSAuthDir)
	}

	c = load(map[string]string{})
	if c.NATSStoreDir != "/xdg/state/slotlease/n1/jetstream" || c.NATSStoreBase != "/xdg/state" || c.NATSAuthDir != "/xdg/config/slotlease/embedded-127.0.0.1-4222" {
		t.Errorf("without STATE_DIRECTORY: store %q below %q, auth %q: want the XDG directories", c.NATSStoreDir, c.NATSStoreBase, c.NATSAuthDir)
	}

	// Clients read it too: executor finds the credentials of the
	// embedded server its unit shares the state directory with.
	cc, err := LoadCommonFrom(map[string]string{EnvStateDirectory: "/var/lib/slotlease", EnvNATSListen: "127.0.0.1:4333"})
	if err != nil || cc.NATSAuthDir != "/var/lib/slotlease/embedded-127.0.0.1-4333" {
		t.Errorf("client with STATE_DIRECTORY: auth dir %q, %v", cc.NATSAuthDir, err)
	}

	for _, bad := range []string{"var/lib/slotlease", "relative:/abs"} {
		_, err := LoadManagerFrom(map[string]string{EnvNodeID: "n1", EnvStateDirectory: bad})
		var ve *VarError
		if !errors.As(err, &ve) || ve.Var != EnvStateDirectory || !strings.Contains(err.Error(), "must be an absolute path") {
			t.Errorf("STATE_DIRECTORY=%q: %v, want an error naming STATE_DIRECTORY", bad, err)
		}
	}
}

// systemd's LoadCredential=: a relative credential file name is a file in
// $CREDENTIALS_DIRECTORY, which systemd makes 0500 with files 0400; an
// absolute one is taken as it is, and without the variable a relative one
// stays relative to the working directory.
func TestCredentialsDirectory(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"manager.nk", "jobs-admin.nk"} {
		if err := os.WriteFile(filepath.Join(creds, name), seed, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(creds, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(creds, 0o700) })

	c, err := LoadManagerFrom(map[string]string{
		EnvNodeID: "n1", EnvNATSURL: "nats://127.0.0.1:4222", EnvCredentialsDirectory: creds,
		EnvNATSNKey: "manager.nk", EnvJobsNATSNKey: "jobs-admin.nk",
	})
	if err != nil {
		t.Fatalf("credentials in a 0500 directory, files 0400: %v", err)
	}
	if c.NATSNKey != filepath.Join(creds, "manager.nk") || c.JobsNATSNKey != filepath.Join(creds, "jobs-admin.nk") {
		t.Errorf("NATS_NKEY %q, JOBS_NATS_NKEY %q: want the files in %s", c.NATSNKey, c.JobsNATSNKey, creds)
	}
	if got := c.SecretPaths(); !slices.Contains(got, creds) {
		t.Errorf("SecretPaths %q lacks CREDENTIALS_DIRECTORY", got)
	}

	// A missing credential is named where it was looked for.
	_, err = LoadCommonFrom(map[string]string{EnvCredentialsDirectory: creds, EnvNATSNKey: "executor.nk"})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(creds, "executor.nk")) || !strings.Contains(err.Error(), EnvNATSNKey) {
		t.Errorf("a missing credential: %v, want NATS_NKEY and %s named", err, filepath.Join(creds, "executor.nk"))
	}

	// An absolute path is the path; a relative one without the variable
	// is the working directory's.
	abs := filepath.Join(creds, "manager.nk")
	cc, err := LoadCommonFrom(map[string]string{EnvCredentialsDirectory: "/nonexistent", EnvNATSNKey: abs})
	if err != nil || cc.NATSNKey != abs {
		t.Errorf("absolute NATS_NKEY: %q, %v", cc.NATSNKey, err)
	}
	t.Chdir(creds)
	cc, err = LoadCommonFrom(map[string]string{EnvNATSNKey: "manager.nk"})
	if err != nil || cc.NATSNKey != "manager.nk" {
		t.Errorf("relative NATS_NKEY without CREDENTIALS_DIRECTORY: %q, %v", cc.NATSNKey, err)
	}

	_, err = LoadCommonFrom(map[string]string{EnvCredentialsDirectory: "run/credentials"})
	var ve *VarError
	if !errors.As(err, &ve) || ve.Var != EnvCredentialsDirectory {
		t.Errorf("relative CREDENTIALS_DIRECTORY: %v, want an error naming it", err)
	}
}

// What systemd makes for a service that is not root: the credentials
// directory root's, mode 0500 (0550 where an ACL gives the service's user
// access: the group bits show the ACL's mask), each file root's, 0400 (or
// 0440 with the ACL). The safe-path rule takes both: root's, and nobody
// else may write them.
func TestSystemdCredentialsPassTheRule(t *testing.T) {
	v := idView{me: 61234, unmapped: -1}
	for _, mode := range []uint32{syscall.S_IFDIR | 0o500, syscall.S_IFDIR | 0o550} {
		if err := v.judgeDir("/run/credentials/leasemgr.service/manager.nk", "/run/credentials/leasemgr.service", 0, mode); err != nil {
			t.Errorf("directory mode %04o: %v", mode&0o7777, err)
		}
	}
	for _, mode := range []uint32{syscall.S_IFREG | 0o400, syscall.S_IFREG | 0o440} {
		if err := v.judgeFile("/run/credentials/leasemgr.service/manager.nk", 0, mode); err != nil {
			t.Errorf("file mode %04o: %v", mode&0o7777, err)
		}
	}
	// The service's own (systemd chowns them where it cannot set an ACL).
	if err := v.judgeFile("/run/credentials/leasemgr.service/manager.nk", 61234, syscall.S_IFREG|0o400); err != nil {
		t.Errorf("the service user's 0400 file: %v", err)
	}
}

func TestSecretPathsOfAService(t *testing.T) {
	c := &Common{StateDirectory: "/var/lib/slotlease", CredentialsDirectory: "/run/credentials/executor.service"}
	got := c.secretPaths(func(string) string { return "" }, func() (string, error) { return "/cfg", nil }, func() (string, error) { return "/state", nil }, "/tmp")
	for _, want := range []string{"/var/lib/slotlease", "/run/credentials/executor.service"} {
		if !slices.Contains(got, want) {
			t.Errorf("SecretPaths = %q, lacks %s", got, want)
		}
	}
}
