//go:build race

package sandbox

import "os"

// helperEnv is the environment of a helper stage (this binary run again):
// env, and in a -race build the GORACE options this process has, so that a
// test that turns off the race runtime's one-second sleep at exit
// (test/raceexit.Set) gets it in every stage. Release builds pass
// env alone (raceenv_norace.go).
func helperEnv(env ...string) []string {
	if v, ok := os.LookupEnv("GORACE"); ok {
		return append(env, "GORACE="+v)
	}
	return env
}
