//go:build !race

package sandbox

// helperEnv is the environment of a helper stage: env (raceenv_race.go
// adds GORACE in -race builds).
func helperEnv(env ...string) []string { return env }
