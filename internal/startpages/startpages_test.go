//go:build linux

package startpages

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReleaseHandsBackTheBinarysPages: the test binary's initialisers
// touched pages of its executable; Release hands them back, and the
// process goes on running the code it needs afterwards.
func TestReleaseHandsBackTheBinarysPages(t *testing.T) {
	before, after, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file-backed resident memory %d KiB before, %d KiB after", before>>10, after>>10)
	if before < 1<<20 {
		t.Fatalf("only %d KiB of file-backed memory resident before: the measure reads nothing", before>>10)
	}
	if after > before/2 {
		t.Errorf("file-backed resident memory %d KiB after, of %d KiB before: less than half handed back", after>>10, before>>10)
	}
	// The code released runs again: it is read back in.
	if _, again, err := Release(); err != nil || again <= 0 {
		t.Errorf("second Release: %d, %v", again, err)
	}
}

// TestReadOnlyMappings picks, of a maps file, the mappings of the path
// that are not writable.
func TestReadOnlyMappings(t *testing.T) {
	maps := filepath.Join(t.TempDir(), "maps")
	lines := "00400000-02d66000 r-xp 00000000 08:01 123 /bin/storybus\n" +
		"02d66000-05e3c000 r--p 02966000 08:01 123 /bin/storybus\n" +
		"05e3c000-0600a000 rw-p 05a3c000 08:01 123 /bin/storybus\n" +
		"7f0000000000-7f0000001000 r--p 00000000 08:01 456 /lib/libc.so.6\n" +
		"7f0000002000-7f0000003000 rw-p 00000000 00:00 0\n" +
		"garbage\n"
	if err := os.WriteFile(maps, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readOnlyMappings(maps, "/bin/storybus")
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{{0x400000, 0x2d66000}, {0x2d66000, 0x5e3c000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("mappings %#v, want %#v", got, want)
	}
}
