package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
)

// The environment files are plain VAR=value lines, a value in single
// quotes where it holds more than letters, digits and ,./:=@+_-: what
// systemd's EnvironmentFile= reads, and what a shell sources with
//
//	set -a; . ./executor.env; set +a
//
// (set -a exports what the file sets).
const (
	LeasemgrEnv     = "leasemgr.env"
	ExecutorEnvFile = "executor.env" // the first executor's
	ReaderEnv       = "reader.env"
)

// envVar is one line of an environment file.
type envVar struct{ name, value string }

// envFiles writes every program's environment file.
func (w *writer) envFiles(o Options, url string) error {
	seed := func(name string) string { return filepath.Join(o.CredsDir, name) }
	mgr := []envVar{
		{config.EnvNATSURL, url},
		{config.EnvNATSNKey, seed(managerSeed)},
		// The job queue's administrator: leasemgr makes the queue and runs
		// its broker (docs/jobs.md, "The broker").
		{config.EnvJobsNATSNKey, seed(jobsAdminSeed)},
		// Fast release: the executors' disconnect advisories, exported by
		// SYS to the managers' account with their connection listing.
		{config.EnvDisconnectEvents, jetstream.ExecutorDisconnectSubject},
		{config.EnvReplicas, strconv.Itoa(replicas(o.Servers))},
		// The job queue's caps, per replica: the servers' conf lets the
		// executors' account store this on every replica.
		{config.EnvNATSExecutorsMaxStore, strconv.FormatInt(o.ExecutorsMaxStore, 10)},
	}
	if err := w.env(LeasemgrEnv, `every lease manager of this cluster (leasemgr run, one or two per node).
# Add per node: NODE_ID=<the node> POOL_CAPACITIES=<its pools>, e.g.
#   set -a; . ./leasemgr.env; set +a; NODE_ID=node1 POOL_CAPACITIES=gpu=1 leasemgr run`, mgr); err != nil {
		return err
	}
	for i, e := range o.Executors {
		vars := []envVar{
			{config.EnvNATSURL, url},
			{config.EnvNATSNKey, seed(ExecutorSeed(e))},
			// Its user may read replies under this prefix only.
			{config.EnvNATSInboxPrefix, ExecutorInbox(e)},
		}
		about := func(file string) string {
			return fmt.Sprintf(`executor %q (executor run, serve, submit, wait, jobs).
# Add NODE_ID=<the node whose pools it takes>, e.g.
#   set -a; . ./%s; set +a; NODE_ID=node1 executor run --pool gpu -- ./train.sh`, e, file)
		}
		if err := w.env(ExecutorEnv(e), about(ExecutorEnv(e)), vars); err != nil {
			return err
		}
		if i == 0 {
			if err := w.env(ExecutorEnvFile, about(ExecutorEnvFile)+"\n# The same as "+ExecutorEnv(e)+": the first executor's.", vars); err != nil {
				return err
			}
		}
	}
	return w.env(ReaderEnv, `a reader: leasemgr pools and watch, monitoring.
#   set -a; . ./reader.env; set +a; leasemgr pools --all`, []envVar{
		{config.EnvNATSURL, url},
		{config.EnvNATSNKey, seed(readerSeed)},
		{config.EnvNATSInboxPrefix, config.RoleReader.InboxPrefix()},
	})
}

// env writes one environment file (no secret in it: the seeds are files).
func (w *writer) env(name, about string, vars []envVar) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: the environment of %s\n# Written by leasemgr layout. Plain VAR=value lines: systemd's EnvironmentFile= reads them.\n", name, about)
	for _, v := range vars {
		fmt.Fprintf(&b, "%s=%s\n", v.name, envQuote(v.value))
	}
	return w.file(name, b.String(), 0o644)
}

// envQuote single-quotes v unless it is only letters, digits and
// ,./:=@+_- (a shell would expand the $ of $SYS.…). Values come from
// Options, whose paths withDefaults keeps free of quotes and newlines.
func envQuote(v string) string {
	if v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,./:=@+_-") == "" {
		return v
	}
	return "'" + v + "'"
}

// ReadEnvFile reads an environment file this package wrote as systemd's
// EnvironmentFile= does: VAR=value lines, single quotes around a value
// removed, nothing expanded, comments and blank lines skipped.
func ReadEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: not VAR=value", path, i+1)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = v[1 : len(v)-1]
		}
		m[k] = v
	}
	return m, nil
}
