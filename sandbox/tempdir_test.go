//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func b36(pid int) string { return strconv.FormatInt(int64(pid), 36) }

// SweepTemp removes what a dead process of this user made with MkdirTemp,
// and nothing else: not a live process's, not another PID namespace's,
// not another user's, not through a symbolic link.
func TestSweepTempRemovesOnlyTheDeads(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ns := ownerNS()
	if ns == "" {
		t.Skip("no PID namespace id here")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	mk := func(name string) string {
		t.Helper()
		p := filepath.Join(os.TempDir(), name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(fmt.Sprintf("%s%s-%s-123", TempWorkdir, ns, b36(deadPID)))
	mine, err := MkdirTemp(TempWorkdir) // this process lives
	if err != nil {
		t.Fatal(err)
	}
	parents := mk(fmt.Sprintf("%s%s-%s-123", TempWorkdir, ns, b36(os.Getppid())))
	otherNS := mk(fmt.Sprintf("%s%s1-%s-123", TempWorkdir, ns, b36(deadPID)))
	otherKind := mk(fmt.Sprintf("%s%s-%s-123", TempJob, ns, b36(deadPID)))
	target := mk("somewhere-else")
	link := filepath.Join(os.TempDir(), fmt.Sprintf("%s%s-%s-456", TempWorkdir, ns, b36(deadPID)))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	var othersUser string
	if os.Getuid() == 0 {
		othersUser = mk(fmt.Sprintf("%s%s-%s-789", TempWorkdir, ns, b36(deadPID)))
		if err := os.Chown(othersUser, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}

	removed := SweepTemp(TempWorkdir)
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %q, want only %s", removed, stale)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead process's directory is still there: %v", err)
	}
	for _, p := range []string{mine, parents, otherNS, otherKind, filepath.Join(target, "sub", "f"), link, othersUser} {
		if p == "" {
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
