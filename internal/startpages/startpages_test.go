//go:build linux

package startpages

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReleaseUnmapsTheBinarysStartPages: the test binary's initialisers
// touched pages of its executable; Release unmaps them, and the code the
// process runs afterwards is mapped back.
func TestReleaseUnmapsTheBinarysStartPages(t *testing.T) {
	before, after, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the executable's read-only pages: %d KiB resident before, %d KiB after", before>>10, after>>10)
	if before < 1<<20 {
		t.Fatalf("only %d KiB of the executable resident before: the measure reads nothing", before>>10)
	}
	// Reading smaps to measure maps some of the code back in: a quarter
	// unmapped is far from what a release that did nothing leaves.
	if after > before*3/4 {
		t.Errorf("%d KiB resident after, of %d KiB before: not a quarter unmapped", after>>10, before>>10)
	}
	// The process goes on running: the code it runs is mapped back in.
	again, err := Resident()
	if err != nil || again <= 0 {
		t.Errorf("resident after running again: %d, %v", again, err)
	}
}

// TestParseSmaps picks, of an smaps file, the executable's mappings with
// their resident and private memory, and says which may be released: not
// writable, no private page.
func TestParseSmaps(t *testing.T) {
	smaps := filepath.Join(t.TempDir(), "smaps")
	text := `00400000-02d66000 r-xp 00000000 08:01 123                                /bin/storybus
Size:              43408 kB
Rss:               28756 kB
Anonymous:             0 kB
02d66000-05e3c000 r--p 02966000 08:01 123                                /bin/storybus
Size:              50008 kB
Rss:               30100 kB
Anonymous:             8 kB
05e3c000-0600a000 rw-p 05a3c000 08:01 123                                /bin/storybus
Rss:                1080 kB
Anonymous:           900 kB
7f0000000000-7f0000001000 r--p 00000000 08:01 456                        /lib/libc.so.6
Rss:                   4 kB
Anonymous:             0 kB
7f0000002000-7f0000003000 rw-p 00000000 00:00 0
Rss:                   4 kB
`
	if err := os.WriteFile(smaps, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(smaps)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := parseSmaps(f, "/bin/storybus")
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{start: 0x400000, end: 0x2d66000, perms: "r-xp", rss: 28756 << 10},
		{start: 0x2d66000, end: 0x5e3c000, perms: "r--p", rss: 30100 << 10, anon: 8 << 10},
		{start: 0x5e3c000, end: 0x600a000, perms: "rw-p", rss: 1080 << 10, anon: 900 << 10},
	}
	if len(got) != len(want) {
		t.Fatalf("mappings %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !got[0].releasable() || got[1].releasable() || got[2].releasable() {
		t.Errorf("releasable: %v %v %v, want only the code's", got[0].releasable(), got[1].releasable(), got[2].releasable())
	}
}
