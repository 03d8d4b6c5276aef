// Package buildinfo says which storybus a binary is: its version, the
// commit it was built from and the Go release that built it, for
// `storybus version`, the logs and the storybus_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the linker, as `make build` and `make image` do:
//
//	go build -ldflags "-X github.com/storybus/storybus/internal/buildinfo.version=0.1.0 \
//	  -X github.com/storybus/storybus/internal/buildinfo.commit=$(git rev-parse HEAD)"
//
// The commit is stamped too because builds with -buildvcs=false (the CI's)
// record no VCS information for ReadBuildInfo to find.
var (
	version string
	commit  string
)

// Unknown is a field's value when neither the linker nor Go's build
// information says.
const Unknown = "unknown"

// Info is what a binary knows of its build.
type Info struct {
	// Version is the stamped version, else the main module's version as
	// Go recorded it: a pseudo-version for a build from a checkout,
	// "(devel)" without VCS information.
	Version string
	// Commit is the stamped commit, else the VCS revision Go recorded,
	// with "-dirty" when the work tree had changes.
	Commit string
	// GoVersion is the Go release the binary was built with.
	GoVersion string
}

// Get returns this binary's build information.
func Get() Info {
	i := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" {
			i.Version = bi.Main.Version
		}
		if i.Commit == "" {
			i.Commit = revision(bi.Settings)
		}
	}
	if i.Version == "" {
		i.Version = Unknown
	}
	if i.Commit == "" {
		i.Commit = Unknown
	}
	return i
}

// revision is the VCS revision in Go's build settings, or "".
func revision(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// String returns the one line `storybus version` prints.
func (i Info) String() string {
	return "storybus " + i.Version + " (commit " + i.Commit + ", " + i.GoVersion + ")"
}

// NewCollector returns the storybus_build_info gauge: always 1, its labels
// the build's version, commit and Go version, so that a query can join
// any series of a process to the build it runs.
func NewCollector() prometheus.Collector {
	i := Get()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "storybus_build_info",
		Help:        "The storybus build a process runs: version, commit and Go version as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	}, func() float64 { return 1 })
}
