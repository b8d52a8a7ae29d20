package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
)

// healthTimeout bounds the probe: a container runtime's health check
// (HEALTHCHECK --timeout) gives it about as long.
const healthTimeout = 10 * time.Second

// healthSetup: leasemgr health asks this host's leasemgr, at HTTP_ADDR,
// whether it is alive (/healthz) or, with --ready, whether it serves the
// node (/readyz), and exits 0 if so, 1 if not: a container image's
// HEALTHCHECK, which has no curl in an image of two static binaries.
func healthSetup(cmd *cobra.Command) action {
	ready := cmd.Flags().Bool("ready", false, "ask /readyz: ready only where this process serves the node (not standing by, NATS up)")
	addr := cmd.Flags().String("addr", "", "host:port of leasemgr's HTTP endpoint (default: HTTP_ADDR, else "+config.DefaultHTTPAddr+")")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("health takes no arguments, got %q", args)}
		}
		target, err := healthAddr(*addr, cmd.Flags().Changed("addr"))
		if err != nil {
			return usageError{err}
		}
		path := "/healthz"
		if *ready {
			path = "/readyz"
		}
		return probe(ctx, "http://"+target+path, stdout)
	}
}

// healthAddr is where to ask: --addr, else HTTP_ADDR, else its default;
// a listener on every interface (":8080", "0.0.0.0:8080", "[::]:8080")
// is asked on the loopback address.
func healthAddr(flag string, set bool) (string, error) {
	a := flag
	if !set {
		v, ok := os.LookupEnv(config.EnvHTTPAddr)
		switch {
		case !ok:
			a = config.DefaultHTTPAddr
		case v == "":
			return "", fmt.Errorf("%s is set empty: leasemgr serves no HTTP endpoint to ask (set --addr)", config.EnvHTTPAddr)
		default:
			a = v
		}
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || port == "" {
		return "", fmt.Errorf("address %q: want host:port", a)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// probe GETs url: 200 prints the body and is success; anything else is an
// error naming the status and the body (the reason /readyz gives).
func probe(ctx context.Context, url string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap()
		}
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, text)
	}
	_, err = fmt.Fprintln(stdout, text)
	return err
}
