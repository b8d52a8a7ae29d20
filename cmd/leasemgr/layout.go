package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/layout"
)

// layoutSetup: leasemgr layout writes a secure cluster's files: the NATS
// servers' configurations, the users' seeds, and the programs'
// environment (package layout).
func layoutSetup(cmd *cobra.Command) action {
	flags := cmd.Flags()
	d := layout.Defaults
	var o layout.Options
	flags.StringVar(&o.Out, "out", "", "the directory to write (required; created 0700, must be empty unless --force)")
	flags.IntVar(&o.Servers, "servers", 0, fmt.Sprintf("NATS servers (default %d, or one per --hosts entry)", d.Servers))
	flags.StringSliceVar(&o.Hosts, "hosts", nil, "the servers' hosts, comma-separated, as clients and the other servers reach them (default 127.0.0.1 for all; servers sharing a host get consecutive ports)")
	flags.StringVar(&o.Bind, "bind", "", "the address the servers listen on, e.g. 0.0.0.0 (default each server's host)")
	flags.IntVar(&o.ClientPort, "client-port", d.ClientPort, "client port (the first, for servers sharing a host)")
	flags.IntVar(&o.ClusterPort, "cluster-port", d.ClusterPort, "route port")
	flags.IntVar(&o.MonitorPort, "monitor-port", d.MonitorPort, "monitoring port (/healthz, /jsz); -1 for none")
	flags.StringVar(&o.MonitorBind, "monitor-bind", "127.0.0.1", "the address the monitoring port listens on (its /connz shows every client: keep it off untrusted networks)")
	flags.StringSliceVar(&o.Executors, "executors", d.Executors, "the executors' names, comma-separated: a user, seed and environment file each")
	flags.StringVar(&o.CredsDir, "creds-dir", "", "where the environment files say the seeds are (default OUT/creds, absolute; a relative one stays relative, \".\" names bare files for systemd's $CREDENTIALS_DIRECTORY)")
	flags.StringVar(&o.StoreDir, "store-dir", "", "the servers' JetStream stores, one in STORE-DIR/nats-I each (default OUT/store)")
	flags.StringVar(&o.ClusterName, "cluster-name", d.ClusterName, "the NATS cluster's name")
	flags.Int64Var(&o.ExecutorsMaxStore, "executors-max-store", d.ExecutorsMaxStore, "the job queue's store per replica in bytes (NATS_EXECUTORS_MAX_STORE; the executors' account may store it on every replica)")
	flags.BoolVar(&o.Force, "force", false, "write into a non-empty --out, replacing its files and keeping its seeds (delete OUT/creds to make new ones)")
	_ = cmd.MarkFlagDirname("out")
	_ = cmd.MarkFlagDirname("creds-dir")
	_ = cmd.MarkFlagDirname("store-dir")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(_ context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("layout takes no arguments, got %q", args)}
		}
		if o.Out == "" {
			return usageError{fmt.Errorf("--out: required: the directory to write the layout into")}
		}
		res, err := layout.Generate(o)
		var bad *layout.OptionError
		if errors.As(err, &bad) {
			return usageError{err}
		}
		if err != nil {
			return err
		}
		printLayout(stdout, res)
		return nil
	}
}

// printLayout lists what was written and what to do next.
func printLayout(w io.Writer, res *layout.Result) {
	fmt.Fprintf(w, "wrote %s:\n", res.Dir)
	for _, f := range res.Files {
		fmt.Fprintf(w, "  %s\n", f)
	}
	fmt.Fprintf(w, `
Next (docs/cluster.md, "A secure cluster"):
  nats-server -c %s/%s     # on each server's host, one per conf
  set -a; . %s/%s; set +a; NODE_ID=node1 POOL_CAPACITIES=gpu=1 leasemgr run
  set -a; . %s/%s; set +a; NODE_ID=node1 executor run --pool gpu -- ./work.sh
NATS_URL=%s
Copy nats/ to the servers, creds/ and the .env files to the nodes (each executor needs only its own seed).
`, res.Dir, strings.Replace(res.Servers[0], "nats-0", "nats-I", 1), res.Dir, layout.LeasemgrEnv, res.Dir, layout.ExecutorEnvFile, res.URL)
}
