package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/test/debpkg"
)

// Issue 41: `executor run --memory 512M` starts the runtimes agents use on
// this host, whatever its cgroups: before, where the memory controller was
// not delegated (a cgroup v1 host, as here), the limit was RLIMIT_AS and
// `-- node -e 1` died reserving its heap, `-- go version` reserving page
// summaries. A run that holds more than its limit in all is stopped, and
// the executor says so (exit 137 with the memory reason).
func TestRuntimesRunUnderMemoryLimit(t *testing.T) {
	t.Parallel()
	node := debpkg.Tool{Path: "/usr/bin/node", Pkg: "nodejs", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the Node.js worker under a memory limit"}.Ensure(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go on PATH: %v", err)
	}
	env, httpAddr := managerEnv(t, "mem", "p=2", "15s")
	startManager(t, env, httpAddr)
	for name, argv := range map[string][]string{
		"node": {node, "-e", "const b = Buffer.alloc(64 << 20, 1); console.log('node ran', b.length)"},
		"go":   {goBin, "version"},
	} {
		code, out := runExecutor(t, env, append([]string{"run", "--pool", "p", "--memory", "512M", "--"}, argv...)...)
		if code != 0 {
			t.Errorf("executor run --memory 512M -- %s: exit %d:\n%s", name, code, out)
		}
	}
	code, out := runExecutor(t, env, "run", "--pool", "p", "--memory", "100M", "--", "sh", "-c",
		"for i in 1 2 3 4; do dd if=/dev/zero bs=41943040 count=1 2>/dev/null | sleep 60 & done; wait")
	if code == 0 || !strings.Contains(out, "memory") {
		t.Fatalf("four 40 MiB processes under --memory 100M: exit %d, want a stop naming memory:\n%s", code, out)
	}
	t.Logf("over the limit: exit %d:\n%s", code, out)
}
