package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nkeys"
)

// The rule itself, on made-up owners and modes: root's or this user's, and
// writable by group or others only when sticky and root's; in a user
// namespace that does not map every id, an unmapped owner (65534) counts
// as root, which it may be.
func TestJudgeDir(t *testing.T) {
	initial := idView{me: 1000, unmapped: -1}
	userns := idView{me: 1000, unmapped: 65534}
	for _, tc := range []struct {
		name string
		v    idView
		uid  int
		mode uint32
		says []string // nil: accepted
	}{
		{"root's, 0755 (/, /home)", initial, 0, 0o755, nil},
		{"this user's, 0700 (the home)", initial, 1000, 0o700, nil},
		{"this user's, 0755", initial, 1000, 0o755, nil},
		{"sticky and root's, 1777 (/tmp)", initial, 0, 0o1777, nil},
		{"another user's, 0755", initial, 1001, 0o755, []string{"/d: is owned by uid 1001", "neither root nor this user (uid 1000)", "mode 0755", "move /d/secret away", "run: chown root /d"}},
		{"another user's, 0700", initial, 1001, 0o700, []string{"uid 1001", "run: chown root /d"}},
		{"another user's, sticky", initial, 1001, 0o1777, []string{"uid 1001", "run: chown root /d"}},
		{"root's, group-writable", initial, 0, 0o775, []string{"/d: is writable by group or others (mode 0775, owner uid 0", "not a sticky directory of root's", "run: chmod go-w /d"}},
		{"root's, other-writable", initial, 0, 0o757, []string{"mode 0757", "run: chmod go-w /d"}},
		{"this user's, group-writable", initial, 1000, 0o770, []string{"mode 0770", "run: chmod go-w /d"}},
		{"this user's, sticky 1777", initial, 1000, 0o1777, []string{"mode 1777", "not a sticky directory of root's", "run: chmod go-w /d"}},
		{"root's, group-writable, setgid not sticky", initial, 0, 0o2775, []string{"mode 2775", "run: chmod go-w /d"}},
		{"65534 in the initial namespace: nobody, a user", initial, 65534, 0o755, []string{"uid 65534", "run: chown root /d"}},
		{"unmapped in a user namespace, 0755 (/ seen from it)", userns, 65534, 0o755, nil},
		{"unmapped in a user namespace, 1777 (/tmp seen from it)", userns, 65534, 0o1777, nil},
		{"unmapped in a user namespace, group-writable", userns, 65534, 0o775, []string{"mode 0775", "run: chmod go-w /d"}},
		{"another mapped user in a user namespace", userns, 1001, 0o755, []string{"uid 1001", "run: chown root /d"}},
	} {
		err := tc.v.judgeDir("/d/secret", "/d", tc.uid, tc.mode)
		if tc.says == nil {
			if err != nil {
				t.Errorf("%s: %v, want accepted", tc.name, err)
			}
			continue
		}
		var ue *UnsafePathError
		if !errors.As(err, &ue) || !errors.Is(err, ErrInvalid) || ue.Dir != "/d" || ue.UID != tc.uid {
			t.Errorf("%s: %v, want an *UnsafePathError for /d matching ErrInvalid", tc.name, err)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", tc.name, err, s)
			}
		}
	}
	// A key file: root's or this user's, not writable by group or others,
	// readable by no others, and by its group only if it is root's and
	// this process is not root (an administrator sharing it).
	asRoot := idView{me: 0, unmapped: -1}
	for _, tc := range []struct {
		v    idView
		uid  int
		mode uint32
		says string
	}{
		{initial, 1000, 0o600, ""},
		{initial, 1000, 0o400, ""},
		{initial, 0, 0o600, ""},
		{initial, 0, 0o640, ""},
		{initial, 0, 0o440, ""},
		{userns, 65534, 0o640, ""}, // unmapped: may be root's
		{asRoot, 0, 0o600, ""},
		{initial, 1001, 0o600, "chown 1000 /k"},
		{initial, 1000, 0o660, "chmod go-w /k"},
		{initial, 0, 0o666, "chmod go-w /k"},
		{initial, 1000, 0o640, "/k: is readable by its group (mode 0640); a group may share only a key file of root's, for users other than root, so someone else could read the key and connect as its user; run: chmod g-r /k"},
		{initial, 1000, 0o644, "is readable by its group and others (mode 0644); a group may share only a key file of root's, for users other than root, so someone else could read the key and connect as its user; run: chmod go-r /k"},
		{initial, 1000, 0o604, "/k: is readable by others (mode 0604), so someone else could read the key and connect as its user; run: chmod o-r /k"},
		{initial, 0, 0o644, "/k: is readable by others (mode 0644), so someone else could read the key and connect as its user; run: chmod o-r /k"},
		{initial, 0, 0o444, "is readable by others (mode 0444)"},
		{userns, 65534, 0o644, "is readable by others (mode 0644)"},
		{asRoot, 0, 0o640, "is readable by its group (mode 0640); a group may share only a key file of root's, for users other than root"},
		{asRoot, 0, 0o644, "run: chmod go-r /k"},
	} {
		err := tc.v.judgeFile("/k", tc.uid, tc.mode)
		if (tc.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("key file of uid %d, mode %04o, read by uid %d: %v, want %q", tc.uid, tc.mode, tc.v.me, err, tc.says)
		}
	}
}

