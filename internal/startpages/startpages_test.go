//go:build linux

package startpages

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestReleaseUnmapsTheBinarysStartPages: the test binary's initialisers
// touched pages of its executable; Release unmaps them, and the code the
// process runs afterwards is mapped back.
func TestReleaseUnmapsTheBinarysStartPages(t *testing.T) {
	before, after, err := Release(Unmap)
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

// TestEvictDropsTheExecutableFromThePageCache: after Release(Evict) most
// of the test binary's pages have left the page cache, and the mappings
// Release advises are read a page at a time and never mapped by a huge
// page, so that a page touched later brings few neighbours the process
// does not use. A binary on tmpfs (the page cache is its storage) cannot
// leave it: there Release must still unmap and advise, and succeed.
func TestEvictDropsTheExecutableFromThePageCache(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(exe, &fs); err != nil {
		t.Fatal(err)
	}
	inMemory := fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC
	// Read the whole file, so that the page cache holds all of it. The
	// build has just written it: Release writes it back before it drops.
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	advised, err := releasable()
	if err != nil {
		t.Fatal(err)
	}
	cached, total := cachedPages(t, exe)
	if _, _, err := Release(Evict); err != nil {
		t.Fatal(err)
	}
	evicted, _ := cachedPages(t, exe)
	t.Logf("the executable's pages in the page cache: %d of %d before, %d after Evict (in memory: %v)", cached, total, evicted, inMemory)
	if cached < total*3/4 {
		t.Fatalf("only %d of %d pages cached after the file was read: the measure shows nothing", cached, total)
	}
	// What stays is what the process maps again as it runs (the runtime,
	// this test), and what it maps writable.
	if !inMemory && evicted > cached*9/10 {
		t.Errorf("%d pages cached after Evict, of %d before: not evicted", evicted, cached)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	flags := mappingFlags(string(smaps))
	for _, m := range advised {
		if f := flags[m.start]; !slices.Contains(f, "rr") || !slices.Contains(f, "nh") {
			t.Errorf("mapping %#x-%#x (%s) has VmFlags %v: want rr (read at random) and nh (no huge page)", m.start, m.end, m.perms, f)
		}
	}
}

// mappingFlags returns the VmFlags of every mapping in an smaps file, by
// the mapping's start address.
func mappingFlags(smaps string) map[uintptr][]string {
	out := map[uintptr][]string{}
	var start uintptr
	for line := range strings.Lines(smaps) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, _, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: address perms offset dev inode [pathname].
			a, err := strconv.ParseUint(lo, 16, 64)
			if err != nil {
				a = 0
			}
			start = uintptr(a)
			continue
		}
		if fields[0] == "VmFlags:" {
			out[start] = fields[1:]
		}
	}
	return out
}

// cachedPages maps the file at path without touching it and returns how
// many of its pages the page cache holds (mincore), and how many it has.
func cachedPages(t *testing.T, path string) (cached, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	for _, v := range vec {
		cached += int(v & 1)
	}
	return cached, len(vec)
}
