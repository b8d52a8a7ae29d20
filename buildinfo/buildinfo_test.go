package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tt := range []struct {
		name     string
		version  string
		settings map[string]string
		semver   string
		str      string
	}{
		{"tag", "v1.2.0", map[string]string{"vcs.revision": "0123456789abcdef0123", "vcs.time": "2026-11-28T02:15:00Z"}, "1.2.0",
			"v1.2.0 revision 0123456789abcdef0123 (2026-11-28T02:15:00Z) go1.26"},
		{"pseudo-version, modified tree", "v0.0.0-20261128021500-0123456789ab+dirty", map[string]string{"vcs.revision": "0123456789abcdef", "vcs.modified": "true"},
			"0.0.0-20261128021500-0123456789ab+dirty", "v0.0.0-20261128021500-0123456789ab+dirty revision 0123456789abcdef+modified go1.26"},
		{"go run", "(devel)", map[string]string{"vcs.revision": "0123456789abcdef"}, "0.0.0-devel+0123456789ab", "(devel) revision 0123456789abcdef go1.26"},
		{"no VCS", "", nil, "0.0.0-devel", "(devel) go1.26"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bi := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: tt.version}}
			for k, v := range tt.settings {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
			}
			i := fromBuildInfo(bi, true)
			if got := i.SemVer(); got != tt.semver || !semVer.MatchString(got) {
				t.Errorf("SemVer() = %q, want %q", got, tt.semver)
			}
			if got := i.String(); got != tt.str {
				t.Errorf("String() = %q, want %q", got, tt.str)
			}
		})
	}
}

// A test binary has build information too; Get reads it.
func TestGet(t *testing.T) {
	if i := Get(); i.Version == "" || i.GoVersion == "" {
		t.Errorf("Get() = %+v, want a version and a Go version", i)
	}
}
