package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The README's Go client program runs as written against the README's own
// server (issue 31: its nats.Connect(nats.DefaultURL) was refused by the
// embedded server, which admits no anonymous client).
func TestReadmeGoClientRuns(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## Using the Go client")
	if !ok {
		t.Fatal("README.md has no section 'Using the Go client'")
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	if !ok {
		t.Fatal("the README's Go client section has no ```go block")
	}
	program, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("unterminated ```go block")
	}
	src := filepath.Join(openTempDir(t), "main.go")
	if err := os.WriteFile(src, []byte(program+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "readme-client"), src)
	build.Dir = "../.." // the module: the program imports its packages
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's program: %v\n%s", err, out)
	}

	env, httpAddr := managerEnv(t, "readme", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	p := start(t, env, "readme-client")
	if code := p.Wait(t, 60*time.Second); code != 0 || !strings.Contains(p.Output(), "worked with token") {
		t.Fatalf("the README's program: exit %d\n%s", code, p.Output())
	}
}

// NATS_URL=nats://localhost:<port> names the embedded server listening on
// 127.0.0.1:<port>, and finds the credentials it made (issue 31).
func TestLocalhostFindsTheEmbeddedCredentials(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "lh", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	_, port, _ := strings.Cut(envValue(env, "NATS_LISTEN"), ":")
	withURL := append(append([]string{}, env...), "NATS_URL=nats://localhost:"+port)
	if code, out := runExecutor(t, withURL, "run", "--pool", "gpu", "--", "true"); code != 0 {
		t.Fatalf("executor run with NATS_URL=nats://localhost:%s: exit %d\n%s", port, code, out)
	}
}
