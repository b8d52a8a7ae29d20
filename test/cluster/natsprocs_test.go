package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/natsconn"
)

// natsProcs is a cluster of real nats-server processes, so that a server
// can be frozen (SIGSTOP) or crashed (SIGKILL), which an in-process server
// cannot.
type natsProcs struct {
	t                       *testing.T
	bin, dir                string
	clientPorts, routePorts []int
	procs                   []*process
	// advisories: clients land in an account of their own whose
	// disconnect advisories the system account exports to it, as on
	// leasemgr's embedded server, so managers can run fast release.
	advisories bool
}

// buildNATSServer builds nats-server from the module's own dependency.
func buildNATSServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building nats-server: %v\n%s", err, out)
	}
	return dir
}

// startNATSProcs starts size servers, clustered, on ports of this
// package's range. They take a moment to elect leaders: see Provision.
func startNATSProcs(t *testing.T, bin string, size int) *natsProcs {
	t.Helper()
	return startNATSProcsWith(t, bin, size, false)
}

// startNATSProcsAdvising is startNATSProcs with the disconnect advisories
// exported to the clients' account (natsProcs.advisories): managers set
// DISCONNECT_EVENTS to jetstream.AnonymousDisconnectSubject.
func startNATSProcsAdvising(t *testing.T, bin string, size int) *natsProcs {
	t.Helper()
	return startNATSProcsWith(t, bin, size, true)
}

func startNATSProcsWith(t *testing.T, bin string, size int, advisories bool) *natsProcs {
	t.Helper()
	c := &natsProcs{t: t, bin: bin, dir: t.TempDir(), procs: make([]*process, size), advisories: advisories}
	for range size {
		c.clientPorts = append(c.clientPorts, rangePort(t))
		c.routePorts = append(c.routePorts, rangePort(t))
	}
	for i := range size {
		c.start(i)
	}
	return c
}

// start starts server i on its ports and store (again, after a kill).
func (c *natsProcs) start(i int) {
	c.t.Helper()
	routes := make([]string, len(c.routePorts))
	for j, p := range c.routePorts {
		routes[j] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 67108864, max_file_store: 1073741824 }
cluster { name: slotlease, listen: 127.0.0.1:%d, routes: [%s], no_advertise: true }
`, i, c.clientPorts[i], filepath.Join(c.dir, fmt.Sprintf("n%d", i)), c.routePorts[i], strings.Join(routes, ", "))
	if c.advisories {
		conf += fmt.Sprintf(`system_account: %[1]s
no_auth_user: anonymous
accounts {
  %[2]s { jetstream: enabled, users: [{user: anonymous}], imports: [{stream: {account: %[1]s, subject: %[3]q}}] }
  %[1]s { exports: [{stream: %[3]q, accounts: [%[2]s]}] }
}
`, jetstream.EmbeddedSystemAccount, jetstream.ManagerAccount, jetstream.AnonymousDisconnectSubject)
	}
	path := filepath.Join(c.dir, fmt.Sprintf("n%d.conf", i))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		c.t.Fatal(err)
	}
	p := startProcess(c.t, fmt.Sprintf("nats n%d", i), c.bin, "nats-server", nil, "-c", path)
	c.procs[i] = p
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("%s log (last 4000 bytes):\n%s", p.name, tail(p.errOut.String(), 4000))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// URL lists every server, for clients that fail over between them.
func (c *natsProcs) URL() string {
	urls := make([]string, len(c.clientPorts))
	for i, p := range c.clientPorts {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// kill crashes server i (SIGKILL: no raft step-down, no flush).
func (c *natsProcs) kill(i int) {
	c.t.Helper()
	c.procs[i].signal(c.t, syscall.SIGKILL)
	<-c.procs[i].done
}

// provision creates the buckets once the cluster answers. A JetStream
// request sent before the servers have elected a meta leader may go
// unanswered, so each try gets a few seconds.
func (c *natsProcs) provision(ctx context.Context, st Settings) {
	c.t.Helper()
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := Provision(tctx, c.URL(), natsconn.Auth{}, st)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			c.t.Fatalf("the nats-server processes never took the buckets: %v", err)
		}
	}
}
