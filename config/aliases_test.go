package config

import (
	"os"
	"strings"
	"testing"
)

// The executor-pool system's names are read as slotlease's, each with a
// note; the slotlease name set alike is no conflict; set unlike, both are
// named in the refusal.
func TestAliases(t *testing.T) {
	c, err := LoadManagerFrom(map[string]string{
		EnvMirrorNeuronPoolCapacities: "gpu=2,io=8", EnvMirrorNeuronMaxConcurrency: "7",
	})
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]int64{}
	for _, p := range c.Pools {
		caps[p.Name] = p.Capacity
	}
	if caps["gpu"] != 2 || caps["io"] != 8 || caps["default"] != 7 || len(caps) != 3 {
		t.Errorf("pools %v, want gpu=2, io=8, default=7", caps)
	}
	wantNotes := []string{
		"MIRROR_NEURON_EXECUTOR_POOL_CAPACITIES is read as POOL_CAPACITIES=gpu=2,io=8 (an alias, for the executor-pool system's configuration)",
		"MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY is read as EXECUTOR_MAX_CONCURRENCY=7 (an alias, for the executor-pool system's configuration)",
	}
	if strings.Join(c.Notes, "\n") != strings.Join(wantNotes, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(c.Notes, "\n"), strings.Join(wantNotes, "\n"))
	}
	if d, err := LoadManagerFrom(map[string]string{}); err != nil || len(d.Notes) != 0 {
		t.Errorf("no alias set: notes %q, %v", d.Notes, err)
	}

	same, err := LoadManagerFrom(map[string]string{EnvMirrorNeuronMaxConcurrency: "3", EnvExecutorMaxConcurrency: "3"})
	if err != nil || same.DefaultCapacity != 3 || len(same.Notes) != 1 || !strings.Contains(same.Notes[0], "both set, alike") {
		t.Errorf("both set alike: %v, notes %q", err, same.Notes)
	}

	_, err = LoadManagerFrom(map[string]string{EnvMirrorNeuronMaxConcurrency: "8", EnvExecutorMaxConcurrency: "4"})
	want := `MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY: "8": conflicts with EXECUTOR_MAX_CONCURRENCY="4": MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY is honoured as an alias of EXECUTOR_MAX_CONCURRENCY; set one of them, or both alike`
	if err == nil || err.Error() != want {
		t.Errorf("conflict: %v\nwant %s", err, want)
	}
	checkVarError(t, err, EnvMirrorNeuronMaxConcurrency)

	// A bad value is reported under the name that was set.
	_, err = LoadManagerFrom(map[string]string{EnvMirrorNeuronPoolCapacities: "gpu=0", EnvMirrorNeuronMaxConcurrency: "+2"})
	for _, want := range []string{
		`MIRROR_NEURON_EXECUTOR_POOL_CAPACITIES (read as POOL_CAPACITIES): entry "gpu=0": capacity must be a positive integer`,
		`MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY (read as EXECUTOR_MAX_CONCURRENCY): "+2": value must not have a '+' sign`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad alias values: %v\nwant it to contain %s", err, want)
		}
	}

	// Not strays: they are read.
	if got := Strays([]string{EnvMirrorNeuronPoolCapacities + "=a=1", EnvMirrorNeuronMaxConcurrency + "=1"}); len(got) != 0 {
		t.Errorf("aliases reported as strays: %+v", got)
	}
}

// TestConfigurationDocListsAliases: docs/configuration.md's table of
// aliases has a row for each, naming the variable it is read as.
func TestConfigurationDocListsAliases(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Aliases {
		if row := "| `" + a.Name + "` | `" + a.Of + "` |"; !strings.Contains(string(b), row) {
			t.Errorf("docs/configuration.md has no row %q", row)
		}
	}
}
