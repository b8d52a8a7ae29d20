package jetstream

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/natsconn"
)

// The executors' and readers' accounts get the caps of AccountLimits, and
// the managers' none: an executor's writes, consumers and connections stop
// at its account's caps, a reader's connections at its own, and the
// managers carry on.
func TestAccountLimits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	keys, err := EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	admin, adminAuth, err := NewJobsAdmin()
	if err != nil {
		t.Fatal(err)
	}
	limits := AccountLimits{ExecutorStore: 64 << 20, ExecutorConsumers: 2, ExecutorConnections: 3, ReaderConnections: 2}
	if _, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: EmbeddedUsers(keys, "lease"),
		MaxStore: 64 << 20, Limits: limits}); err == nil || !strings.Contains(err.Error(), "below the server's store") {
		t.Fatalf("an executors' cap leaving the managers nothing: %v", err)
	}
	if _, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: EmbeddedUsers(keys, "lease"),
		MaxConnections: 3 + 2 + ManagerConnections - 1, Limits: limits}); err == nil || !strings.Contains(err.Error(), "exceed the server's") {
		t.Fatalf("connection caps leaving the managers less than their room: %v", err)
	}
	srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Users: append(EmbeddedUsers(keys, "lease"), admin),
		MaxConnections: 3 + 2 + ManagerConnections, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	account := func(name string) *server.Account {
		a, err := srv.LookupAccount(name)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	want := server.JetStreamAccountLimits{MaxMemory: 0, MaxStore: 64 << 20, MaxStreams: ExecutorStreams, MaxConsumers: 2, MaxAckPending: -1, MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1}
	if got := account(ExecutorAccount).JetStreamUsage().Limits; got != want {
		t.Errorf("executors' JetStream limits %+v, want %+v", got, want)
	}
	if got := account(ManagerAccount).JetStreamUsage().Limits; got.MaxStore != -1 || got.MaxMemory != -1 {
		t.Errorf("managers' JetStream limits %+v, want none: they have the rest of the server's", got)
	}
	if account(ReaderAccount).JetStreamEnabled() {
		t.Error("readers have JetStream")
	}
	for name, n := range map[string]int{ExecutorAccount: 3, ReaderAccount: 2, ManagerAccount: -1} {
		if got := account(name).MaxActiveConnections(); got != n {
			t.Errorf("%s: at most %d connections, want %d", name, got, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(r config.Role, opts ...nats.Option) (*nats.Conn, error) {
		nc, err := natsconn.Connect(srv.ClientURL(), natsconn.Auth{NKeySeed: config.AuthFile(dir, r), InboxPrefix: r.InboxPrefix()}, t.Name(),
			append([]nats.Option{nats.MaxReconnects(0)}, opts...)...)
		if err == nil {
			t.Cleanup(nc.Close)
		}
		return nc, err
	}
	must := func(nc *nats.Conn, err error) *nats.Conn {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}

	// The administrator makes the job queue, sized to the cap; a fourth
	// stream, and any stream in memory, are refused.
	adminNC, err := natsconn.Connect(srv.ClientURL(), natsconn.Auth{}, t.Name(), adminAuth)
	if err != nil {
		t.Fatal(err)
	}
	defer adminNC.Close()
	if _, err := jobs.Open(ctx, adminNC, jobs.Config{MaxBytes: jobs.MaxBytesFor(64 << 20)}); err != nil {
		t.Fatal(err)
	}
	ajs, err := jetstream.New(adminNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateStream(ctx, jetstream.StreamConfig{Name: "fourth", Subjects: []string{"fourth"}, MaxBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "maximum number of streams") {
		t.Errorf("a fourth stream in the executors' account: %v", err)
	}

	// An executor fills the results bucket: refused at its cap, within
	// the account's.
	exe := must(connect(config.RoleExecutor))
	js, err := jetstream.New(exe)
	if err != nil {
		t.Fatal(err)
	}
	results := "$KV." + jobs.NamesFor("lease").Results + "."
	var fillErr error
	for i := 0; fillErr == nil; i++ {
		_, fillErr = js.Publish(ctx, fmt.Sprintf("%sjunk%d", results, i), make([]byte, 500_000))
	}
	if !strings.Contains(fillErr.Error(), "maximum bytes exceeded") {
		t.Errorf("filling the results bucket: %v, want the server's refusal", fillErr)
	}
	if used := account(ExecutorAccount).JetStreamUsage().Store; used > 64<<20 {
		t.Errorf("the executors' account holds %d bytes, over its cap", used)
	}
	mgr := must(connect(config.RoleManager))
	store, err := OpenLeaseStore(ctx, mgr, BucketConfig{Name: "lease_leaders"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, "node", []byte("still writes")); err != nil {
		t.Fatalf("the manager's write after the executor's: %v", err)
	}

	// Consumers: two on a stream, not three (made with the
	// administrator's rights: executors may make none of their own).
	for i := range 3 {
		_, err := ajs.CreateOrUpdateConsumer(ctx, "KV_"+jobs.NamesFor("lease").Dead, jetstream.ConsumerConfig{Durable: fmt.Sprintf("c%d", i)})
		if i < 2 && err != nil {
			t.Fatalf("consumer %d: %v", i, err)
		}
		if i == 2 && (err == nil || !strings.Contains(err.Error(), "maximum consumers limit reached")) {
			t.Fatalf("a third consumer on a stream: %v", err)
		}
	}

	// Connections: the executors' account holds the administrator's and
	// exe; one more, not two. The readers', two. The managers', more.
	must(connect(config.RoleExecutor))
	if _, err := connect(config.RoleExecutor); err == nil || !strings.Contains(err.Error(), "maximum account active connections exceeded") {
		t.Fatalf("a fourth connection in the executors' account: %v", err)
	}
	must(connect(config.RoleReader))
	must(connect(config.RoleReader))
	if _, err := connect(config.RoleReader); err == nil || !strings.Contains(err.Error(), "maximum account active connections exceeded") {
		t.Fatalf("a third reader's connection: %v", err)
	}
	for range ManagerConnections - 1 {
		must(connect(config.RoleManager))
	}
	// The server closes one connection more at once, so the client may
	// see its -ERR or only the closed socket.
	if _, err := connect(config.RoleManager); err == nil {
		t.Fatal("a connection over the server's max_connections was admitted")
	}
}
