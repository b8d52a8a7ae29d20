package integration

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/asuser"
	"github.com/slotlease/slotlease/test/debpkg"
)

// Issue 41: `executor run --memory 512M` starts the runtimes agents use on
// this host, whatever its cgroups, as root and as an ordinary user: before,
// where the cgroup v2 memory controller was not delegated (a cgroup v1 or
// hybrid host, as here), the limit was RLIMIT_AS and `-- node -e 1` died
// reserving its heap, `-- go version` reserving page summaries. Root gets
// the cgroup v1 controller where there is one; a user, RLIMIT_DATA and the
// executor's watch of the tree's resident memory. A run whose processes
// hold more than the limit in all is stopped, and the executor says so
// (exit 137, naming the memory limit).
func TestRuntimesRunUnderMemoryLimit(t *testing.T) {
	t.Parallel()
	node := debpkg.Tool{Path: "/usr/bin/node", Pkg: "nodejs", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the Node.js worker under a memory limit"}.Ensure(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go on PATH: %v", err)
	}
	asEachUser(t, 42221, "mem", "p=2", func(t *testing.T, u *asuser.User, env []string, httpAddr string) {
		startManagerAs(t, u, env, httpAddr)
		run := func(args ...string) (int, string) {
			p := startAs(t, u, env, "executor", append([]string{"run", "--pool", "p"}, args...)...)
			return p.Wait(t, 2*time.Minute), p.Output()
		}
		for name, argv := range map[string][]string{
			"node": {node, "-e", "const b = Buffer.alloc(64 << 20, 1); console.log('node ran', b.length)"},
			"go":   {goBin, "version"},
		} {
			if code, out := run(append([]string{"--memory", "512M", "--"}, argv...)...); code != 0 {
				t.Errorf("executor run --memory 512M -- %s: exit %d:\n%s", name, code, out)
			}
		}
		code, out := run("--memory", "100M", "--", "sh", "-c",
			"for i in 1 2 3 4; do dd if=/dev/zero bs=41943040 count=1 2>/dev/null | sleep 60 & done; wait")
		if code != 137 || !strings.Contains(out, "the command was stopped by its memory limit") {
			t.Fatalf("four 40 MiB processes under --memory 100M: exit %d, want 137 and the memory limit named:\n%s", code, out)
		}
		t.Logf("over the limit: exit %d:\n%s", code, out)
	})
}
