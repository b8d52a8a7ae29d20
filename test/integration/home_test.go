package integration

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/natsconn"
)

// homes holds one home directory per test: every binary a test starts
// from a manager's environment runs as the same user with the same home,
// as on a real host, so that executors and the leasemgr subcommands find
// the credentials the embedded server made (NATS_AUTH_DIR's default).
var homes sync.Map // *testing.T -> string

func testHome(t *testing.T) string {
	t.Helper()
	if h, ok := homes.Load(t); ok {
		return h.(string)
	}
	h := t.TempDir()
	homes.Store(t, h)
	t.Cleanup(func() { homes.Delete(t) })
	return h
}

// authDirFor is where an embedded server at natsURL started by a leasemgr
// with home keeps its credentials.
func authDirFor(t *testing.T, home, natsURL string) string {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := config.AuthDirUnder(filepath.Join(home, ".config"), u.Host)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// connectAs connects the test to the NATS at natsURL as role with the
// credentials a leasemgr run with home made for its embedded server;
// anonymously where there are none (a harness server).
func connectAs(t *testing.T, home, natsURL string, role config.Role, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	var auth natsconn.Auth
	dir := authDirFor(t, home, natsURL)
	if _, err := os.Stat(dir); err == nil {
		auth = natsconn.Auth{NKeySeed: config.AuthFile(dir, role), InboxPrefix: role.InboxPrefix()}
	}
	return natsconn.Connect(natsURL, auth, t.Name(), append([]nats.Option{nats.MaxReconnects(0)}, opts...)...)
}

// envValue returns the value of key in env (the last one), or "".
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s
		}
	}
	return v
}
