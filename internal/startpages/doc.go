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
// again is mapped back from there.
package startpages
