package startpages

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release advises the kernel to reclaim the pages of the running
// executable's read-only mappings (its code and read-only data), and
// returns the process's file-backed resident memory before and after, in
// bytes. Nothing is lost: a page used again is read back in. The mappings
// the process writes (its data) are left alone.
func Release() (before, after int64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, 0, err
	}
	ranges, err := readOnlyMappings("/proc/self/maps", exe)
	if err != nil {
		return 0, 0, err
	}
	if len(ranges) == 0 {
		return 0, 0, fmt.Errorf("no read-only mapping of %s in /proc/self/maps", exe)
	}
	before, err = residentFile()
	if err != nil {
		return 0, 0, err
	}
	for _, r := range ranges {
		// The raw system call: these addresses are not Go memory, and
		// unix.Madvise wants a slice over them.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_PAGEOUT); errno != 0 {
			return before, before, fmt.Errorf("madvise(MADV_PAGEOUT) %#x-%#x: %w", r.start, r.end, errno)
		}
	}
	after, err = residentFile()
	return before, after, err
}

// mapping is an address range [start, end).
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the ranges of the maps file (/proc/PID/maps)
// that map path without write permission.
func readOnlyMappings(maps, path string) ([]mapping, error) {
	f, err := os.Open(maps)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode pathname
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{start: uintptr(start), end: uintptr(end)})
	}
	return out, sc.Err()
}

// residentFile is the process's file-backed resident memory (RssFile in
// /proc/self/status), in bytes.
func residentFile() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("RssFile %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no RssFile in /proc/self/status")
}
