package layout

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/natsconn"
)

// Every conf the layout writes is one nats-server accepts, with the
// accounts, users, imports and limits of docs/security.md's layout, and
// the environment files are what the programs' own configuration loader
// accepts, with fast release on.
func TestGenerateDefault(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	res, err := Generate(Options{Out: dir, Executors: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"creds/manager.nk", "creds/jobs-admin.nk", "creds/reader.nk", "creds/sys.nk", "creds/executor-a.nk", "creds/executor-b.nk",
		"nats/route-password", "nats/nats-0.conf", "nats/nats-1.conf", "nats/nats-2.conf",
		"leasemgr.env", "executor-a.env", "executor.env", "executor-b.env", "reader.env"}
	if !slices.Equal(res.Files, want) {
		t.Errorf("files %q, want %q", res.Files, want)
	}
	if res.URL != "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224" {
		t.Errorf("URL %q", res.URL)
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{"", 0o700 | os.ModeDir}, {"creds", 0o700 | os.ModeDir}, {"nats", 0o700 | os.ModeDir}, {"creds/executor-a.nk", 0o600},
		{"nats/nats-0.conf", 0o600}, {"leasemgr.env", 0o644}} {
		fi, err := os.Stat(filepath.Join(dir, p.path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != p.mode {
			t.Errorf("%s: mode %v, want %v", p.path, fi.Mode(), p.mode)
		}
	}
	pub := func(seed string) string {
		k, err := config.UserSeedPublicKey(filepath.Join(dir, "creds", seed))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for i := range 3 {
		path := filepath.Join(dir, "nats", "nats-"+string(rune('0'+i))+".conf")
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("nats-server refuses %s: %v", path, err)
		}
		if opts.ServerName != "nats-"+string(rune('0'+i)) || opts.Port != 4222+i || opts.Cluster.Port != 6222+i || opts.HTTPPort != 8222+i || opts.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: server %q, ports %d %d %d on %s", path, opts.ServerName, opts.Port, opts.Cluster.Port, opts.HTTPPort, opts.HTTPHost)
		}
		if len(opts.Routes) != 3 || opts.Routes[0].User.Username() != routeUser || opts.Cluster.Username != routeUser || opts.Cluster.Password == "" {
			t.Errorf("%s: routes %v, cluster user %q: want 3 routes with the routes' user", path, opts.Routes, opts.Cluster.Username)
		}
		if !opts.JetStream || opts.StoreDir != filepath.Join(dir, "store", opts.ServerName) || opts.JetStreamMaxStore != 10<<30 || opts.MaxConn != 16384 {
			t.Errorf("%s: jetstream %v in %q, store %d, connections %d", path, opts.JetStream, opts.StoreDir, opts.JetStreamMaxStore, opts.MaxConn)
		}
		// nats-server takes no lame_duck_duration under 30 s from a file.
		if opts.LameDuckDuration != max(jetstream.LameDuckDuration, 30*time.Second) || opts.LameDuckGracePeriod != jetstream.LameDuckGracePeriod {
			t.Errorf("%s: lame duck %v, grace %v", path, opts.LameDuckDuration, opts.LameDuckGracePeriod)
		}
		if opts.SystemAccount != jetstream.EmbeddedSystemAccount || opts.NoAuthUser != "" {
			t.Errorf("%s: system account %q, no_auth_user %q", path, opts.SystemAccount, opts.NoAuthUser)
		}
		users := map[string]*server.NkeyUser{}
		for _, u := range opts.Nkeys {
			users[u.Nkey] = u
		}
		for seed, acc := range map[string]string{"manager.nk": jetstream.ManagerAccount, "jobs-admin.nk": jetstream.ExecutorAccount,
			"reader.nk": jetstream.ReaderAccount, "sys.nk": jetstream.EmbeddedSystemAccount, "executor-a.nk": jetstream.ExecutorAccount, "executor-b.nk": jetstream.ExecutorAccount} {
			u := users[pub(seed)]
			if u == nil || u.Account == nil || u.Account.Name != acc {
				t.Errorf("%s: %s's user is not in %s: %+v", path, seed, acc, u)
			}
		}
		if len(users) != 6 || len(opts.Users) != 0 {
			t.Errorf("%s: %d nkey users and %d others, want the 6 nkey users only", path, len(users), len(opts.Users))
		}
		for _, e := range []string{"a", "b"} {
			u := users[pub(ExecutorSeed(e))]
			if u == nil || u.Permissions == nil || !slices.Equal(u.Permissions.Subscribe.Allow[:1], []string{ExecutorInbox(e) + ".>"}) {
				t.Errorf("%s: executor %s may subscribe to %+v, want its own inbox first", path, e, u)
			}
		}
		for _, seed := range []string{"manager.nk", "jobs-admin.nk"} {
			if u := users[pub(seed)]; u != nil && u.Permissions != nil {
				t.Errorf("%s: %s has permissions %+v, want every right in its account", path, seed, u.Permissions)
			}
		}
	}
	checkAccounts(t, filepath.Join(dir, "nats", "nats-0.conf"))
	checkEnv(t, dir)
}

// checkAccounts reads the conf's JSON and checks the limits and the fast
// release imports and exports.
func checkAccounts(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	body := string(b[strings.Index(string(b), "{"):])
	var conf struct {
		Accounts map[string]struct {
			JetStream json.RawMessage  `json:"jetstream"`
			Limits    map[string]int64 `json:"limits"`
			Exports   []map[string]any `json:"exports"`
			Imports   []map[string]any `json:"imports"`
		} `json:"accounts"`
	}
	if err := json.Unmarshal([]byte(body), &conf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	exe := conf.Accounts[jetstream.ExecutorAccount]
	var js map[string]int64
	if err := json.Unmarshal(exe.JetStream, &js); err != nil {
		t.Fatalf("executors' jetstream block %s: %v", exe.JetStream, err)
	}
	// 2 GiB per replica, on 3 replicas.
	if js["max_file"] != 3*(2<<30) || js["max_mem"] != 0 || js["max_streams"] != 3 || js["max_consumers"] != 1000 {
		t.Errorf("executors' jetstream limits %v", js)
	}
	if exe.Limits["max_connections"] != 4096 || exe.Limits["max_subscriptions"] != 1000 {
		t.Errorf("executors' limits %v", exe.Limits)
	}
	if r := conf.Accounts[jetstream.ReaderAccount]; r.Limits["max_connections"] != 256 || r.JetStream != nil {
		t.Errorf("readers' limits %v, jetstream %s", r.Limits, r.JetStream)
	}
	str := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var sysExports, mgrImports []string
	for _, e := range conf.Accounts[jetstream.EmbeddedSystemAccount].Exports {
		sysExports = append(sysExports, str(e))
	}
	for _, i := range conf.Accounts[jetstream.ManagerAccount].Imports {
		mgrImports = append(mgrImports, str(i))
	}
	for _, s := range []string{jetstream.ExecutorDisconnectSubject, jetstream.ExecutorConnzSubject} {
		if !strings.Contains(strings.Join(sysExports, " "), s) || !strings.Contains(strings.Join(mgrImports, " "), s) {
			t.Errorf("%s: not exported by SYS (%v) and imported by the managers (%v)", s, sysExports, mgrImports)
		}
	}
}

// checkEnv loads leasemgr.env as leasemgr does.
func checkEnv(t *testing.T, dir string) {
	t.Helper()
	m := readEnv(t, filepath.Join(dir, LeasemgrEnv))
	m[config.EnvNodeID], m[config.EnvPoolCapacities] = "node1", "gpu=1"
	c, err := config.LoadManagerFrom(m)
	if err != nil {
		t.Fatalf("leasemgr.env: %v", err)
	}
	if c.DisconnectEvents != jetstream.ExecutorDisconnectSubject || !c.JobsAdmin() || c.Replicas != 3 || c.NATSNKey != filepath.Join(dir, "creds", "manager.nk") {
		t.Errorf("leasemgr.env: fast release %q, jobs admin %v, replicas %d, key %q", c.DisconnectEvents, c.JobsAdmin(), c.Replicas, c.NATSNKey)
	}
	if w := c.Warnings(); len(w) > 0 {
		t.Errorf("leasemgr.env: warnings %q", w)
	}
	for _, f := range []string{ExecutorEnvFile, ExecutorEnv("b"), ReaderEnv} {
		m := readEnv(t, filepath.Join(dir, f))
		c, err := config.LoadCommonFrom(m)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if c.NATSInboxPrefix == config.DefaultInboxPrefix {
			t.Errorf("%s: inbox %q: an executor's user may read its own inbox only", f, c.NATSInboxPrefix)
		}
	}
	if a, b := readEnv(t, filepath.Join(dir, ExecutorEnvFile)), readEnv(t, filepath.Join(dir, ExecutorEnv("a"))); !maps.Equal(a, b) {
		t.Errorf("executor.env %v is not executor-a.env %v", a, b)
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	m, err := ReadEnvFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A layout of one server writes it standalone: with a cluster block of
// its own route, its JetStream waited for peers and never served.
func TestGenerateOneServerServes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := Generate(Options{Out: dir, Servers: 1, MonitorPort: -1}); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats", "nats-0.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.Port != 0 || len(opts.Routes) != 0 {
		t.Fatalf("one server: cluster port %d, routes %v: want none", opts.Cluster.Port, opts.Routes)
	}
	opts.Port = -1 // any free port
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("the server did not start")
	}
	m := readEnv(t, filepath.Join(dir, LeasemgrEnv))
	m[config.EnvNodeID], m[config.EnvPoolCapacities] = "node1", "gpu=1"
	cfg, err := config.LoadManagerFrom(m)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(srv.ClientURL(), natsconn.Auth{NKeySeed: cfg.NATSNKey}, "layout-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The managers' account has JetStream at once: a bucket with one
	// replica, as leasemgr.env's NATS_REPLICAS says.
	if cfg.Replicas != 1 {
		t.Errorf("NATS_REPLICAS %d, want 1", cfg.Replicas)
	}
	if _, err := js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: "probe", Replicas: cfg.Replicas}); err != nil {
		t.Fatalf("a bucket on the lone server: %v", err)
	}
}

// Servers on hosts of their own get the base ports; servers sharing a
// host get the next ones. A relative --creds-dir stays relative.
func TestGenerateHosts(t *testing.T) {
	dir := t.TempDir()
	res, err := Generate(Options{Out: dir, Hosts: []string{"a.example", "b.example", "a.example"}, Bind: "0.0.0.0", CredsDir: ".", MonitorBind: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if res.URL != "nats://a.example:4222,nats://b.example:4222,nats://a.example:4223" {
		t.Errorf("URL %q", res.URL)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats", "nats-2.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "0.0.0.0" || opts.Port != 4223 || opts.Cluster.Port != 6223 || opts.HTTPHost != "0.0.0.0" || opts.HTTPPort != 8223 || len(opts.Routes) != 3 || opts.Routes[1].Host != "b.example:6222" {
		t.Errorf("nats-2: %s:%d, cluster %d, monitor %s:%d, routes %v", opts.Host, opts.Port, opts.Cluster.Port, opts.HTTPHost, opts.HTTPPort, opts.Routes)
	}
	if _, err := Generate(Options{Out: filepath.Join(t.TempDir(), "x"), MonitorPort: -1}); err != nil {
		t.Fatal(err)
	}
	m := readEnv(t, filepath.Join(dir, LeasemgrEnv))
	if m[config.EnvNATSNKey] != "manager.nk" || m[config.EnvJobsNATSNKey] != "jobs-admin.nk" {
		t.Errorf("--creds-dir .: %v", m)
	}
}

// --force writes again and keeps the seeds and the routes' password; without it a
// non-empty directory is refused.
func TestGenerateForceKeepsSeeds(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(Options{Out: dir}); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	seed, conf := read("creds/manager.nk"), read("nats/nats-0.conf")
	_, err := Generate(Options{Out: dir})
	var bad *OptionError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "is not empty") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a second run without --force: %v", err)
	}
	if _, err := Generate(Options{Out: dir, Force: true, Executors: []string{"default", "x"}}); err != nil {
		t.Fatal(err)
	}
	if read("creds/manager.nk") != seed {
		t.Error("--force made a new manager seed")
	}
	if c := read("nats/nats-0.conf"); !strings.Contains(c, routePasswordOf(conf)) {
		t.Error("--force made a new routes' password")
	}
	read("creds/executor-x.nk")
}

func routePasswordOf(conf string) string {
	_, rest, _ := strings.Cut(conf, `"password": "`)
	p, _, _ := strings.Cut(rest, `"`)
	return p
}

func TestGenerateRefusesBadOptions(t *testing.T) {
	for name, c := range map[string]struct {
		o    Options
		want string
	}{
		"no out":             {Options{}, "--out: required"},
		"too many servers":   {Options{Servers: 33}, "--servers 33: must be from 1 to 32"},
		"negative servers":   {Options{Servers: -1}, "--servers -1"},
		"hosts mismatch":     {Options{Servers: 3, Hosts: []string{"a", "b"}}, "--hosts names 2 hosts, --servers says 3"},
		"empty host":         {Options{Hosts: []string{"a", ""}}, `--hosts: host 2 "": is empty`},
		"host with port":     {Options{Hosts: []string{"a:4222"}}, "without a port"},
		"host with space":    {Options{Hosts: []string{"a b"}}, "must be a host name"},
		"bad bind":           {Options{Bind: "0.0.0.0:1"}, "--bind"},
		"bad monitor bind":   {Options{MonitorBind: "a b"}, "--monitor-bind"},
		"port too high":      {Options{ClientPort: 65535}, "--client-port 65535: must be from 1 to 65533 for 3 servers"},
		"negative port":      {Options{ClusterPort: -5}, "--cluster-port -5"},
		"ports collide":      {Options{ClientPort: 6223}, "nats-1's cluster port 127.0.0.1:6223 is also nats-0's client port"},
		"bad executor":       {Options{Executors: []string{"a.b"}}, `--executors: name "a.b": must contain only`},
		"executor twice":     {Options{Executors: []string{"a", "a"}}, `--executors: "a" is named twice`},
		"bad cluster name":   {Options{ClusterName: "a b"}, "--cluster-name"},
		"store too large":    {Options{ExecutorsMaxStore: 4 << 30}, "--executors-max-store 4294967296: must be from 64MiB to 8GiB, and its 3 replicas below"},
		"store too small":    {Options{ExecutorsMaxStore: 1 << 20}, "--executors-max-store 1048576"},
		"quote in creds dir": {Options{CredsDir: "/x'y"}, "--creds-dir"},
	} {
		t.Run(name, func(t *testing.T) {
			if c.o.Out == "" && name != "no out" {
				c.o.Out = filepath.Join(t.TempDir(), "l")
			}
			_, err := Generate(c.o)
			var bad *OptionError
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an option error with %q", err, c.want)
			}
			if c.o.Out != "" {
				if _, err := os.Stat(c.o.Out); err == nil {
					t.Errorf("a refused layout wrote %s", c.o.Out)
				}
			}
		})
	}
}
