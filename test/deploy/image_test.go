package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/debpkg"
)

// imageConfig is what the test reads of `podman image inspect` (Docker's
// format, which keeps the health check).
type imageConfig struct {
	Config struct {
		User         string
		Env          []string
		Entrypoint   []string
		Cmd          []string
		Volumes      map[string]struct{}
		ExposedPorts map[string]struct{}
		Labels       map[string]string
	}
	Healthcheck struct{ Test []string }
}

// scripts/image.sh builds, without a registry (FROM scratch), an image of
// the two static binaries with the version stamped in: a non-root user,
// the store on a volume, a health check, leasemgr as the entrypoint. A
// container of it serves, is healthy, keeps its store on the volume (a
// resize outlives the container), stops cleanly on SIGTERM, and its
// executor runs.
func TestContainerImage(t *testing.T) {
	t.Parallel()
	podman := debpkg.Tool{Path: "/usr/bin/podman", Pkg: "podman", SkipEnv: "SLOTLEASE_SKIP_PODMAN", Test: "the container image test"}.Ensure(t)
	// runc, not crun: crun refuses a host whose cgroup v2 hierarchy holds
	// a controller beside v1 ("cgroups in hybrid mode"), as this test's
	// machines do; runc runs there and everywhere else.
	runc := debpkg.Tool{Path: "/usr/sbin/runc", Pkg: "runc", SkipEnv: "SLOTLEASE_SKIP_PODMAN", Test: "the container image test"}.Ensure(t)
	for line := range strings.SplitSeq(readFile(t, filepath.Join(repoRoot, "deploy", "container", "Containerfile")), "\n") {
		if from, ok := strings.CutPrefix(strings.TrimSpace(line), "FROM "); ok && from != "scratch" {
			t.Errorf("Containerfile: FROM %s: the build may pull nothing", from)
		}
	}

	// A storage of the test's own, on vfs (overlay needs what a test's
	// temp directory may not give), removed with it.
	store := t.TempDir()
	pod := []string{podman, "--storage-driver", "vfs", "--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--runtime", runc}
	p := func(args ...string) (string, int) {
		t.Helper()
		return run(t, nil, pod[0], append(slices.Clone(pod[1:]), args...)...)
	}
	t.Cleanup(func() {
		p("rm", "--force", "--all")
		p("volume", "rm", "--force", "--all")
	})

	start := time.Now()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), testVersion)
	cmd.Env = append(os.Environ(), "PODMAN="+strings.Join(pod, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh %s: %v\n%s", testVersion, err, out)
	}
	t.Logf("scripts/image.sh took %v", time.Since(start).Round(time.Second))
	image := "slotlease:" + testVersion

	out, code := p("image", "inspect", image)
	var inspected []imageConfig
	if err := json.Unmarshal([]byte(out), &inspected); code != 0 || err != nil || len(inspected) != 1 {
		t.Fatalf("podman image inspect: exit %d, %v\n%s", code, err, out)
	}
	c := inspected[0]
	if c.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.Config.User)
	}
	if _, ok := c.Config.Volumes["/var/lib/slotlease"]; !ok || !slices.Contains(c.Config.Env, "STATE_DIRECTORY=/var/lib/slotlease") {
		t.Errorf("volumes %v, env %q: want the volume /var/lib/slotlease as STATE_DIRECTORY", c.Config.Volumes, c.Config.Env)
	}
	if !slices.Equal(c.Healthcheck.Test, []string{"CMD", "/usr/local/bin/leasemgr", "health"}) {
		t.Errorf("health check %q, want leasemgr health", c.Healthcheck.Test)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/usr/local/bin/leasemgr"}) || !slices.Equal(c.Config.Cmd, []string{"run"}) {
		t.Errorf("entrypoint %q, cmd %q: want leasemgr run", c.Config.Entrypoint, c.Config.Cmd)
	}
	if _, ok := c.Config.ExposedPorts["8080/tcp"]; !ok || c.Config.Labels["org.opencontainers.image.version"] != testVersion {
		t.Errorf("exposed %v, labels %v: want 8080/tcp and the version %s", c.Config.ExposedPorts, c.Config.Labels, testVersion)
	}

	// podman asks the runtime for limits of its own (1048576 descriptors)
	// that a machine may not allow even root to set (the runtime then
	// refuses to start the container, "error setting rlimits"): this
	// machine's descriptor limit, and 4096 processes.
	var nofile unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	runArgs := []string{"run", "--detach", "--network", "none",
		"--ulimit", "nofile=" + strconv.FormatUint(nofile.Max, 10) + ":" + strconv.FormatUint(nofile.Max, 10),
		"--ulimit", "nproc=4096:4096",
		"--env", "NODE_ID=box", "--env", "POOL_CAPACITIES=gpu=1", "--volume", "slotlease-state:/var/lib/slotlease"}
	startBox := func(name string) {
		t.Helper()
		if out, code := p(append(append(slices.Clone(runArgs), "--name", name), image)...); code != 0 {
			t.Fatalf("podman run %s: exit %d\n%s", image, code, out)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out, code := p("healthcheck", "run", name)
			if code == 0 {
				break
			}
			if time.Now().After(deadline) {
				logs, _ := p("logs", name)
				t.Fatalf("%s not healthy within 2 minutes (%s); its log:\n%s", name, out, logs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	startBox("box1")
	if out, code := p("exec", "box1", "/usr/local/bin/leasemgr", "health", "--ready"); code != 0 || !strings.HasPrefix(out, "ready") {
		t.Errorf("leasemgr health --ready in the container: exit %d\n%s", code, out)
	}
	for _, prog := range []string{"leasemgr", "executor"} {
		if out, code := p("exec", "box1", "/usr/local/bin/"+prog, "--version"); code != 0 || !strings.HasPrefix(out, prog+" "+testVersion+" ") {
			t.Errorf("%s --version in the container: exit %d, want %s %s:\n%s", prog, code, prog, testVersion, out)
		}
	}
	if out, code := p("exec", "box1", "/usr/local/bin/leasemgr", "resize", "gpu=3"); code != 0 {
		t.Errorf("leasemgr resize gpu=3 in the container: exit %d\n%s", code, out)
	}
	// The store is on the volume, made by the image's user, private.
	mount, _ := p("volume", "inspect", "slotlease-state", "--format", "{{.Mountpoint}}")
	fi, err := os.Stat(filepath.Join(strings.TrimSpace(mount), "box", "jetstream"))
	if err != nil {
		t.Fatalf("the store on the volume: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store on the volume: uid %d, mode %04o; want 65532, 0700", st.Uid, fi.Mode().Perm())
	}

	// SIGTERM (podman stop) stops it cleanly; a new container on the
	// volume has the resize.
	if out, code := p("stop", "--time", "60", "box1"); code != 0 {
		t.Fatalf("podman stop: exit %d\n%s", code, out)
	}
	if out, _ := p("inspect", "box1", "--format", "{{.State.ExitCode}}"); strings.TrimSpace(out) != "0" {
		logs, _ := p("logs", "box1")
		t.Errorf("leasemgr's exit code after podman stop: %s, want 0; its log:\n%s", out, logs)
	}
	startBox("box2")
	out, code = p("exec", "box2", "/usr/local/bin/leasemgr", "pools", "--json")
	var np lease.NodePools
	if err := json.Unmarshal([]byte(out), &np); code != 0 || err != nil {
		t.Fatalf("leasemgr pools --json in the new container: exit %d, %v\n%s", code, err, out)
	}
	i := slices.IndexFunc(np.Pools, func(s lease.PoolStats) bool { return s.Name == "gpu" })
	if i < 0 || np.Pools[i].Capacity != 3 {
		t.Errorf("the new container's pools %+v: want gpu at 3, resized in the old one", np.Pools)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
