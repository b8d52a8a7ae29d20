//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requireConfine skips the test where confined runs are impossible, as
// the package's own check and an independent one agree; it fails it where
// only the package's check says so.
func requireConfine(t *testing.T) Confinement {
	t.Helper()
	c, err := CheckConfine()
	if err != nil {
		if namespacesAvailable(0) {
			t.Fatalf("PID and mount namespaces can be had here, but CheckConfine fails: %v", err)
		}
		t.Skipf("no namespaces here: %v", err)
	}
	return c
}

// openDir is a fresh directory anyone may enter and read (t.TempDir's are
// private): for what a confined worker, with ids of its own, must reach.
func openDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func runSh(t *testing.T, spec Spec, script string) (*Result, string) {
	t.Helper()
	spec.Command = []string{"sh", "-c", script}
	var out syncBuffer
	spec.Stdout, spec.Stderr = &out, &out
	res, err := Run(context.Background(), spec, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, out.String()
}

func TestHide(t *testing.T) {
	const secret = "hide-test-secret-7f3a"
	// Everything here is readable by anyone, the worker's own ids
	// included: only the hiding can keep the secrets from it.
	base := openDir(t)
	secretDir := filepath.Join(base, "creds")
	secretFile := filepath.Join(base, "key.nk")
	visible := filepath.Join(base, "visible")
	for _, d := range []string{secretDir, filepath.Join(secretDir, "sub"), visible} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(secretDir, "a.creds"), filepath.Join(secretDir, "sub", "b"), secretFile, filepath.Join(visible, "f")} {
		if err := os.WriteFile(f, []byte(secret), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Hidden through a symlink: the real directory must be covered.
	link := filepath.Join(base, "link")
	if err := os.Symlink(secretDir, link); err != nil {
		t.Fatal(err)
	}
	// Every way in the worker tries: direct reads, listing, the symlink,
	// /proc/<pid>/root of this (dumpable, same-user) test process, and
	// writing over the hidden file.
	script := fmt.Sprintf(`
cat %[1]s/a.creds %[1]s/sub/b %[2]s %[3]s/a.creds /proc/%[4]d/root%[1]s/a.creds /proc/%[4]d/root%[2]s 2>/dev/null
echo "listing:$(ls -A %[1]s)"
echo overwritten > %[2]s 2>/dev/null && echo wrote-file
touch %[1]s/new 2>/dev/null && echo wrote-dir
umount %[1]s 2>/dev/null && echo unmounted
cat %[5]s/f
`, secretDir, secretFile, link, os.Getpid(), visible)
	requireConfine(t)
	res, out := runSh(t, Spec{Hide: []string{link, secretFile, filepath.Join(base, "missing")}}, script)
	if !res.Hidden {
		t.Fatalf("Hidden is false; notes %q", res.Notes)
	}
	if n := strings.Count(out, secret); n != 1 {
		t.Errorf("the worker read the secret %d times, want once (the visible file only):\n%s", n, out)
	}
	// Writing over the hidden file is allowed but lands in /dev/null.
	for _, bad := range []string{"wrote-dir", "unmounted"} {
		if strings.Contains(out, bad) {
			t.Errorf("worker output has %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "listing:\n") {
		t.Errorf("the hidden directory is not empty in the worker:\n%s", out)
	}
	if data, _ := os.ReadFile(secretFile); string(data) != secret {
		t.Errorf("the hidden file changed: %q", data)
	}

	// Nothing to hide on disk yet: the worker is placed the same way
	// (child of the supervisor, which is PID 1 of its own namespace).
	res, out = runSh(t, Spec{Hide: []string{filepath.Join(base, "missing")}}, `echo "ppid=$PPID procs=$(ls -d /proc/[0-9]* | wc -l)"`)
	if !res.Hidden || res.Isolation != IsolationNamespaces || !strings.Contains(out, "ppid=1 ") {
		t.Errorf("Hide with only missing paths: Hidden=%v Isolation=%q, output %q, want ppid 1 (the supervisor) in its own namespace", res.Hidden, res.Isolation, out)
	}
}

// A secret file inside a hidden directory (NATS_NKEY inside the embedded
// server's credentials directory, say) is listed too: the worker still
// runs, and reads neither.
func TestHideNested(t *testing.T) {
	const secret = "hide-nested-secret-2c9e"
	// Readable by anyone, so that only the hiding keeps it from the worker.
	dir := filepath.Join(openDir(t), "slotlease")
	file := filepath.Join(dir, "embedded", "executor.nk")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	requireConfine(t)
	res, out := runSh(t, Spec{Hide: []string{dir, file, filepath.Dir(file)}}, fmt.Sprintf(`cat %s 2>/dev/null; echo ran`, file))
	if !strings.Contains(out, "ran") {
		t.Fatalf("the worker did not run: %q, notes %q", out, res.Notes)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the worker read the nested secret:\n%s", out)
	}
}

func TestHideBadPaths(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"relative", Spec{Hide: []string{"creds"}}, "not absolute"},
		{"nul", Spec{Hide: []string{"/tmp/a\x00b"}}, "NUL"},
		{"root", Spec{Hide: []string{"/"}}, "cannot hide"},
		{"proc", Spec{Hide: []string{"/proc/1"}}, "cannot hide"},
		{"workdir", Spec{Dir: dir, Hide: []string{filepath.Dir(dir)}}, "working directory"},
		{"command", Spec{Dir: dir, Hide: []string{"/bin/sh"}}, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Command = []string{"/bin/sh", "-c", "true"}
			_, err := Run(context.Background(), tc.spec, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The worker holds no capability and cannot gain any, with or without
// namespaces (this test process may be root).
func TestNoPrivileges(t *testing.T) {
	for _, spec := range []Spec{{}, {Hide: []string{t.TempDir()}}, {Isolate: true, NoNetwork: true}} {
		_, out := runSh(t, spec, `grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status`)
		fields := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(line, ":")
			fields[k] = strings.TrimSpace(v)
		}
		keys := []string{"CapInh", "CapPrm", "CapEff", "CapAmb"}
		if os.Geteuid() == 0 || len(spec.Hide) > 0 || spec.Isolate {
			// Only a helper with capabilities (root, or in a user
			// namespace) can empty the bounding set; one without any
			// needs not, with no_new_privs.
			keys = append(keys, "CapBnd")
		}
		for _, k := range keys {
			if fields[k] != "0000000000000000" {
				t.Errorf("hide=%v isolate=%v: %s = %q, want none:\n%s", spec.Hide, spec.Isolate, k, fields[k], out)
			}
		}
		if fields["NoNewPrivs"] != "1" {
			t.Errorf("hide=%v isolate=%v: NoNewPrivs = %q, want 1", spec.Hide, spec.Isolate, fields["NoNewPrivs"])
		}
	}
}

// Nothing the executor has open reaches the worker, not even a descriptor
// opened without O_CLOEXEC. The worker is a shell listing its own
// descriptors through ls, its child.
func TestNoFDLeak(t *testing.T) {
	leaky, err := syscall.Open(os.DevNull, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(leaky)
	for _, hide := range [][]string{nil, {t.TempDir()}} {
		_, out := runSh(t, Spec{Hide: hide}, `ls -l /proc/$$/fd`)
		var fds []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[len(f)-2] == "->" {
				fds = append(fds, f[len(f)-3])
			}
		}
		if strings.Join(fds, ",") != "0,1,2" {
			t.Errorf("hide=%v: the worker has descriptors %v, want 0,1,2 only (leaked fd was %d):\n%s", hide, fds, leaky, out)
		}
	}
}

// A non-dumpable process (what leasemgr and the executor make themselves
// with DisableDumping) keeps its environment and root from a worker of the
// same user; a dumpable one, the control, does not. The "victim" runs in a
// sandbox too, so that it has no more capabilities than the worker (the
// kernel protects a process with more, whatever its dumpable flag).
func TestDisableDumping(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, dumpable := range []string{"1", "0"} {
		ctx, cancel := context.WithCancel(context.Background())
		var vout syncBuffer
		done := make(chan error, 1)
		go func() {
			_, err := Run(ctx, Spec{Command: []string{self}, Env: map[string]string{dumpEnv: dumpable, "SANDBOX_TEST_MARK": "dump-marker-91c2"},
				Stdout: &vout, Stderr: &vout, KillGrace: 100 * time.Millisecond}, nil)
			done <- err
		}()
		var pid int
		for i := 0; pid == 0; i++ {
			if i > 3000 {
				t.Fatalf("victim did not start: %s", vout.String())
			}
			if _, err := fmt.Sscanf(vout.String(), "ready %d", &pid); err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		// No Hide: the worker shares /proc with the victim.
		_, out := runSh(t, Spec{}, fmt.Sprintf(`cat /proc/%d/environ 2>&1 | tr '\0' '\n'; ls /proc/%d/root/ 2>&1 | head -1`, pid, pid))
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out, "dump-marker-91c2"); got != (dumpable == "1") {
			t.Errorf("dumpable=%s: the worker read the environment: %v\n%s", dumpable, got, out)
		}
	}
}

// dumpEnv makes the test binary a victim for TestDisableDumping: "0"
// non-dumpable, "1" dumpable. It prints its pid and waits to be killed.
const dumpEnv = "SANDBOX_TEST_VICTIM_DUMPABLE"

func victim(undumpable bool) {
	if undumpable {
		if err := DisableDumping(); err != nil {
			fmt.Println("DisableDumping:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("ready %d\n", os.Getpid())
	time.Sleep(10 * time.Minute)
	os.Exit(0)
}
