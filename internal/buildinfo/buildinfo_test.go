package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// stamp sets the linker's variables for one test.
func stamp(t *testing.T, v, c string) {
	t.Helper()
	oldV, oldC := version, commit
	version, commit = v, c
	t.Cleanup(func() { version, commit = oldV, oldC })
}

func TestStampedWins(t *testing.T) {
	stamp(t, "1.2.3", "0123456789abcdef")
	got := Get()
	want := Info{Version: "1.2.3", Commit: "0123456789abcdef", GoVersion: runtime.Version()}
	if got != want {
		t.Fatalf("Get() = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "storybus 1.2.3 (commit 0123456789abcdef, "+runtime.Version()+")" {
		t.Errorf("String() = %q", s)
	}
}

// TestUnstampedFallsBack: without stamps the fields come from Go's build
// information, and are never empty.
func TestUnstampedFallsBack(t *testing.T) {
	stamp(t, "", "")
	got := Get()
	if got.Version == "" || got.Commit == "" || got.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v, want every field set", got)
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && got.Version != bi.Main.Version {
		t.Errorf("Version %q, want the main module's %q", got.Version, bi.Main.Version)
	}
}

func TestRevision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none", nil, ""},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}, "abc-dirty"},
		{"modified without revision", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		if got := revision(tc.settings); got != tc.want {
			t.Errorf("%s: revision = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	stamp(t, "1.2.3", "abc")
	want := `# HELP storybus_build_info The storybus build a process runs: version, commit and Go version as labels; always 1.
# TYPE storybus_build_info gauge
storybus_build_info{commit="abc",goversion="` + runtime.Version() + `",version="1.2.3"} 1
`
	if err := testutil.CollectAndCompare(NewCollector(), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