// privateUnder makes dir/name, a directory of mode 0700 below dir.
func privateUnder(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkdirMode(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// On real directories: a private directory below the temp directory (a
// sticky directory of root's, as /tmp is) is accepted, as a test's or a
// TMPDIR's is; one below a group-writable directory, or one another user
// owns, is refused, naming that directory and the fix.
func TestCheckPrivateDirParents(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat(os.TempDir(), &st); err == nil && (st.Mode&syscall.S_ISVTX == 0 || st.Uid != 0) {
		t.Logf("%s is not a sticky directory of root's (mode %04o, uid %d): the case of /tmp is not shown here", os.TempDir(), st.Mode&0o7777, st.Uid)
	}
	base := t.TempDir()
	if err := CheckPrivateDir(privateUnder(t, base, "ok")); err != nil {
		t.Fatalf("a private directory in the temp directory: %v", err)
	}
	t.Chdir(base)
	if err := CheckPrivateDir("ok"); err != nil {
		t.Fatalf("the same, by a relative path: %v", err)
	}

	open := mkdirMode(t, filepath.Join(base, "open"), 0o775)
	secret := privateUnder(t, open, "auth")
	err := CheckPrivateDir(secret)
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), open+": is writable by group or others (mode 0775") || !strings.Contains(err.Error(), "run: chmod go-w "+open) {
		t.Fatalf("below a group-writable directory: %v, want it named with the fix", err)
	}
	if err := MakePrivateDir(open, filepath.Join(secret, "n1", "jetstream")); err == nil || !strings.Contains(err.Error(), open+": is writable") {
		t.Fatalf("MakePrivateDir below a group-writable base: %v, want it refused", err)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: a directory of another user's cannot be made here (TestJudgeDir and test/integration's TestCredentialsBelowAnotherUsersDirectory show it)")
		return
	}
	sticky := mkdirMode(t, filepath.Join(base, "sticky"), os.ModeSticky|0o777)
	if err := CheckPrivateDir(privateUnder(t, sticky, "auth")); err != nil {
		t.Fatalf("below a sticky directory of root's: %v", err)
	}
	foreign := mkdirMode(t, filepath.Join(base, "foreign"), 0o755)
	secret = privateUnder(t, foreign, "auth")
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err = CheckPrivateDir(secret)
	var ue *UnsafePathError
	if !errors.As(err, &ue) || ue.Dir != foreign || ue.UID != 65534 || !strings.Contains(err.Error(), "mode 0755") || !strings.Contains(err.Error(), "run: chown root "+foreign) {
		t.Fatalf("below a directory of uid 65534: %v, want it named with its owner, mode and the fix", err)
	}
	if err := os.Chown(sticky, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(filepath.Join(sticky, "auth")); err == nil || !strings.Contains(err.Error(), sticky+": is owned by uid 65534") {
		t.Fatalf("below a sticky directory of another user's: %v, want it refused", err)
	}
}

