package harness

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// A port one process handed out is claimed for the machine: another
// process (here flock(1), as a second copy of the suite would) cannot
// take it, and this process's Ports never hands it out again.
func TestPortsAreClaimedAcrossProcesses(t *testing.T) {
	p := &Ports{Lo: 13900, Hi: 14000} // below the TypeScript suite's range, used by no package
	port := p.Take(t)
	if claimDir() == "" {
		t.Fatal("no directory for port claims")
	}
	other := exec.Command("flock", "--nonblock", "--conflict-exit-code", "7", filepath.Join(claimDir(), strconv.Itoa(port)), "true")
	err := other.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("another process took the claim on port %d: flock said %v", port, err)
	}
	for range 20 {
		if again := p.Take(t); again == port {
			t.Fatalf("port %d handed out twice", port)
		}
	}
}
