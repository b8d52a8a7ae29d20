// Package raceexit turns off the race runtime's sleep at exit in the
// programs a test starts.
package raceexit

import (
	"os"
	"strings"
)

// A program built with -race sleeps a second before it exits: the race
// runtime's atexit_sleep_ms, 1000 by default, gives other threads time to
// report. The suite runs -race binaries (leasemgr, executor, the test
// binaries re-executed as sandbox helpers) thousands of times, and each
// run's second was spent waiting: `executor help` took 1.2 s of which
// 0.06 s was work. Races found while a program runs are reported as
// before; only a race in another thread in its last second is no longer
// waited for.

// raceExitOption turns the sleep off.
const raceExitOption = "atexit_sleep_ms=0"

// Env is GORACE as this process has it, with the exit sleep turned off
// unless GORACE already sets it, as a NAME=value entry for a child's
// environment.
func Env() string {
	v := os.Getenv("GORACE")
	if !strings.Contains(v, "atexit_sleep_ms=") {
		v = strings.TrimSpace(v + " " + raceExitOption)
	}
	return "GORACE=" + v
}

// Set sets Env in this process's environment, so that every
// child started with os.Environ() (or an environment built from it) exits
// at once. Call it from TestMain.
func Set() {
	_ = os.Setenv("GORACE", strings.TrimPrefix(Env(), "GORACE="))
}
