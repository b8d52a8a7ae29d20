package integration

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/test/asuser"
)

// asEachUser runs f as a parallel subtest as the test's own user and, when
// the test runs as root, as the ordinary user uid (asuser.Plain), each with
// a leasemgr environment of its own (managerEnv(node, pools)) that such a
// user can use: its store and home below the user's own HOME, not in this
// test's private temporary directories. u is nil for the test's own user.
func asEachUser(t *testing.T, uid int, node, pools string, f func(t *testing.T, u *asuser.User, env []string, httpAddr string)) {
	t.Helper()
	users := map[string]func(t *testing.T) *asuser.User{"as the test's user": func(*testing.T) *asuser.User { return nil }}
	if os.Geteuid() == 0 {
		users["as an ordinary user"] = func(t *testing.T) *asuser.User { return asuser.New(t, asuser.Plain, uid, 0) }
	}
	for who, user := range users {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			u := user(t)
			env, httpAddr := managerEnv(t, node, pools, "15s")
			if u != nil {
				env = slices.DeleteFunc(env, func(kv string) bool {
					return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "NATS_STORE_DIR=")
				})
			}
			f(t, u, env, httpAddr)
		})
	}
}
