// Package startpages hands back to the kernel the pages of the running
// binary that only its start touched.
//
// storybus is one binary: the operator links the bus (OPA, NATS, gin) and
// the bus links the operator, and every package's initialiser runs in
// every process. Those initialisers, and the start-up paths after them,
// touch tens of MiB of the executable's code and read-only data that the
// process never reads again, yet keep counting in its resident memory
// and, as page cache charged to the container, in its memory cgroup.
// Release advises the kernel to reclaim the executable's read-only
// mappings (MADV_PAGEOUT); the pages the process goes on using fault back
// in from the page cache or the image as it runs.
package startpages
