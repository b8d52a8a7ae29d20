package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/raceexit"
)

// --version prints what the version command prints, exit 0, on both
// programs (issue 39).
func TestCLIVersionFlag(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"leasemgr", "executor"} {
		want, _, _ := runHelp(t, bin, "version")
		out, errOut, code := runHelp(t, bin, "--version")
		if code != 0 || errOut != "" || out != want || !strings.HasPrefix(out, bin+" ") {
			t.Errorf("%s --version: exit %d, stderr %q, stdout %q; want 0 and %q, as %s version", bin, code, errOut, out, want, bin)
		}
	}
}

// Flags may follow arguments (executor wait ID --timeout 1s is executor
// wait --timeout 1s ID), and "--" keeps every later flag for the
// command: run's and submit's (issue 39).
func TestCLIFlagsAnywhere(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "flagsanywhere", "gpu=1", "15s")
	startManager(t, env, httpAddr)

	// A job no executor serves: it stays queued, so a wait times out.
	const id = "flags-anywhere"
	if code, out := runExecutor(t, env, "submit", "--pool", "gpu", "--id", id, "--", "echo", "--slots", "9", "--id", "x", "--", "-x"); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"wait", "--timeout", "1s", id},
		{"wait", id, "--timeout", "1s"},
		{"wait", id, "--timeout=1s"},
	} {
		code, out := runExecutor(t, env, args...)
		if code != 124 || !strings.Contains(out, "1 of 1 job(s) have not ended") {
			t.Errorf("executor %s: exit %d, want 124 (--timeout passed):\n%s", strings.Join(args, " "), code, out)
		}
	}
	// The flags after "--" are the job's command's, untouched.
	p := start(t, env, "executor", "status", id, "--json")
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("status ID --json: exit %d\n%s", code, p.Output())
	}
	var rec struct {
		Spec struct {
			Command []string `json:"command"`
			Slots   int64    `json:"slots"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(p.Output()), &rec); err != nil {
		t.Fatalf("status ID --json: %v\n%s", err, p.Output())
	}
	if want := []string{"echo", "--slots", "9", "--id", "x", "--", "-x"}; !slices.Equal(rec.Spec.Command, want) || rec.Spec.Slots != 1 {
		t.Errorf("the job's command is %q with %d slot(s), want %q with 1", rec.Spec.Command, rec.Spec.Slots, want)
	}

	// executor run: the flags after "--" reach the command, the flag
	// before the command is the executor's.
	code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "sh", "-c", `echo "args: $*"`, "sh", "--timeout", "1s", "--pool", "nope", "-h")
	if code != 0 || !strings.Contains(out, "args: --timeout 1s --pool nope -h") {
		t.Errorf("run -- sh -c ... --timeout 1s --pool nope -h: exit %d, want 0 with the flags passed on:\n%s", code, out)
	}
	code, out = runExecutor(t, env, "run", "sleep", "30", "--pool", "gpu", "--timeout", "1s")
	if code != 124 {
		t.Errorf("run sleep 30 --pool gpu --timeout 1s: exit %d, want 124 (the executor's --timeout):\n%s", code, out)
	}
}

// A flag a command does not know after its arguments is a usage error
// that says where a command's own flags go; nothing is run.
func TestCLIUnknownFlagAfterArguments(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	_, errOut, code := runHelp(t, "executor", "run", "--pool", "gpu", "sh", "-c", "touch "+marker)
	if code != 2 || !strings.Contains(errOut, `put "--" before arguments that begin with "-"`) || !strings.Contains(errOut, "usage: executor run") {
		t.Errorf("executor run --pool gpu sh -c ...: exit %d, want 2 with the hint:\n%s", code, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}

// Every usage line lists every flag of its command or says [flags], in
// each command's -h and in the programs' help (issue 39: executor --help
// and executor submit -h left out flags).
func TestCLIUsageLinesListEveryFlag(t *testing.T) {
	t.Parallel()
	commands := map[string][]string{
		"executor": {"run", "submit", "serve", "status", "jobs", "wait", "cancel", "purge", "version"},
		"leasemgr": {"run", "pools", "watch", "resize", "nats-context", "layout", "health", "version"},
	}
	flagName := regexp.MustCompile(`^\s+(?:-[a-z], )?--([a-z][a-z-]*)`)
	for bin, cmds := range commands {
		top, _, _ := runHelp(t, bin, "help")
		for _, cmd := range cmds {
			out, _, code := runHelp(t, bin, cmd, "-h")
			usage, rest, ok := strings.Cut(out, "\n\n")
			_, flags, hasFlags := strings.Cut(rest, "flags:\n")
			if code != 0 || !ok || !hasFlags || !strings.HasPrefix(usage, "usage: "+bin+" ") {
				t.Fatalf("%s %s -h: exit %d, want the usage line(s), a blank line, then flags:\n%s", bin, cmd, code, out)
			}
			flags, _, _ = strings.Cut(flags, "\n\n")
			for line := range strings.SplitSeq(flags, "\n") {
				m := flagName.FindStringSubmatch(line)
				if m == nil || m[1] == "help" {
					continue
				}
				if !strings.Contains(usage, "[flags]") && !strings.Contains(usage, "--"+m[1]) {
					t.Errorf("%s %s: the usage line neither names --%s nor says [flags]:\n%s", bin, cmd, m[1], usage)
				}
			}
			// The help lists the same line(s).
			for line := range strings.SplitSeq(strings.TrimPrefix(usage, "usage: "+bin+" "), "\n") {
				if line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), bin+" ")); !strings.Contains(top, line) {
					t.Errorf("%s help does not show %q of %s %s -h", bin, line, bin, cmd)
				}
			}
		}
	}
}

// Completion scripts are generated for bash, zsh and fish, from the
// commands and their flags; bash's loads, and completes subcommands,
// flags and flag values (issue 39).
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"leasemgr", "executor"} {
		for _, shell := range []string{"bash", "zsh", "fish"} {
			out, errOut, code := runHelp(t, bin, "completion", shell)
			if code != 0 || errOut != "" || !strings.Contains(out, bin) || len(out) < 1000 {
				t.Errorf("%s completion %s: exit %d, stderr %q, %d bytes:\n%.300s", bin, shell, code, errOut, len(out), out)
			}
		}
		cmd := exec.Command("bash", "-c", `source <("$BIN" completion bash)`)
		cmd.Env = []string{"BIN=" + filepath.Join(binDir, bin), "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), raceexit.Env()}
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("bash -c 'source <(%s completion bash)': %v, want no error and no output:\n%s", bin, err, out)
		}
	}
	// What the loaded script offers at a TAB. bash-completion's
	// _get_comp_words_by_ref, which the script calls, is stood in for on a
	// machine without the package.
	const script = `
[ -r /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion
declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() {
	cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
}
source <(executor completion bash) && source <(leasemgr completion bash) || exit 9
tab() {
	COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
	"__start_$1" 2>/dev/null
	echo "$* -> ${COMPREPLY[*]}"
}
tab executor wa
tab executor wait --ti
tab executor run --priority ""
tab executor jobs --state ""
tab leasemgr wat
tab leasemgr watch --kind ""
tab leasemgr nats-context --ro
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"), raceexit.Env()}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("completing: %v\n%s", err, out)
	}
	for _, want := range []string{
		"executor wa -> wait",
		"executor wait --ti -> --timeout",
		"executor run --priority  -> high normal low",
		"executor jobs --state  -> queued running failed succeeded dead cancelled",
		"leasemgr wat -> watch",
		"leasemgr watch --kind  -> * requested queued granted",
		"leasemgr nats-context --ro -> --role",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("completion does not offer %q:\n%s", want, out)
		}
	}
}

