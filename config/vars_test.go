package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestVarsIsTheOneList: every variable the loaders read is in Vars, with
// the readers the loaders imply, and nothing else is, but the few read
// outside this package's loaders.
func TestVarsIsTheOneList(t *testing.T) {
	outside := []string{EnvExecutorUnconfined, EnvExecutorMetricsAddr, EnvOTELTracesExporter, EnvOTELMetricsExporter}
	seen := map[string]bool{}
	for _, v := range Vars {
		if seen[v.Name] {
			t.Errorf("%s is in Vars twice", v.Name)
		}
		seen[v.Name] = true
		if v.Meaning == "" || v.Default == "" || v.Readers == 0 {
			t.Errorf("%s: meaning, default and readers must be given: %+v", v.Name, v)
		}
		switch {
		case slices.Contains(commonVars, v.Name):
			if v.Readers != ReadByAll {
				t.Errorf("%s is read by every program (commonVars), Vars says %b", v.Name, v.Readers)
			}
		case slices.Contains(managerVars, v.Name):
			if v.Readers != ReadByManager {
				t.Errorf("%s is read by leasemgr run only (managerVars), Vars says %b", v.Name, v.Readers)
			}
		case !slices.Contains(outside, v.Name):
			t.Errorf("%s is in Vars but no loader reads it", v.Name)
		}
	}
	for _, name := range append(append(slices.Clone(commonVars), managerVars...), outside...) {
		if !seen[name] {
			t.Errorf("%s is read but not in Vars: no usage text or doc would name it", name)
		}
	}
}

// TestVarsDefaultsMatchTags: a default written in Vars is the envDefault
// tag the loader applies.
func TestVarsDefaultsMatchTags(t *testing.T) {
	byName := map[string]Var{}
	for _, v := range Vars {
		byName[v.Name] = v
	}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, def := f.Tag.Get("env"), f.Tag.Get("envDefault")
			if name == "" || def == "" {
				continue
			}
			if got := byName[name].Default; !strings.HasPrefix(got, def) {
				t.Errorf("%s: Vars says default %q, the loader applies %q", name, got, def)
			}
		}
	}
	walk(reflect.TypeFor[Manager]())
}

// TestConfigurationDocListsVars: the tables of docs/configuration.md, the
// one page on configuration, name exactly the variables of Vars.
func TestConfigurationDocListsVars(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	// The variables' tables come before the first "## " section (queue
	// policies, rate limits), under the page's "# Configuration" title.
	_, section, ok := strings.Cut(string(b), "# Configuration\n")
	if !ok {
		t.Fatal(`docs/configuration.md does not start with "# Configuration"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
	var listed []string
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		if i := slices.IndexFunc(Aliases, func(a Alias) bool { return strings.HasPrefix(line, "| `"+a.Name+"` |") }); i >= 0 {
			continue // the aliases' table: TestConfigurationDocListsAliases
		}
		first, _, _ := strings.Cut(line[1:], "|")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			listed = append(listed, m[1])
		}
	}
	checkSameNames(t, "docs/configuration.md's tables", listed)
}

// TestDocListsVars: the package doc's "# Variables" names exactly the
// variables of Vars.
func TestDocListsVars(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "// # Variables\n")
	if !ok {
		t.Fatal(`doc.go has no "# Variables" section`)
	}
	section, _, _ = strings.Cut(section, "// # ")
	entry := regexp.MustCompile(`^//\t([A-Z][A-Z0-9_]+)(\s|$)`)
	var listed []string
	for line := range strings.SplitSeq(section, "\n") {
		if m := entry.FindStringSubmatch(line); m != nil {
			listed = append(listed, m[1])
		}
	}
	checkSameNames(t, "doc.go", listed)
}

func checkSameNames(t *testing.T, where string, listed []string) {
	t.Helper()
	want := VarNames(ReadByAll)
	for _, n := range want {
		if !slices.Contains(listed, n) {
			t.Errorf("%s does not list %s", where, n)
		}
	}
	for _, n := range listed {
		if !slices.Contains(want, n) {
			t.Errorf("%s lists %s, which is not in Vars", where, n)
		}
	}
}

func TestUsage(t *testing.T) {
	u := Usage(ReadByClients | ReadByExecutor)
	for _, n := range []string{EnvNodeID, EnvExecutorUnconfined, EnvExecutorMetricsAddr, EnvLogFormat} {
		if !strings.Contains(u, "  "+n+" ") {
			t.Errorf("the executor's usage lacks %s:\n%s", n, u)
		}
	}
	if strings.Contains(u, EnvPoolCapacities) {
		t.Errorf("the executor's usage lists %s, which only leasemgr run reads:\n%s", EnvPoolCapacities, u)
	}
}
