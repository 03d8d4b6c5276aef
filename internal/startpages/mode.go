package startpages

import "errors"

// Mode says what Release does beyond unmapping.
type Mode int

const (
	// Unmap unmaps the pages and leaves them in the page cache: a page
	// the process touches again is mapped back from there, with the
	// kernel's fault-around mapping the cached pages beside it (64 KiB
	// in all), whether the process uses them or not.
	Unmap Mode = iota
	// Evict unmaps the pages, asks the kernel to read what the process
	// touches later one page at a time (MADV_RANDOM: no read-ahead) and
	// never to map it by a huge page (MADV_NOHUGEPAGE), and drops from
	// the page cache the executable's pages no process maps
	// (POSIX_FADV_DONTNEED). Fault-around then finds few cached pages
	// beside the one touched, and the process's resident share of its
	// executable stays close to the pages it runs; the cost is a read
	// from disk for each page it touches first, and for any other process
	// of the same file a read of a page it had not mapped.
	Evict
)

// ErrNotDropped is what Release(Evict) returns, wrapping the cause, when
// it unmapped the pages but could not drop them from the page cache.
var ErrNotDropped = errors.New("unmapped, not dropped from the page cache")
