// Package asuser runs test programs as an ordinary user: the threat model
// holds for a normal user and for root alike, and a test that runs only as
// root hides half of it.
//
// A test running as root drops to an unused uid with setpriv, in a mount
// namespace of its own where /etc/passwd and /etc/group name that user
// and, for New(..., Subordinate), /etc/subuid and /etc/subgid give it a
// range of subordinate ids (bind mounts: the machine's files are not
// touched). Subordinate ids need newuidmap and newgidmap: the test installs
// Debian's uidmap package with apt-get when they are missing, so `go test
// ./...` on a fresh Debian machine runs it (SLOTLEASE_SKIP_UIDMAP=1 skips
// such tests instead). A test running as an ordinary user runs the
// programs as itself, with the subordinate ids it has, if any.
package asuser

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/test/debpkg"
	"github.com/slotlease/slotlease/test/raceexit"
)

// Kinds of user New makes.
const (
	// Plain is a user without subordinate ids.
	Plain = iota
	// Subordinate is a user with a range of subordinate ids.
	Subordinate
)

// SkipUIDMapEnv=1 skips tests that need newuidmap rather than installing it.
const SkipUIDMapEnv = "SLOTLEASE_SKIP_UIDMAP"

// User is an ordinary user programs run as.
type User struct {
	UID, GID int
	// Home and Tmp are private directories of the user, for HOME and
	// TMPDIR.
	Home, Tmp string
	// Dropped: the test runs as root and drops to UID (else it runs as
	// itself, UID).
	Dropped bool
	// Kind is Plain or Subordinate.
	Kind int
	etc  string // passwd, group, subuid, subgid for the bind mounts
}

// New returns a user of kind for the test: as root, uid (which must be
// unused) with subordinate ids from subStart (65536 of them) for
// Subordinate; as an ordinary user, the test's own user, and the test is
// skipped for Subordinate unless that user has subordinate ids and
// newuidmap.
func New(t testing.TB, kind, uid, subStart int) *User {
	t.Helper()
	u := &User{Kind: kind}
	if os.Geteuid() != 0 {
		u.UID, u.GID = os.Getuid(), os.Getgid()
		u.Home, u.Tmp = mkdir(t, 0o700), mkdir(t, 0o700)
		if kind == Subordinate && !HasSubordinate() {
			t.Skip("the test runs as an ordinary user without subordinate ids and newuidmap: skipping the subordinate-id case")
		}
		return u
	}
	if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		t.Fatalf("asuser: uid %d is in use on this machine; pick another", uid)
	}
	if kind == Subordinate {
		ensureUIDMap(t)
	}
	u.UID, u.GID, u.Dropped = uid, uid, true
	u.Home, u.Tmp = mkdir(t, 0o700), mkdir(t, 0o700)
	for _, d := range []string{u.Home, u.Tmp} {
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	u.etc = mkdir(t, 0o755)
	name := fmt.Sprintf("slotlease-test-%d", uid)
	appendTo := func(file, src, line string) {
		data, err := os.ReadFile(src)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		if err := os.WriteFile(filepath.Join(u.etc, file), append(data, line...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	appendTo("passwd", "/etc/passwd", fmt.Sprintf("%s:x:%d:%d::%s:/bin/sh\n", name, uid, uid, u.Home))
	appendTo("group", "/etc/group", fmt.Sprintf("%s:x:%d:\n", name, uid))
	sub := ""
	if kind == Subordinate {
		sub = fmt.Sprintf("%s:%d:65536\n", name, subStart)
	}
	appendTo("subuid", "/dev/null", sub)
	appendTo("subgid", "/dev/null", sub)
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		// A mount point for the bind; empty, it gives no one anything.
		if _, err := os.Stat(f); os.IsNotExist(err) {
			t.Logf("asuser: creating an empty %s", f)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return u
}

// Command runs name as the user, with exactly env as its environment
// (plus PATH, HOME and TMPDIR unless env sets them).
func (u *User) Command(env []string, name string, args ...string) *exec.Cmd {
	full := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + u.Home, "TMPDIR=" + u.Tmp, raceexit.Env()}
	full = append(full, env...)
	if !u.Dropped {
		cmd := exec.Command(name, args...)
		cmd.Env = full
		return cmd
	}
	// In a mount namespace of its own: the user's /etc files over the
	// machine's, then setpriv to the user with no supplementary group.
	const script = `set -e
etc=$1 uid=$2
shift 2
for f in passwd group subuid subgid; do
	mount --bind "$etc/$f" "/etc/$f"
done
exec setpriv --reuid "$uid" --regid "$uid" --clear-groups env -i "$@"`
	argv := []string{"-m", "--propagation", "private", "sh", "-c", script, "sh", u.etc, strconv.Itoa(u.UID)}
	argv = append(append(append(argv, full...), name), args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return cmd
}

// Executable copies the program at path into a directory the user may
// read and run programs from, and returns the copy's path.
func (u *User) Executable(t testing.TB, path string) string {
	t.Helper()
	dir := mkdir(t, 0o755)
	dst := filepath.Join(dir, filepath.Base(path))
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// mkdir is a fresh directory of mode perm whose parents anyone may enter.
func mkdir(t testing.TB, perm os.FileMode) string {
	t.Helper()
	d := t.TempDir()
	for p := filepath.Dir(d); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d, perm); err != nil {
		t.Fatal(err)
	}
	return d
}

// HasSubordinate: this (ordinary) user has subordinate ids and the tools.
func HasSubordinate() bool {
	if _, err := exec.LookPath("newuidmap"); err != nil {
		return false
	}
	u, err := user.Current()
	if err != nil {
		return false
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		found := false
		for _, line := range strings.Split(string(data), "\n") {
			owner, _, _ := strings.Cut(line, ":")
			found = found || owner == u.Username || owner == u.Uid
		}
		if !found {
			return false
		}
	}
	return true
}

// ensureUIDMap installs Debian's uidmap package (newuidmap, newgidmap)
// when it is missing.
func ensureUIDMap(t testing.TB) {
	t.Helper()
	debpkg.Tool{Path: "/usr/bin/newuidmap", Pkg: "uidmap", SkipEnv: SkipUIDMapEnv, Test: "the subordinate-id case"}.Ensure(t)
}
