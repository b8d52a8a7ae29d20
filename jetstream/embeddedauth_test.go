package jetstream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/natsconn"
)

func TestEnsureCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slotlease", "embedded-127.0.0.1-4222")
	keys, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string]bool{}
	for _, r := range config.Roles {
		path := config.AuthFile(dir, r)
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, want a 0600 file", path, err)
		}
		data, _ := os.ReadFile(path)
		seeds[string(data)] = true
		if !strings.HasPrefix(keys[r], "U") {
			t.Errorf("%s: public key %q", r, keys[r])
		}
	}
	if len(seeds) != len(config.Roles) {
		t.Error("roles share a seed")
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, want a 0700 directory", d, err)
		}
	}
	// A restart keeps the keys.
	again, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range config.Roles {
		if again[r] != keys[r] {
			t.Errorf("%s: key changed across restarts", r)
		}
	}
	// A seed others may read is refused, naming the file, never the seed.
	path := config.AuthFile(dir, config.RoleExecutor)
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = EnsureCredentials(dir)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "group or others") {
		t.Fatalf("group-readable seed: %v", err)
	}
	// Garbage in a seed file: refused with the fix.
	if err := os.WriteFile(path, []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureCredentials(dir); err == nil || !strings.Contains(err.Error(), "delete the directory") {
		t.Fatalf("garbage seed: %v", err)
	}
}

func TestStartServerIsSecureByDefault(t *testing.T) {
	if _, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "needs users") {
		t.Fatalf("a server with neither users nor Anonymous: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "auth")
	keys, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	users := EmbeddedUsers(keys, "lease")
	if _, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: users, Anonymous: true}); err == nil {
		t.Fatal("users and Anonymous together were accepted")
	}
	srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(0), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("anonymous client admitted")
	}
	nc, err := natsconn.Connect(srv.ClientURL(), natsconn.Auth{NKeySeed: config.AuthFile(dir, config.RoleManager), InboxPrefix: config.RoleManager.InboxPrefix()}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The users live in a named account with JetStream, and a system
	// account exists: what connect/disconnect advisories need.
	if acc, err := srv.LookupAccount(ManagerAccount); err != nil || !acc.JetStreamEnabled() {
		t.Fatalf("account %s: %v, JetStream enabled: %v", ManagerAccount, err, err == nil && acc.JetStreamEnabled())
	}
	if sys := srv.SystemAccount(); sys == nil || sys.Name != EmbeddedSystemAccount {
		t.Fatalf("system account: %v", sys)
	}
	ctx := t.Context()
	if _, err := OpenLeaseStore(ctx, nc, BucketConfig{Name: "lease_leases"}); err != nil {
		t.Fatalf("the manager cannot create its bucket: %v", err)
	}
}

// The manager hears the server's advisory when a client of the account
// disconnects, with the client's id and its server's id; executors and
// readers can neither forge one nor listen to them.
func TestEmbeddedDisconnectAdvisories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	keys, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: EmbeddedUsers(keys, "lease")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	connect := func(r config.Role, opts ...nats.Option) *nats.Conn {
		t.Helper()
		nc, err := natsconn.Connect(srv.ClientURL(), natsconn.Auth{NKeySeed: config.AuthFile(dir, r), InboxPrefix: r.InboxPrefix()}, t.Name(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	mgr := connect(config.RoleManager)
	advisories, err := mgr.SubscribeSync(ExecutorDisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []config.Role{config.RoleExecutor, config.RoleReader} {
		errs := make(chan error, 4)
		nc := connect(r, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if _, err := nc.SubscribeSync(ExecutorDisconnectSubject); err != nil {
			t.Fatal(err)
		}
		_ = nc.Publish(ExecutorDisconnectSubject, []byte(`{"client":{"id":1},"server":{"id":"forged"}}`))
		_ = nc.Flush()
		for want := 2; want > 0; want-- {
			select {
			case err := <-errs:
				if !strings.Contains(err.Error(), "Permissions Violation") {
					t.Fatalf("%s: %v, want a permissions violation", r, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: publishing or subscribing to the advisories was not refused", r)
			}
		}
	}
	// An executor's connection closes: the manager hears of it.
	exe := connect(config.RoleExecutor)
	cid, err := exe.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	server := exe.ConnectedServerId()
	exe.Close()
	for {
		msg, err := advisories.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no advisory for the closed connection: %v", err)
		}
		var ev struct {
			Server struct{ ID string } `json:"server"`
			Client struct {
				ID uint64 `json:"id"`
			} `json:"client"`
		}
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(msg.Data), "forged") {
			t.Fatalf("a forged advisory arrived: %s", msg.Data)
		}
		if ev.Client.ID == cid && ev.Server.ID == server {
			return
		}
	}
}
