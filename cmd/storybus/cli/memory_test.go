package cli

import (
	"runtime/debug"
	"testing"
)

// TestMemoryLimitSetsTheGoMemoryLimit: --memory-limit (the container's
// limit, from STORYBUS_MEMORY_LIMIT) sets the Go memory limit to nine
// tenths of it; GOMEMLIMIT, when set, wins; a bad value is a usage error.
func TestMemoryLimitSetsTheGoMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)

	t.Setenv("GOMEMLIMIT", "")
	set, err := applyMemoryLimit("1Gi")
	if err != nil || set != (1<<30)/10*9 || debug.SetMemoryLimit(-1) != set {
		t.Fatalf("1Gi: set %d (%v), runtime limit %d", set, err, debug.SetMemoryLimit(-1))
	}
	if set, err := applyMemoryLimit("536870912"); err != nil || set != 536870912/10*9 {
		t.Fatalf("bytes: set %d (%v)", set, err)
	}
	if _, err := applyMemoryLimit("a lot"); err == nil {
		t.Fatal("a bad --memory-limit was taken")
	}

	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "300MiB")
	if set, err := applyMemoryLimit("1Gi"); err != nil || set != 0 || debug.SetMemoryLimit(-1) != before {
		t.Fatalf("with GOMEMLIMIT: set %d (%v)", set, err)
	}
}
