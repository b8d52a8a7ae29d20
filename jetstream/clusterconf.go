package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/slotlease/slotlease/lease"
)

// ConfFile is one server's configuration file for a NATS cluster that
// runs slotlease's accounts layout (what `leasemgr layout` writes): the
// accounts, users, imports, exports and limits of the embedded server
// (authConfig, the one source of that layout), beside the server's own
// listen addresses, routes, store and lame-duck settings (lameduck.go). nats-server -c
// reads it.
type ConfFile struct {
	// Name is the server's name, unique in the cluster; Cluster the
	// cluster's name, the same on every server.
	Name, Cluster string
	// Listen is the client address, ClusterListen the routes' (host:port).
	Listen, ClusterListen string
	// Routes are the route addresses (host:port) of every server; its
	// own among them is ignored by the server. With one (a layout of one
	// server) the server is written standalone: no cluster block, whose
	// JetStream would wait for peers that never come and elect no meta
	// leader.
	Routes []string
	// RouteUser and RoutePassword are what a server must present to join
	// the cluster: without them anyone who reaches a route port could
	// join as a server and see every message.
	RouteUser, RoutePassword string
	// Monitor is the monitoring address (host:port, /healthz, /jsz); none
	// if empty.
	Monitor string
	// StoreDir, MaxMemory and MaxStore are JetStream's store and limits;
	// MaxConnections the server's client connections.
	StoreDir            string
	MaxMemory, MaxStore int64
	MaxConnections      int
	// Users are the clients, each in its role's account (EmbeddedUsers,
	// ExecutorUser, ReaderUser); SystemUsers the public nkeys of
	// operators' users in the system account.
	Users       []User
	SystemUsers []string
	// Prefix is the subject prefix; lease.DefaultPrefix if empty.
	Prefix string
	// Limits bound the executors' and readers' accounts. On a cluster
	// the executors' store cap counts every replica of the job queue.
	Limits AccountLimits
}

// The JSON shapes of a cluster server's own settings.
type (
	jsBlock struct {
		StoreDir  string `json:"store_dir"`
		MaxMemory int64  `json:"max_memory_store"`
		MaxFile   int64  `json:"max_file_store"`
	}
	routeAuth struct {
		User     string `json:"user"`
		Password string `json:"password"`
	}
	clusterBlock struct {
		Name          string    `json:"name"`
		Listen        string    `json:"listen"`
		Routes        []string  `json:"routes"`
		Authorization routeAuth `json:"authorization"`
		// NoAdvertise keeps clients on the servers NATS_URL lists.
		NoAdvertise bool `json:"no_advertise"`
	}
)

// Encode returns the configuration file's text: a header of comments,
// then JSON, which nats-server's configuration parser reads.
func (f ConfFile) Encode() (string, error) {
	if f.Name == "" || f.Cluster == "" || f.Listen == "" || f.ClusterListen == "" || f.StoreDir == "" {
		return "", errors.New("jetstream: cluster conf: name, cluster, listen, cluster listen and store directory are required")
	}
	if len(f.Users) == 0 {
		return "", errors.New("jetstream: cluster conf: no users (a cluster of this layout admits no anonymous client)")
	}
	if f.RouteUser == "" || f.RoutePassword == "" {
		return "", errors.New("jetstream: cluster conf: routes need a user and password")
	}
	if f.Prefix == "" {
		f.Prefix = lease.DefaultPrefix
	}
	limits := f.Limits.withDefaults()
	if err := limits.check(f.MaxStore, f.MaxConnections); err != nil {
		return "", err
	}
	top, err := authSection(f.Users, f.Prefix, limits)
	if err != nil {
		return "", err
	}
	accounts := top["accounts"].(map[string]account)
	sys := accounts[EmbeddedSystemAccount]
	for _, k := range f.SystemUsers {
		if !nkeys.IsValidPublicUserKey(k) {
			return "", errors.New("jetstream: cluster conf: a system user's key is not a public user nkey")
		}
		sys.Users = append(sys.Users, confUser{NKey: k})
	}
	accounts[EmbeddedSystemAccount] = sys
	routes := make([]string, len(f.Routes))
	for i, r := range f.Routes {
		routes[i] = fmt.Sprintf("nats-route://%s:%s@%s", f.RouteUser, f.RoutePassword, r)
	}
	top["server_name"] = f.Name
	top["listen"] = f.Listen
	top["jetstream"] = jsBlock{StoreDir: f.StoreDir, MaxMemory: f.MaxMemory, MaxFile: f.MaxStore}
	top["max_connections"] = f.MaxConnections
	if len(routes) > 1 {
		top["cluster"] = clusterBlock{Name: f.Cluster, Listen: f.ClusterListen, Routes: routes,
			Authorization: routeAuth{User: f.RouteUser, Password: f.RoutePassword}, NoAdvertise: true}
	}
	if f.Monitor != "" {
		top["http"] = f.Monitor
	}
	// Lame-duck mode (SIGUSR2) for rolling restarts: lameduck.go.
	top["lame_duck_duration"] = confLameDuck(LameDuckDuration).String()
	top["lame_duck_grace_period"] = LameDuckGracePeriod.String()
	body, err := encodeConfig(top, "  ")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# %s: NATS server %s of cluster %q, slotlease's accounts layout
# (docs/security.md, "The layout"), written by leasemgr layout. Start it with
#   nats-server -c %s.conf
# It holds the routes' password: keep it private (0600).
`, f.Name, f.Name, f.Cluster, f.Name)
	b.WriteString(body)
	return b.String(), nil
}

// minConfLameDuck is the shortest lame_duck_duration nats-server's
// configuration parser takes (v2.15.2 refuses less; options set in Go, as
// the embedded servers' are, are not checked).
const minConfLameDuck = 30 * time.Second

// confLameDuck is d as a configuration file may say it: at least
// minConfLameDuck. The server closes its clients at most a second apart
// and exits after the last, so the longer duration lengthens the stop only
// of a server with more clients than seconds to spread them over.
func confLameDuck(d time.Duration) time.Duration { return max(d, minConfLameDuck) }
