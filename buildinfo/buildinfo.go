// Package buildinfo says what a binary was built from, read once from the
// build information the go command embeds (runtime/debug.ReadBuildInfo):
// the main module's version and the VCS revision. `leasemgr version`,
// `executor version`, the lease managers' NATS service info (`nats micro
// info leasemgr`) and the slotlease_build_info metric all show it, so the
// four agree.
package buildinfo

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
)

// Info is what a binary was built from.
type Info struct {
	// Version is the main module's version: a tag ("v1.2.0"), a
	// pseudo-version ("v0.0.0-20261128021500-0123456789ab", "+dirty" for
	// a modified tree) from `go build` in a git checkout, or "(devel)"
	// where the go command knew none (`go run`, a build without VCS).
	Version string
	// Revision is the VCS revision (vcs.revision), "" if unknown; Time
	// its commit time (vcs.time) and Modified whether the tree had
	// changes (vcs.modified).
	Revision string
	Time     string
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// version, set at link time, overrides the module version the go command
// recorded, for a build that knows better (a release built outside its git
// checkout, or with -buildvcs=false):
//
//	go build -ldflags "-X github.com/slotlease/slotlease/buildinfo.version=v1.2.0" ./cmd/...
var version string

// Get returns this binary's Info.
var Get = sync.OnceValue(func() Info {
	i := fromBuildInfo(debug.ReadBuildInfo())
	if version != "" {
		i.Version = version
	}
	return i
})

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Version: "(devel)"}
	}
	i := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the one-line form `version` prints, e.g.
// "v0.0.0-20261128021500-0123456789ab revision 0123456789abcdef... (2026-11-28T02:15:00Z) go1.26.8".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Revision != "" {
		fmt.Fprintf(&b, " revision %s", i.Revision)
		if i.Modified {
			b.WriteString("+modified")
		}
		if i.Time != "" {
			fmt.Fprintf(&b, " (%s)", i.Time)
		}
	}
	if i.GoVersion != "" {
		fmt.Fprintf(&b, " %s", i.GoVersion)
	}
	return b.String()
}

// semVer is the pattern semver.org suggests, as nats.go's micro package
// checks a service's version with it.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// SemVer is Version in the form a NATS service's version must have
// (semantic versioning, no "v"): "v1.2.0" is "1.2.0", a pseudo-version
// keeps its pre-release part, and a version the go command did not know
// is "0.0.0-devel" with the revision's first 12 characters as build
// metadata ("0.0.0-devel+0123456789ab", ".dirty" for a modified tree).
func (i Info) SemVer() string {
	if v := strings.TrimPrefix(i.Version, "v"); v != i.Version && semVer.MatchString(v) {
		return v
	}
	v := "0.0.0-devel"
	var meta []string
	if i.Revision != "" {
		meta = append(meta, i.Revision[:min(12, len(i.Revision))])
	}
	if i.Modified {
		meta = append(meta, "dirty")
	}
	if len(meta) > 0 && semVer.MatchString(v+"+"+strings.Join(meta, ".")) {
		v += "+" + strings.Join(meta, ".")
	}
	return v
}
