package integration

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
)

// startDown starts leasemgr against a NATS_URL where no server runs yet and
// waits until it has failed set-up twice and is still running.
func startDown(t *testing.T, port int, userinfo string) (*proc, string) {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m := start(t, []string{
		"NODE_ID=late", "POOL_CAPACITIES=gpu=2", "LEASE_TTL=4s", "LEADER_TTL=1s",
		fmt.Sprintf("NATS_URL=nats://%s127.0.0.1:%d", userinfo, port), "HTTP_ADDR=" + httpAddr,
	}, "leasemgr")
	eventually(t, 30*time.Second, "two failed set-up tries", func() bool {
		return strings.Count(m.Output(), "NATS set-up failed; retrying") >= 2
	})
	select {
	case <-m.done:
		t.Fatalf("leasemgr exited while NATS was down; output:\n%s", m.Output())
	default:
	}
	return m, httpAddr
}

// A manager started while its NATS server is down keeps retrying set-up
// and serves once the server is up, instead of exiting.
func TestManagerStartsWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	m, httpAddr := startDown(t, port, "")
	srv := harness.StartServerAt(t, fmt.Sprintf("127.0.0.1:%d", port), t.TempDir())
	eventually(t, 30*time.Second, "leasemgr to be ready once NATS is up", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	waitServing(t, srv.URL, "late")
	if !strings.Contains(m.Output(), "NATS set-up succeeded") {
		t.Fatalf("no log of the set-up that succeeded; output:\n%s", m.Output())
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; output:\n%s", code, m.Output())
	}
}

// SIGTERM while set-up is still retrying ends the manager cleanly. The
// retries' log lines do not show the password in NATS_URL.
func TestManagerStopsCleanlyDuringSetUpRetries(t *testing.T) {
	t.Parallel()
	m, _ := startDown(t, freePort(t), "mgr:s3cret-pw@")
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM during set-up; output:\n%s", code, m.Output())
	}
	if !strings.Contains(m.Output(), "shut down during NATS set-up") {
		t.Fatalf("no shutdown log; output:\n%s", m.Output())
	}
	if strings.Contains(m.Output(), "s3cret-pw") {
		t.Fatalf("the password of NATS_URL is in the log:\n%s", m.Output())
	}
}
