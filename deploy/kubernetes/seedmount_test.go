package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/test/asuser"
	"github.com/slotlease/slotlease/test/harness"
)

// ports are this package's: 12000-12499 (harness.Ports).
var ports = &harness.Ports{Lo: 12000, Hi: 12500}

// checkSeedMount runs the real leasemgr as the DaemonSet's user on seeds
// laid out as the kubelet lays out the DaemonSet's Secret volume (its
// atomic writer: a timestamped directory, a ..data link to it and a link
// per key; with an fsGroup, everything of group fsGroup, directories
// setgid, the volume's root a sticky tmpfs, the files defaultMode with
// group read), and waits for it to serve: leasemgr takes seeds of root's
// that root shares with its group. With the files readable by others
// (defaultMode 0444) it must refuse them. Only root can lay out files of
// root's for another user, so this needs the test to run as root.
func checkSeedMount(t *testing.T, ds *workloadFacts, leasemgr, layout string) {
	if os.Geteuid() != 0 {
		t.Skip("the kubelet's Secret volume has root's files for the pod's user: only a test running as root can lay it out")
	}
	c := ds.container(t, "leasemgr")
	m := c.Mounts[credsDir]
	u := asuser.New(t, asuser.Plain, int(ds.RunAsUser), 0)
	if int64(u.GID) != ds.FSGroup {
		t.Fatalf("the DaemonSet's runAsUser %d and fsGroup %d differ; this check runs the user with its own group", ds.RunAsUser, ds.FSGroup)
	}
	exe := u.Executable(t, leasemgr)
	// A server admitting the two users, as the layout's configuration
	// does: the managers' and the executors' administrator.
	managerSeed, adminSeed := filepath.Join(layout, "creds", "manager.nk"), filepath.Join(layout, "creds", "jobs-admin.nk")
	var users []jetstream.User
	for role, seed := range map[config.Role]string{config.RoleManager: managerSeed, config.RoleExecutor: adminSeed} {
		pub, err := jetstream.EnsureSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, jetstream.User{Role: role, NKey: pub})
	}
	s, err := jetstream.StartServer(jetstream.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(t.TempDir(), "jetstream"), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	for _, tc := range []struct {
		mode   os.FileMode
		serves bool
	}{{os.FileMode(m.Mode), true}, {0o444, false}} {
		vol := secretVolume(t, int(ds.FSGroup), tc.mode, map[string][]byte{"manager.nk": readFile(t, managerSeed), "jobs-admin.nk": readFile(t, adminSeed)})
		port, err := ports.Free()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		cmd := u.Command([]string{"NODE_ID=seed-mount", "HTTP_ADDR=" + addr, "NATS_URL=" + s.ClientURL(), "NATS_REPLICAS=1", "POOL_CAPACITIES=default=1",
			"NATS_NKEY=" + filepath.Join(vol, "manager.nk"), "JOBS_NATS_NKEY=" + filepath.Join(vol, "jobs-admin.nk")}, exe, "run")
		var out harness.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if tc.serves {
			waitReady(t, addr, exited, &out)
			t.Logf("leasemgr as uid %d serves with the seeds mounted as the kubelet mounts them (files %04o root:%d)", u.UID, tc.mode, ds.FSGroup)
			_ = cmd.Process.Kill()
			<-exited
			continue
		}
		select {
		case err := <-exited:
			if err == nil || !strings.Contains(out.String(), "is readable by others (mode 0444)") {
				t.Errorf("leasemgr with seeds others may read: %v, said:\n%s\nwant a refusal naming the mode", err, out.String())
			}
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("leasemgr took seeds others may read (mode 0444); still running after 2 minutes:\n%s", out.String())
		}
	}
}

// secretVolume lays out files as the kubelet does a Secret volume with
// an fsGroup, in a directory the test's other user can reach, and returns
// the volume's root.
func secretVolume(t *testing.T, fsGroup int, mode os.FileMode, files map[string][]byte) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	vol := filepath.Join(base, "creds")
	ts := "..2026_12_05_13_00_00.000000001"
	must(t, os.Mkdir(vol, 0o755))
	must(t, os.Mkdir(filepath.Join(vol, ts), 0o755))
	for name, data := range files {
		p := filepath.Join(vol, ts, name)
		must(t, os.WriteFile(p, data, 0o600))
		must(t, os.Chown(p, 0, fsGroup))
		must(t, os.Chmod(p, mode))
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(vol, name)))
	}
	must(t, os.Symlink(ts, filepath.Join(vol, "..data")))
	for d, perm := range map[string]os.FileMode{vol: os.ModeSticky | os.ModeSetgid | 0o777, filepath.Join(vol, ts): os.ModeSetgid | 0o755} {
		must(t, os.Chown(d, 0, fsGroup))
		must(t, os.Chmod(d, perm))
	}
	return vol
}

// waitReady waits for leasemgr's /readyz to answer 200.
func waitReady(t *testing.T, addr string, exited <-chan error, out *harness.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		select {
		case err := <-exited:
			t.Fatalf("leasemgr exited (%v) before it was ready:\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("leasemgr not ready at %s within 2 minutes:\n%s", addr, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
