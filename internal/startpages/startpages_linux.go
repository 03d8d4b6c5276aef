package startpages

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release unmaps from the process the pages of the running executable's
// read-only mappings (its code and read-only data) and, with Evict, drops
// them from the page cache, and returns how much of those mappings was
// resident before and after, in bytes. Nothing is lost: the pages are the
// file's, and one used again is mapped back from the page cache, or read
// again. A mapping that holds a private copy of a page (read-only now,
// written once, as a relocated segment is) is left alone: unmapping would
// drop the copy.
func Release(mode Mode) (before, after int64, err error) {
	ms, err := releasable()
	if err != nil {
		return 0, 0, err
	}
	for _, m := range ms {
		before += m.rss
	}
	var notDropped error
	if mode == Evict {
		// Before the unmapping, so that no page the process maps back
		// from then on is read ahead or mapped by a huge page. Advice
		// refused leaves the pages unmapped, as Unmap does.
		notDropped = adviseSmallReads(ms)
	}
	for _, m := range ms {
		if err := madvise(m, unix.MADV_DONTNEED, "MADV_DONTNEED"); err != nil {
			return before, before, err
		}
	}
	if mode == Evict && notDropped == nil {
		notDropped = dropFromPageCache()
	}
	if notDropped != nil {
		notDropped = fmt.Errorf("%w: %w", ErrNotDropped, notDropped)
	}
	after, err = Resident()
	return before, after, errors.Join(notDropped, err)
}

// madvise gives advice over m's address range. The raw system call:
// these addresses are not Go memory, which unix.Madvise would want as a
// slice.
func madvise(m mapping, advice int, name string) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); errno != 0 {
		return fmt.Errorf("madvise(%s) %#x-%#x: %w", name, m.start, m.end, errno)
	}
	return nil
}

// adviseSmallReads has the kernel read ms's pages one at a time from now
// on (no read-ahead) and never map them by a huge page: a large folio of
// the file left in the page cache (one a process maps is not dropped)
// would otherwise be mapped whole, 2 MiB for a page touched.
func adviseSmallReads(ms []mapping) error {
	for _, m := range ms {
		if err := madvise(m, unix.MADV_RANDOM, "MADV_RANDOM"); err != nil {
			return err
		}
		// A kernel without transparent huge pages refuses the advice it
		// has no use for.
		if err := madvise(m, unix.MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE"); err != nil && !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	return nil
}

// dropFromPageCache drops from the page cache the executable's pages no
// process maps. Reading the file is all it needs: no right to write it
// (fsync and posix_fadvise work on a file opened to read).
func dropFromPageCache() error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	defer f.Close()
	// A binary just built or copied may not be written back yet, and the
	// kernel drops no dirty page: write it back first (a clean file has
	// nothing to write). A file system that cannot be written (squashfs,
	// erofs) refuses; it holds no page to write either.
	if err := f.Sync(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("evict: %w", err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evict: posix_fadvise(POSIX_FADV_DONTNEED): %w", err)
	}
	return nil
}

// Resident returns how much of the running executable's read-only,
// releasable mappings is resident, in bytes.
func Resident() (int64, error) {
	ms, err := releasable()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		n += m.rss
	}
	return n, nil
}

// releasable returns the running executable's mappings that may be
// unmapped, as /proc/self/smaps describes them now.
func releasable() ([]mapping, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := parseSmaps(f, exe)
	if err != nil {
		return nil, err
	}
	out := ms[:0]
	for _, m := range ms {
		if m.releasable() {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no read-only mapping of %s without private pages in /proc/self/smaps", exe)
	}
	return out, nil
}

// mapping is one mapping of the executable: the address range [start,
// end), its permissions, and its resident and private anonymous
// (copied-on-write) memory in bytes.
type mapping struct {
	start, end uintptr
	perms      string
	rss, anon  int64
}

// releasable reports whether m may be unmapped without losing anything:
// never writable now, and holding no private copy of a page.
func (m mapping) releasable() bool {
	return !strings.Contains(m.perms, "w") && m.anon == 0
}

// parseSmaps returns the mappings of path in an smaps file
// (/proc/PID/smaps).
func parseSmaps(f *os.File, path string) ([]mapping, error) {
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && len(fields) >= 5 && !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: address perms offset dev inode [pathname].
			cur = nil
			if len(fields) < 6 || fields[5] != path {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			out = append(out, mapping{start: uintptr(start), end: uintptr(end), perms: fields[1]})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil || len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			cur.anon = kb << 10
		}
	}
	return out, sc.Err()
}
