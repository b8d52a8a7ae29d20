package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/asuser"
)

// Issue 38: whoever owns a directory above the credentials can move them
// away and put others in their place, so leasemgr and the executor refuse
// at start (exit 2) credentials below a directory of another user's, or
// one that group or others may write and that is not a sticky directory
// of root's, naming it, its owner and mode, and the fix; once fixed, the
// same layout starts. The credentials are the default ones, below
// XDG_CONFIG_HOME. As an ordinary user: run as root, the test drops to one
// (asuser), and the directory above XDG_CONFIG_HOME is another unused
// uid's; run as an ordinary user, it cannot give a directory away, so
// that directory is its own, writable by its group.
func TestCredentialsBelowAnotherUsersDirectory(t *testing.T) {
	t.Parallel()
	var u *asuser.User
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		u = asuser.New(t, asuser.Plain, 42205, 0)
		uid, gid = u.UID, u.GID
	}
	above := openTempDir(t)
	configHome := filepath.Join(above, "config")
	if err := os.Mkdir(configHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(configHome, uid, gid); err != nil {
		t.Fatal(err)
	}
	var says []string
	var fix func() error
	if u != nil {
		const other = 42206 // unused
		if err := os.Chown(above, other, other); err != nil {
			t.Fatal(err)
		}
		says = []string{above + ": is owned by uid 42206, neither root nor this user (uid 42205), mode 0755", "run: chown root " + above}
		fix = func() error { return os.Chown(above, 0, 0) }
	} else {
		if err := os.Chmod(above, 0o775); err != nil {
			t.Fatal(err)
		}
		says = []string{above + ": is writable by group or others (mode 0775", "run: chmod go-w " + above}
		fix = func() error { return os.Chmod(above, 0o755) }
	}
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := []string{"XDG_CONFIG_HOME=" + configHome, "NODE_ID=parents", "POOL_CAPACITIES=gpu=1",
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", natsPort), "HTTP_ADDR=" + httpAddr}
	authDir := filepath.Join(configHome, "slotlease", fmt.Sprintf("embedded-127.0.0.1-%d", natsPort))
	// leasemgr first: it makes the credentials directory, then refuses
	// it; then the executor, which finds it there.
	for _, args := range [][]string{{"leasemgr"}, {"executor", "run", "--pool", "gpu", "--", "true"}} {
		p := startAs(t, u, env, args[0], args[1:]...)
		code := p.Wait(t, 30*time.Second)
		out := p.Output()
		ok := code == 2 && strings.Contains(out, "NATS_AUTH_DIR") && strings.Contains(out, authDir)
		for _, s := range says {
			ok = ok && strings.Contains(out, s)
		}
		if !ok {
			t.Fatalf("%s with credentials below %s: exit %d, want 2 naming %s, the directory and the fix (%q):\n%s", args[0], above, code, authDir, says, out)
		}
		if strings.Contains(out, "granted") {
			t.Fatalf("%s went on after refusing:\n%s", args[0], out)
		}
	}
	if err := fix(); err != nil {
		t.Fatal(err)
	}
	startManagerAs(t, u, env, httpAddr)
	if p := startAs(t, u, env, "executor", "run", "--pool", "gpu", "--", "true"); p.Wait(t, 60*time.Second) != 0 {
		t.Fatalf("executor run once %s is fixed: %s", above, p.Output())
	}
}
