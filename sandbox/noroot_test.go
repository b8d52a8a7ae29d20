//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rootOnlyEnv makes this test binary the inside of
// TestConfineRefusesRootOnlyNamespace: uid 0 of a user namespace that maps
// nothing else.
const rootOnlyEnv = "SANDBOX_TEST_ROOT_ONLY"

// Issue 38: in a user namespace that maps only uid 0 and gid 0 (a
// container whose uid_map is "0 0 1", or `unshare -r`), the only ids a
// worker could get are the executor's, 0: CheckConfine refuses with a
// *WorkerIDsError, though the namespaces work, and a confined run starts
// nothing. Shown in such a namespace (unshare -r), made by root (uid_map
// "0 0 1": uid 0 is root's own) and by ordinary users without and with
// subordinate ids (uid 0 is theirs).
func TestConfineRefusesRootOnlyNamespace(t *testing.T) {
	if os.Getenv(rootOnlyEnv) == "" {
		alsoAsUsers(t, "TestConfineRefusesRootOnlyNamespace")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "-U", "-r", exe, "-test.run", "^TestConfineRefusesRootOnlyNamespace$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), rootOnlyEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a user namespace mapping only uid 0: %v\n%s", err, out)
		}
		t.Logf("in a user namespace mapping only uid 0:\n%s", out)
		return
	}
	if m, _ := os.ReadFile("/proc/self/uid_map"); len(strings.Fields(string(m))) != 3 || os.Getuid() != 0 {
		t.Fatalf("not uid 0 of a user namespace mapping one id: uid %d, uid_map %q", os.Getuid(), m)
	}
	c, err := CheckConfine()
	var we *WorkerIDsError
	if !errors.As(err, &we) || !errors.Is(err, ErrNotIsolated) {
		t.Fatalf("CheckConfine: %+v, %v; want a *WorkerIDsError", c, err)
	}
	if c.Namespaces == "" || !strings.Contains(we.Why, "the executor runs as uid 0") {
		t.Fatalf("CheckConfine: %+v, %v; want the namespaces it could have had and the reason", c, err)
	}
	t.Logf("CheckConfine: namespaces %s; %v", c.Namespaces, err)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, spec := range []Spec{{Confine: true}, {Hide: []string{t.TempDir()}}} {
		spec.Command = []string{"sh", "-c", "touch " + marker}
		if _, err := Run(context.Background(), spec, nil); !errors.As(err, &we) || !errors.Is(err, ErrNotIsolated) {
			t.Fatalf("confine=%v hide=%v: %v, want a *WorkerIDsError", spec.Confine, spec.Hide, err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("confine=%v hide=%v: the command ran", spec.Confine, spec.Hide)
		}
	}
}
