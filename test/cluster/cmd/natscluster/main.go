// Command natscluster runs a 3-node NATS JetStream cluster on 127.0.0.1 for
// demos and manual fault trials: embedded nats-servers, each with its own
// client port, route port and store.
//
//	natscluster                 all three servers in this process
//	natscluster -only 1         only server n1 (run three processes, one per
//	                            server, to kill -9 one of them)
//	natscluster -wait           wait until the cluster on -ports answers
//	                            JetStream requests, then exit
//
// It prints NATS_URL for the lease managers and runs until SIGINT or
// SIGTERM. Its servers admit anonymous clients: for trials only.
// scripts/cluster-demo.sh runs the secure layout instead (leasemgr layout
// and nats-server processes).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "natscluster:", err)
		os.Exit(1)
	}
}

// server is what this command needs of an embedded *server.Server
// (nothing but package jetstream imports nats-server).
type server interface {
	Shutdown()
	WaitForShutdown()
	ClientURL() string
	JetStreamIsLeader() bool
	JetStreamIsCurrent() bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("natscluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "slotlease-cluster"), "store root; server nI keeps its store in DIR/nI")
	ports := fs.String("ports", "4222,4223,4224", "client ports of n0,n1,n2")
	routes := fs.String("cluster-ports", "6222,6223,6224", "route ports of n0,n1,n2")
	only := fs.Int("only", -1, "run only this server (0, 1 or 2); -1 runs all three")
	debug := fs.Bool("debug", false, "server logs to stderr")
	wait := fs.Duration("wait", 0, "start nothing: wait up to this long until the cluster on -ports answers JetStream requests, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cp, err := parsePorts(*ports)
	if err != nil {
		return fmt.Errorf("-ports: %w", err)
	}
	rp, err := parsePorts(*routes)
	if err != nil {
		return fmt.Errorf("-cluster-ports: %w", err)
	}
	if len(cp) != len(rp) {
		return errors.New("-ports and -cluster-ports must list as many servers")
	}
	if *only >= len(cp) {
		return fmt.Errorf("-only %d: there are %d servers", *only, len(cp))
	}
	if *wait > 0 {
		var urls []string
		for _, p := range cp {
			urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(p))
		}
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		return waitJetStream(wctx, strings.Join(urls, ","))
	}
	routeAddrs := make([]string, len(rp))
	urls := make([]string, len(cp))
	for i := range rp {
		routeAddrs[i] = "127.0.0.1:" + strconv.Itoa(rp[i])
		urls[i] = "nats://127.0.0.1:" + strconv.Itoa(cp[i])
	}
	var started []server
	defer func() {
		for _, s := range started {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}()
	for i := range cp {
		if *only >= 0 && i != *only {
			continue
		}
		name := "n" + strconv.Itoa(i)
		s, err := jetstream.StartClusterServer(jetstream.ClusterServerConfig{
			ServerConfig: jetstream.ServerConfig{
				Listen: "127.0.0.1:" + strconv.Itoa(cp[i]), StoreDir: filepath.Join(*dir, name), Name: name, Debug: *debug,
				Anonymous: true, // a local test cluster
			},
			Cluster: "slotlease", ClusterListen: routeAddrs[i], Routes: routeAddrs,
		})
		if err != nil {
			return err
		}
		started = append(started, s)
		fmt.Fprintf(stdout, "%s: client %s, routes %s, store %s\n", name, s.ClientURL(), routeAddrs[i], filepath.Join(*dir, name))
	}
	if *only < 0 {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := waitCluster(wctx, started); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "JetStream cluster ready")
	}
	fmt.Fprintf(stdout, "NATS_URL=%s\n", strings.Join(urls, ","))
	<-ctx.Done()
	return nil
}

// waitCluster waits for a JetStream meta leader every server is current with.
func waitCluster(ctx context.Context, servers []server) error {
	for {
		leader, current := false, true
		for _, s := range servers {
			leader = leader || s.JetStreamIsLeader()
			current = current && s.JetStreamIsCurrent()
		}
		if leader && current {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no JetStream meta leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitJetStream waits until a client of url gets an answer to a JetStream
// account info request: a meta leader is elected.
func waitJetStream(ctx context.Context, url string) error {
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			js, _ := natsjs.New(nc)
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = js.AccountInfo(rctx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream on %s does not answer: %w", url, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func parsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}
