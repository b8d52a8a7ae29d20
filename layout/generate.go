package layout

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
)

// Result is what Generate wrote.
type Result struct {
	// Dir is the layout's directory (absolute); Files the files written,
	// relative to it, in the order written.
	Dir   string
	Files []string
	// URL is NATS_URL for every client: all the servers.
	URL string
	// Servers names the servers' configurations (nats/nats-I.conf).
	Servers []string
}

// The layout's credentials: one nkey seed file each under creds/.
const (
	managerSeed   = "manager.nk"
	jobsAdminSeed = "jobs-admin.nk"
	readerSeed    = "reader.nk"
	sysSeed       = "sys.nk"
	// routeSecret keeps the routes' password across --force runs, so
	// that confs written again still route to servers running the old.
	routeSecret = "nats/route-password"
	routeUser   = "slotlease-route"
)

// ExecutorSeed is executor name's seed file under creds/.
func ExecutorSeed(name string) string { return "executor-" + name + ".nk" }

// ExecutorInbox is executor name's NATS_INBOX_PREFIX: the only inbox its
// user may read.
func ExecutorInbox(name string) string { return "_INBOX_executor_" + name }

// ExecutorEnv is executor name's environment file.
func ExecutorEnv(name string) string { return "executor-" + name + ".env" }

// Generate writes the layout o describes into o.Out.
func Generate(o Options) (*Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, &OptionError{err}
	}
	if err := prepare(o.Out, o.Force); err != nil {
		return nil, err
	}
	servers, err := o.servers()
	if err != nil {
		return nil, err
	}
	w := &writer{dir: o.Out, res: &Result{Dir: o.Out}}
	keys, err := w.seeds(o.Executors)
	if err != nil {
		return nil, err
	}
	password, err := w.routePassword()
	if err != nil {
		return nil, err
	}
	p := lease.DefaultPrefix
	users := []jetstream.User{
		{Role: config.RoleManager, NKey: keys[managerSeed]},
		{Role: config.RoleExecutor, NKey: keys[jobsAdminSeed]}, // every right in the executors' account
		jetstream.ReaderUser(keys[readerSeed], config.RoleReader.InboxPrefix(), p),
	}
	for _, e := range o.Executors {
		users = append(users, jetstream.ExecutorUser(keys[ExecutorSeed(e)], ExecutorInbox(e), p))
	}
	var routes, urls []string
	for _, s := range servers {
		routes = append(routes, net.JoinHostPort(s.host, strconv.Itoa(s.clusterPort)))
		urls = append(urls, "nats://"+net.JoinHostPort(s.host, strconv.Itoa(s.clientPort)))
	}
	w.res.URL = strings.Join(urls, ",")
	for i, s := range servers {
		bind := cmp.Or(o.Bind, s.host)
		f := jetstream.ConfFile{
			Name: s.name, Cluster: o.ClusterName,
			Listen:        net.JoinHostPort(bind, strconv.Itoa(s.clientPort)),
			ClusterListen: net.JoinHostPort(bind, strconv.Itoa(s.clusterPort)),
			Routes:        routes, RouteUser: routeUser, RoutePassword: password,
			StoreDir:  filepath.Join(o.StoreDir, s.name),
			MaxMemory: maxMemory, MaxStore: maxStore, MaxConnections: maxConnections,
			Users: users, SystemUsers: []string{keys[sysSeed]}, Prefix: p,
			Limits: jetstream.AccountLimits{ExecutorStore: o.ExecutorsMaxStore * int64(replicas(o.Servers))},
		}
		if s.monitorPort != -1 {
			f.Monitor = net.JoinHostPort(o.MonitorBind, strconv.Itoa(s.monitorPort))
		}
		text, err := f.Encode()
		if err != nil {
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		name := filepath.Join("nats", s.name+".conf")
		if err := w.file(name, text, 0o600); err != nil {
			return nil, err
		}
		w.res.Servers = append(w.res.Servers, name)
	}
	if err := w.envFiles(o, w.res.URL); err != nil {
		return nil, err
	}
	return w.res, nil
}

// OptionError is a bad option: a usage error.
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// prepare makes dir, private; one that holds anything already is refused
// unless force.
func prepare(dir string, force bool) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("--out %s: %w", dir, err)
	case len(entries) > 0 && !force:
		return &OptionError{fmt.Errorf("--out %s: is not empty (it holds %s): pick a new directory, or add --force to write the layout into it again (its seeds in creds/ are kept)", dir, entries[0].Name())}
	}
	for _, d := range []string{dir, filepath.Join(dir, "nats"), filepath.Join(dir, "creds")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// writer writes the layout's files into dir and lists them in res.
type writer struct {
	dir string
	res *Result
}

// file writes name (relative to dir) with mode, replacing what was there.
func (w *writer) file(name, text string, mode fs.FileMode) error {
	path := filepath.Join(w.dir, name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // whatever the umask
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	w.res.Files = append(w.res.Files, name)
	return nil
}

// seeds makes (or keeps) every user's seed under creds/ and returns the
// public keys by file name.
func (w *writer) seeds(executors []string) (map[string]string, error) {
	names := []string{managerSeed, jobsAdminSeed, readerSeed, sysSeed}
	for _, e := range executors {
		names = append(names, ExecutorSeed(e))
	}
	keys := map[string]string{}
	for _, n := range names {
		pub, err := jetstream.EnsureSeed(filepath.Join(w.dir, "creds", n))
		if err != nil {
			return nil, fmt.Errorf("creds/%s: %w", n, err)
		}
		keys[n] = pub
		w.res.Files = append(w.res.Files, filepath.Join("creds", n))
	}
	return keys, nil
}

// routePassword is the routes' password: the one a former run kept, else
// a fresh one (rand.Text: 26 letters and digits, 130 bits).
func (w *writer) routePassword() (string, error) {
	path := filepath.Join(w.dir, routeSecret)
	if b, err := os.ReadFile(path); err == nil {
		if p := strings.TrimSpace(string(b)); len(p) >= 26 && strings.Trim(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") == "" {
			return p, nil
		}
	}
	p := rand.Text()
	return p, w.file(routeSecret, p+"\n", 0o600)
}
