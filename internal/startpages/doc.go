// Package startpages drops from the process's resident memory the pages
// of the running binary that only its start touched.
//
// storybus is one binary: the operator links the bus (OPA, NATS, gin) and
// the bus links the operator, and every package's initialiser runs in
// every process. Those initialisers, and the start-up paths after them,
// touch tens of MiB of the executable's code and read-only data that the
// process does not read again, yet keep counting in its resident memory.
// Release unmaps them from the process (MADV_DONTNEED over the
// executable's read-only mappings that hold no private copy of a page):
// the pages stay in the page cache, no longer mapped, where the kernel
// reclaims them first under memory pressure, and a page the process uses
// again is mapped back from there (Unmap).
//
// A page mapped back brings the cached pages beside it (the kernel's
// fault-around), used or not. With Evict, Release also drops from the page
// cache the executable's pages no process maps, and has the kernel read
// the ones the process touches later a page at a time and never map them
// by a huge page, so that what stays resident is closer to what the
// process runs. The operator evicts; the bus, whose first requests would
// wait on those reads, only unmaps.
package startpages
