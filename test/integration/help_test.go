package integration

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/raceexit"
)

// runHelp runs a binary of binDir with args and returns its stdout,
// stderr and exit code.
func runHelp(t *testing.T, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), raceexit.Env()}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	var ee *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// Every command's -h and --help exits 0 and prints, on stdout, the
// command's usage and every variable the program reads (issue 31); the
// top-level help of each binary lists every variable it reads.
func TestHelpIsCompleteAndExitsZero(t *testing.T) {
	t.Parallel()
	executorVars := config.VarNames(config.ReadByClients | config.ReadByExecutor)
	clientVars := config.VarNames(config.ReadByClients)
	managerVars := config.VarNames(config.ReadByManager)
	for _, tt := range []struct {
		bin  string
		args []string
		says string
		vars []string
	}{
		{"executor", []string{"help"}, "usage: executor COMMAND", executorVars},
		{"leasemgr", []string{"help"}, "usage: leasemgr [command]", config.VarNames(config.ReadByManager | config.ReadByClients)},
		{"leasemgr", []string{"run", "--help"}, "usage: leasemgr [run]", managerVars},
		{"leasemgr", []string{"pools", "--help"}, "usage: leasemgr pools", clientVars},
		{"leasemgr", []string{"watch", "-h"}, "usage: leasemgr watch", clientVars},
		{"leasemgr", []string{"resize", "--help"}, "usage: leasemgr resize", clientVars},
	} {
		t.Run(tt.bin+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := runHelp(t, tt.bin, tt.args...)
			if code != 0 || errOut != "" || !strings.Contains(out, tt.says) {
				t.Fatalf("exit %d, stderr %q, want 0 and %q on stdout:\n%s", code, errOut, tt.says, out)
			}
			for _, v := range tt.vars {
				if !strings.Contains(out, "  "+v+" ") && !strings.Contains(out, "  "+v+"\n") {
					t.Errorf("does not list %s", v)
				}
			}
		})
	}
	// Each command lists every client's variable and the executor's own it
	// reads, and no other.
	own := map[string][]string{"run": {config.EnvExecutorUnconfined}, "serve": {config.EnvExecutorUnconfined, config.EnvExecutorMetricsAddr}}
	for _, cmd := range []string{"run", "submit", "serve", "status", "jobs", "wait", "cancel", "purge"} {
		for _, flag := range []string{"-h", "--help"} {
			t.Run("executor "+cmd+" "+flag, func(t *testing.T) {
				out, errOut, code := runHelp(t, "executor", cmd, flag)
				if code != 0 || errOut != "" || !strings.Contains(out, "usage: executor "+cmd) || !strings.Contains(out, "flags:") {
					t.Fatalf("exit %d, stderr %q, want 0 with the usage and flags on stdout:\n%s", code, errOut, out)
				}
				for _, v := range executorVars {
					listed := strings.Contains(out, "  "+v+" ") || strings.Contains(out, "  "+v+"\n")
					if want := slices.Contains(clientVars, v) || slices.Contains(own[cmd], v); listed != want {
						t.Errorf("lists %s: %v, want %v", v, listed, want)
					}
				}
			})
		}
	}
	// A bad flag is still a usage error, on stderr.
	if _, errOut, code := runHelp(t, "executor", "run", "--no-such-flag"); code != 2 || !strings.Contains(errOut, `Run "executor run -h"`) {
		t.Errorf("executor run --no-such-flag: exit %d, want 2, stderr:\n%s", code, errOut)
	}
}

// leasemgr watch -h names every event kind it can filter by, and an
// unknown kind is refused naming them.
func TestWatchKinds(t *testing.T) {
	t.Parallel()
	out, _, _ := runHelp(t, "leasemgr", "watch", "-h")
	for _, k := range lease.EventKinds {
		if !strings.Contains(out, string(k)) {
			t.Errorf("leasemgr watch -h does not name the kind %q:\n%s", k, out)
		}
	}
	_, errOut, code := runHelp(t, "leasemgr", "watch", "--kind", "grant")
	if code != 2 || !strings.Contains(errOut, `--kind "grant": want one of requested, queued, granted`) {
		t.Errorf("leasemgr watch --kind grant: exit %d, want 2 naming the kinds:\n%s", code, errOut)
	}
}

// leasemgr resize's name=capacity is a command-line argument, and its
// error says so, not POOL_CAPACITIES (issue 31).
func TestResizeNamesTheArgument(t *testing.T) {
	t.Parallel()
	_, errOut, code := runHelp(t, "leasemgr", "resize", "prio=0")
	if code != 2 || !strings.Contains(errOut, `argument "prio=0": capacity must be a positive integer`) || strings.Contains(errOut, "POOL_CAPACITIES") {
		t.Errorf("leasemgr resize prio=0: exit %d, want 2 naming the argument:\n%s", code, errOut)
	}
}
