package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/test/asuser"
)

// A NATS_NKEY file that others may read, or its group where it is the
// user's own, stops leasemgr's subcommands and the executor at start (exit
// 2), naming the variable, the mode and the fix; before, a 0640 seed was
// used without a word (issue 39). A key file of root's that its group may
// read is an administrator sharing it with a group's users, and is used.
// As an ordinary user: run as root, the test drops to one (asuser) and
// also tries root's files; run as an ordinary user, it cannot make a file
// of root's, so it tries the user's own only.
func TestReadableKeyFilesRefused(t *testing.T) {
	t.Parallel()
	u := asuser.New(t, asuser.Plain, 42217, 0)
	env, url := simpleManagerEnv(t, "POOL_CAPACITIES=gpu=1")
	start(t, env, "leasemgr")
	waitServing(t, url, "logs")
	seed, err := os.ReadFile(config.AuthFile(authDirFor(t, testHome(t), url), config.RoleReader))
	if err != nil {
		t.Fatal(err)
	}
	// key writes the reader's seed to a file in the user's home, owned by
	// uid and gid, of mode perm.
	key := func(name string, uid, gid int, perm os.FileMode) string {
		t.Helper()
		p := filepath.Join(u.Home, name)
		if err := os.WriteFile(p, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	clientEnv := func(file string) []string {
		return []string{"NATS_URL=" + url, "NODE_ID=logs", "NATS_NKEY=" + file, "NATS_INBOX_PREFIX=" + config.RoleReader.InboxPrefix()}
	}
	refused := func(file string, says ...string) {
		t.Helper()
		for _, args := range [][]string{{"leasemgr", "pools"}, {"executor", "run", "--pool", "gpu", "--", "true"}} {
			p := startAs(t, u, clientEnv(file), args[0], args[1:]...)
			code := p.Wait(t, 30*time.Second)
			out := p.Output()
			ok := code == 2 && strings.Contains(out, `NATS_NKEY: "`+file+`"`)
			for _, s := range says {
				ok = ok && strings.Contains(out, s)
			}
			if !ok {
				t.Errorf("%s with NATS_NKEY %s: exit %d, want 2 naming the variable, the file and %q:\n%s", args[0], file, code, says, out)
			}
		}
	}
	used := func(file string) {
		t.Helper()
		p := startAs(t, u, clientEnv(file), "leasemgr", "pools")
		if code := p.Wait(t, 30*time.Second); code != 0 || !strings.Contains(p.Output(), "gpu") {
			t.Errorf("leasemgr pools with NATS_NKEY %s: exit %d, want 0 and the pools:\n%s", file, code, p.Output())
		}
	}

	own := key("own.nk", u.UID, u.GID, 0o640)
	refused(own, own+": is readable by its group (mode 0640)", "run: chmod g-r "+own)
	if err := os.Chmod(own, 0o600); err != nil { // the fix it names
		t.Fatal(err)
	}
	used(own)
	if u.Dropped {
		used(key("shared.nk", 0, u.GID, 0o640))
		open := key("open.nk", 0, u.GID, 0o644)
		refused(open, open+": is readable by others (mode 0644)", "run: chmod o-r "+open)
	}
}
