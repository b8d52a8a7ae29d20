// Package layout writes the files of a secure slotlease cluster (leasemgr
// layout): one NATS server configuration per server with the accounts,
// users, imports, exports and limits of docs/security.md's layout (made by
// package jetstream, the one source of that layout), an nkey seed per
// user, and the environment of each program: the lease managers' with
// fast release on, each executor's, the readers'.
package layout

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/slotlease/slotlease/config"
)

// Options say what to write. Zero fields get Defaults' values.
type Options struct {
	// Out is the directory written; it must be empty or absent unless
	// Force.
	Out string
	// Servers is the number of NATS servers; 3 if zero, or the number of
	// Hosts if those are given.
	Servers int
	// Hosts are the servers' hosts, as clients and the other servers
	// reach them; every server on 127.0.0.1 if empty. Servers that share a
	// host get consecutive ports from the base ports.
	Hosts []string
	// Bind is the address the servers listen on for clients and routes
	// (e.g. 0.0.0.0); each server's host if empty.
	Bind string
	// ClientPort, ClusterPort and MonitorPort are the base ports: 4222,
	// 6222, 8222; -1 for no monitoring port.
	ClientPort, ClusterPort, MonitorPort int
	// MonitorBind is the address the monitoring port listens on:
	// 127.0.0.1 if empty. Its /connz and /subsz show every client, so keep
	// it from untrusted networks (0.0.0.0 for a Kubernetes probe).
	MonitorBind string
	// Executors name the executors, each with a user, seed and
	// environment of its own; "default" if empty.
	Executors []string
	// CredsDir is where the environment files say the seeds are: the
	// absolute Out/creds if empty. A relative directory stays relative
	// ("." names bare files, for systemd's $CREDENTIALS_DIRECTORY).
	CredsDir string
	// StoreDir holds each server's JetStream store, in StoreDir/nats-I:
	// the absolute Out/store if empty.
	StoreDir string
	// ClusterName is the NATS cluster's name; "slotlease" if empty.
	ClusterName string
	// ExecutorsMaxStore is the job queue's store per replica (the
	// executors' NATS_EXECUTORS_MAX_STORE); 2 GiB if zero. The executors'
	// account may store it on every replica.
	ExecutorsMaxStore int64
	// Force writes into a non-empty Out, replacing the files it writes
	// and keeping seeds already there (delete creds/ to make new ones).
	Force bool
}

// Defaults are what zero Options fields mean.
var Defaults = Options{
	Servers: 3, ClientPort: 4222, ClusterPort: 6222, MonitorPort: 8222,
	Executors: []string{"default"}, ClusterName: "slotlease", ExecutorsMaxStore: config.DefaultExecutorsMaxStore,
}

// The servers' fixed limits (docs/security.md, "Limits per account").
const (
	maxStore       = 10 << 30
	maxMemory      = 256 << 20
	maxConnections = 16384
	localhost      = "127.0.0.1"
)

// natsServer is one NATS server of the layout.
type natsServer struct {
	name                                 string
	host                                 string // as others reach it
	clientPort, clusterPort, monitorPort int
}

