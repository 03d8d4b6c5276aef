package main_test

import (
	"os/exec"
	"runtime"
	"testing"
)

// TestVersion: `storybus version` and `storybus --version` print the
// version and commit the linker stamped, and the Go release.
func TestVersion(t *testing.T) {
	want := "storybus " + stampedVersion + " (commit " + stampedCommit + ", " + runtime.Version() + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(binary, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if string(out) != want {
			t.Errorf("%v printed %q, want %q", args, out, want)
		}
	}
}