// Symbolic links on the way are followed as the kernel follows them: the
// directory a link lives in and every directory on the way to its target
// are checked, relative targets and ".." included; a loop is an error.
func TestCheckWayFollowsSymlinks(t *testing.T) {
	base := t.TempDir()
	safe := mkdirMode(t, filepath.Join(base, "safe"), 0o755)
	open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
	for _, d := range []string{safe, open} {
		auth := privateUnder(t, d, "auth")
		if err := os.WriteFile(filepath.Join(auth, "seed"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(at, to string) string {
		t.Helper()
		if err := os.Symlink(to, at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	for _, tc := range []struct {
		name, path string
		refused    string // "" when accepted
	}{
		{"through a link from a safe directory into a safe one", filepath.Join(link(filepath.Join(safe, "l1"), filepath.Join(safe, "auth")), "seed"), ""},
		{"a relative target with ..", filepath.Join(link(filepath.Join(safe, "l2"), "../safe/auth"), "seed"), ""},
		{"a link to a link", filepath.Join(link(filepath.Join(safe, "l3"), "l1"), "seed"), ""},
		{"through a link into a directory below an open one", filepath.Join(link(filepath.Join(safe, "l4"), filepath.Join(open, "auth")), "seed"), open},
		{"through a link that lives in an open directory", filepath.Join(link(filepath.Join(open, "l5"), filepath.Join(safe, "auth")), "seed"), open},
		{"through a relative link that climbs into the open one", filepath.Join(link(filepath.Join(safe, "l6"), "../open/auth"), "seed"), open},
	} {
		err := CheckPrivateFile(tc.path)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s (%s): %v, want accepted", tc.name, tc.path, err)
		case tc.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.refused+": is writable by group or others")):
			t.Errorf("%s (%s): %v, want %s refused", tc.name, tc.path, err, tc.refused)
		}
	}
	loop := link(filepath.Join(safe, "a"), "b")
	link(filepath.Join(safe, "b"), "a")
	if err := CheckPrivateFile(filepath.Join(loop, "seed")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a loop of links: %v, want ELOOP", err)
	}
	// The leaf itself is never followed for a private path.
	if err := CheckPrivateDir(filepath.Join(safe, "l1")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a private directory that is a link: %v, want refused", err)
	}
}

// NATS_NKEY, NATS_CREDS and JOBS_NATS_NKEY, named explicitly: the way to
// the file (also through a final link, as Kubernetes mounts secrets) and
// the file itself must be safe, and the file this user's (as it is here,
// root's or not) readable by neither group nor others; refused with the
// variable named. (A 0640 seed was once used without a word.)
func TestExplicitKeyFilesMustBeSafe(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	base := t.TempDir()
	safe := mkdirMode(t, filepath.Join(base, "safe"), 0o755)
	open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
	write := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.WriteFile(p, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(filepath.Join(safe, "user.nk"), 0o600)
	readOnly := write(filepath.Join(safe, "ro.nk"), 0o400)
	groupReadable := write(filepath.Join(safe, "gr.nk"), 0o640)
	worldReadable := write(filepath.Join(safe, "wr.nk"), 0o644)
	credsReadable := write(filepath.Join(safe, "gr.creds"), 0o640)
	readableViaLink := filepath.Join(safe, "grlink.nk")
	if err := os.Symlink(groupReadable, readableViaLink); err != nil {
		t.Fatal(err)
	}
	inOpen := write(filepath.Join(open, "user.nk"), 0o600)
	groupWritable := write(filepath.Join(safe, "gw.nk"), 0o660)
	viaLink := filepath.Join(safe, "link.nk")
	if err := os.Symlink(inOpen, viaLink); err != nil {
		t.Fatal(err)
	}
	creds := write(filepath.Join(open, "user.creds"), 0o600)
	for _, tc := range []struct {
		env  map[string]string
		says string // "" when accepted
	}{
		{map[string]string{EnvNATSNKey: good}, ""},
		{map[string]string{EnvNATSNKey: readOnly}, ""},
		{map[string]string{EnvNATSNKey: groupReadable}, "NATS_NKEY: \"" + groupReadable + "\": " + groupReadable + ": is readable by its group (mode 0640)"},
		{map[string]string{EnvNATSNKey: readableViaLink}, groupReadable + ": is readable by its group (mode 0640)"},
		{map[string]string{EnvNATSNKey: worldReadable}, worldReadable + ": is readable by its group and others (mode 0644)"},
		{map[string]string{EnvNATSCreds: credsReadable}, "NATS_CREDS: \"" + credsReadable + "\": " + credsReadable + ": is readable by its group (mode 0640)"},
		{map[string]string{EnvNATSNKey: inOpen}, "NATS_NKEY: \"" + inOpen + "\": " + open + ": is writable by group or others"},
		{map[string]string{EnvNATSNKey: viaLink}, open + ": is writable by group or others"},
		{map[string]string{EnvNATSNKey: groupWritable}, groupWritable + ": is writable by group or others (mode 0660)"},
		{map[string]string{EnvNATSCreds: creds}, "NATS_CREDS: \"" + creds + "\": " + open + ": is writable"},
	} {
		_, err := LoadCommonFrom(tc.env)
		if (tc.says == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), tc.says) || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%v: %v, want %q", tc.env, err, tc.says)
		}
	}
	for _, tc := range []struct {
		file, says string
	}{{good, ""}, {groupReadable, "JOBS_NATS_NKEY: \"" + groupReadable + "\": " + groupReadable + ": is readable by its group (mode 0640)"}} {
		_, err := LoadManagerFrom(map[string]string{EnvNATSURL: "nats://127.0.0.1:4222", EnvJobsNATSNKey: tc.file})
		if (tc.says == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), tc.says) || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s=%s: %v, want %q", EnvJobsNATSNKey, tc.file, err, tc.says)
		}
	}
}