// withDefaults fills in zero fields and checks every option; errors name
// the flag of leasemgr layout.
func (o Options) withDefaults() (Options, error) {
	if o.Out == "" {
		return o, errors.New("--out: required: the directory to write the layout into")
	}
	if len(o.Hosts) > 0 {
		switch {
		case o.Servers == 0:
			o.Servers = len(o.Hosts)
		case o.Servers != len(o.Hosts):
			return o, fmt.Errorf("--hosts names %d hosts, --servers says %d: give one host per server", len(o.Hosts), o.Servers)
		}
		for i, h := range o.Hosts {
			if err := checkHost(h); err != nil {
				return o, fmt.Errorf("--hosts: host %d %q: %w", i+1, h, err)
			}
		}
	}
	if o.Servers == 0 {
		o.Servers = Defaults.Servers
	}
	if o.Servers < 1 || o.Servers > 32 {
		return o, fmt.Errorf("--servers %d: must be from 1 to 32 (3 or 5 for a cluster that survives a server's loss)", o.Servers)
	}
	if o.MonitorBind == "" {
		o.MonitorBind = localhost
	}
	for _, b := range []struct{ flag, v string }{{"--bind", o.Bind}, {"--monitor-bind", o.MonitorBind}} {
		if b.v != "" {
			if err := checkHost(b.v); err != nil {
				return o, fmt.Errorf("%s %q: %w", b.flag, b.v, err)
			}
		}
	}
	for _, p := range []struct {
		flag string
		v    *int
		def  int
		off  bool
	}{{"--client-port", &o.ClientPort, Defaults.ClientPort, false}, {"--cluster-port", &o.ClusterPort, Defaults.ClusterPort, false},
		{"--monitor-port", &o.MonitorPort, Defaults.MonitorPort, true}} {
		if *p.v == 0 {
			*p.v = p.def
		}
		if p.off && *p.v == -1 {
			continue
		}
		if *p.v < 1 || *p.v+o.Servers-1 > 65535 {
			return o, fmt.Errorf("%s %d: must be from 1 to %d for %d servers", p.flag, *p.v, 65536-o.Servers, o.Servers)
		}
	}
	if len(o.Executors) == 0 {
		o.Executors = Defaults.Executors
	}
	seen := map[string]bool{}
	for _, e := range o.Executors {
		if err := config.ValidToken(e); err != nil {
			return o, fmt.Errorf("--executors: name %q: %w", e, err)
		}
		if seen[e] {
			return o, fmt.Errorf("--executors: %q is named twice", e)
		}
		seen[e] = true
	}
	if o.ClusterName == "" {
		o.ClusterName = Defaults.ClusterName
	}
	if err := config.ValidToken(o.ClusterName); err != nil {
		return o, fmt.Errorf("--cluster-name %q: %w", o.ClusterName, err)
	}
	if o.ExecutorsMaxStore == 0 {
		o.ExecutorsMaxStore = Defaults.ExecutorsMaxStore
	}
	if r := int64(replicas(o.Servers)); o.ExecutorsMaxStore < config.MinExecutorsMaxStore || o.ExecutorsMaxStore > config.MaxExecutorsMaxStore || o.ExecutorsMaxStore*r >= maxStore {
		return o, fmt.Errorf("--executors-max-store %d: must be from 64MiB to 8GiB, and its %d replicas below the servers' store of 10GiB, whose rest is the managers'",
			o.ExecutorsMaxStore, r)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return o, fmt.Errorf("--out %q: %w", o.Out, err)
	}
	o.Out = out
	if o.CredsDir == "" {
		o.CredsDir = filepath.Join(o.Out, "creds")
	}
	o.CredsDir = filepath.Clean(o.CredsDir)
	if o.StoreDir == "" {
		o.StoreDir = filepath.Join(o.Out, "store")
	}
	if o.StoreDir, err = filepath.Abs(o.StoreDir); err != nil {
		return o, fmt.Errorf("--store-dir: %w", err)
	}
	for _, p := range []struct{ flag, path string }{{"--out", o.Out}, {"--creds-dir", o.CredsDir}, {"--store-dir", o.StoreDir}} {
		if strings.ContainsAny(p.path, "'\"\\$`\r\n\t") {
			return o, fmt.Errorf("%s %q: a path without quotes, backslashes, $, ` or control characters, please: it goes into configuration and environment files", p.flag, p.path)
		}
	}
	if _, err := o.servers(); err != nil {
		return o, err
	}
	return o, nil
}

// checkHost refuses what cannot be a host name or address.
func checkHost(h string) error {
	switch {
	case h == "":
		return errors.New("is empty")
	case strings.ContainsAny(h, " \t\r\n,/@[]\"'$#"):
		return errors.New(`must be a host name or an IP address, without a port, spaces or any of ,/@[]"'$#`)
	case strings.Contains(h, ":") && net.ParseIP(h) == nil:
		return errors.New("must be a host name or an IP address without a port")
	}
	return nil
}

// replicas is NATS_REPLICAS for n servers: 3 where there are 3 or more.
func replicas(n int) int { return min(3, n) }

// servers are the layout's servers: on their hosts (127.0.0.1 if none
// given), with the base ports, plus one for each earlier server on the
// same host. Two servers' ports never meet on one host.
func (o Options) servers() ([]natsServer, error) {
	out := make([]natsServer, o.Servers)
	onHost := map[string]int{}
	used := map[string]string{}
	for i := range out {
		h := localhost
		if len(o.Hosts) > 0 {
			h = o.Hosts[i]
		}
		k := onHost[h]
		onHost[h]++
		s := natsServer{name: fmt.Sprintf("nats-%d", i), host: h, clientPort: o.ClientPort + k, clusterPort: o.ClusterPort + k, monitorPort: -1}
		if o.MonitorPort != -1 {
			s.monitorPort = o.MonitorPort + k
		}
		for _, p := range []struct {
			what string
			port int
		}{{"client", s.clientPort}, {"cluster", s.clusterPort}, {"monitor", s.monitorPort}} {
			if p.port == -1 {
				continue
			}
			key := net.JoinHostPort(h, fmt.Sprint(p.port))
			if other, ok := used[key]; ok {
				return nil, fmt.Errorf("%s's %s port %s is also %s: pick base ports further apart (--client-port, --cluster-port, --monitor-port)", s.name, p.what, key, other)
			}
			used[key] = s.name + "'s " + p.what + " port"
		}
		out[i] = s
	}
	return out, nil
}