// A variable that looks like one of slotlease's but is not is reported at
// start, naming the variable meant, by both programs; the programs start
// all the same, and say nothing of their own variables (issue 39).
func TestCLIStrayVariableWarns(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "strays", "gpu=1", "15s")
	m := startManager(t, append(env, "POOL_CAPACITY=gpu=1"), httpAddr)
	if out := m.Output(); !strings.Contains(out, "leasemgr: warning: POOL_CAPACITY is set but is not a variable slotlease reads") ||
		!strings.Contains(out, "did you mean POOL_CAPACITIES?") || strings.Count(out, "did you mean") != 1 {
		t.Errorf("leasemgr with POOL_CAPACITY set: want one warning naming POOL_CAPACITIES:\n%s", out)
	}
	code, out := runExecutor(t, append(env, "LEASE_TTLS=3s"), "jobs")
	if code != 0 || !strings.Contains(out, "executor: warning: LEASE_TTLS is set but") || !strings.Contains(out, "did you mean LEASE_TTL?") {
		t.Errorf("executor jobs with LEASE_TTLS set: exit %d, want 0 and a warning naming LEASE_TTL:\n%s", code, out)
	}
	code, out = runExecutor(t, env, "jobs")
	if code != 0 || strings.Contains(out, "warning") {
		t.Errorf("executor jobs with slotlease's own variables: exit %d, want 0 and no warning:\n%s", code, out)
	}
	code, out = runManagerCmd(t, append(env, "lease_ttl=3s"), "pools")
	if code != 0 || !strings.Contains(out, "leasemgr: warning: lease_ttl is set but") || !strings.Contains(out, "did you mean LEASE_TTL?") {
		t.Errorf("leasemgr pools with lease_ttl set: exit %d, want 0 and a warning naming LEASE_TTL:\n%s", code, out)
	}
	// version reads no configuration: nothing to warn of.
	if code, out := runExecutor(t, append(env, "LEASE_TTLS=3s"), "version"); code != 0 || strings.Contains(out, "warning") {
		t.Errorf("executor version with LEASE_TTLS set: exit %d, want 0 and no warning:\n%s", code, out)
	}
}
