package client

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Dedup remembers the message_ids a consumer has handled, so that the
// duplicates of at-least-once delivery are dropped. Its memory is bounded:
// it remembers at most Size ids, none for longer than Window. A duplicate
// arriving later than that is handled again, so a consumer's handling
// should still be idempotent where it matters (a snapshot's
// sequence_number tells a newer one from an older one).
//
// A Dedup from NewDedup lives in memory and is forgotten when the process
// ends; one from OpenDedup also keeps its ids in a file, so that a
// consumer that restarts still drops what it handled before.
type Dedup struct {
	seen  *lru[struct{}]
	clock Clock
	// journal is the file of a Dedup from OpenDedup; nil in memory.
	journal *dedupJournal
}

// Defaults of NewDedup.
const (
	DefaultDedupSize   = 100_000
	DefaultDedupWindow = 24 * time.Hour
)

// NewDedup returns a de-duplicator of at most size ids (default 100,000),
// each remembered for window (default 24 hours). clock may be nil.
func NewDedup(size int, window time.Duration, clock Clock) *Dedup {
	if size <= 0 {
		size = DefaultDedupSize
	}
	if window <= 0 {
		window = DefaultDedupWindow
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Dedup{seen: newLRU[struct{}](size, window), clock: clock}
}

// OpenDedup returns a de-duplicator like NewDedup's that keeps its ids in
// the file at path as well, created if missing: the ids it holds within
// the window are remembered again. Each Done appends a line to the file
// (written, not synced: a machine that crashes may lose the last few, and
// their messages are then handled once more). The file is rewritten with
// only the remembered ids once it has grown to twice size. One process at a
// time may use a file. Close closes it.
func OpenDedup(path string, size int, window time.Duration, clock Clock) (*Dedup, error) {
	d := NewDedup(size, window, clock)
	if err := d.load(path); err != nil {
		return nil, err
	}
	j := &dedupJournal{path: path}
	if err := j.rewrite(d.seen.oldestFirst()); err != nil {
		return nil, err
	}
	d.journal = j
	return d, nil
}

// Seen reports whether id was marked done within the window.
func (d *Dedup) Seen(id string) bool {
	_, ok := d.seen.get(id, d.clock.Now())
	return ok
}

// Done marks id as handled. A file-backed Dedup that cannot write its file
// still remembers id in memory and returns the error; so does one given an
// id with a line break, which its file cannot hold.
func (d *Dedup) Done(id string) error {
	now := d.clock.Now()
	d.seen.add(id, struct{}{}, now)
	if d.journal == nil {
		return nil
	}
	if strings.ContainsAny(id, "\r\n") {
		return fmt.Errorf("message_id %q has a line break: not kept in the de-duplication file", id)
	}
	return d.journal.append(id, now, d.seen)
}

// Len returns how many ids are remembered.
func (d *Dedup) Len() int { return d.seen.len() }

// Close closes the file of a Dedup from OpenDedup; it does nothing for one
// from NewDedup.
func (d *Dedup) Close() error {
	if d.journal == nil {
		return nil
	}
	return d.journal.close()
}

// load remembers the ids of the file at path, in the order they were
// handled. Lines that do not parse (the torn end of a file written when
// the process stopped) are skipped.
func (d *Dedup) load(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the de-duplication file: %w", err)
	}
	now := d.clock.Now()
	for line := range bytes.Lines(b) {
		at, id, ok := parseDedupLine(line)
		if ok && now.Sub(at) < d.seen.window {
			d.seen.add(id, struct{}{}, at)
		}
	}
	return nil
}

// A line of the file is "<handled at, Unix nanoseconds> <message_id>\n".
func parseDedupLine(line []byte) (time.Time, string, bool) {
	line, complete := bytes.CutSuffix(line, []byte("\n"))
	ns, id, found := bytes.Cut(line, []byte(" "))
	n, err := strconv.ParseInt(string(ns), 10, 64)
	if !complete || !found || err != nil || len(id) == 0 {
		return time.Time{}, "", false
	}
	return time.Unix(0, n), string(id), true
}

func appendDedupLine(b []byte, id string, at time.Time) []byte {
	b = strconv.AppendInt(b, at.UnixNano(), 10)
	b = append(b, ' ')
	b = append(b, id...)
	return append(b, '\n')
}

// dedupJournal is the append-only file of a Dedup.
type dedupJournal struct {
	mu    sync.Mutex
	path  string
	f     *os.File
	lines int // lines in the file
	// torn is set when a write failed part-way: the file may end in half a
	// line, so the next append rewrites it whole instead.
	torn bool
}

func (j *dedupJournal) append(id string, at time.Time, seen *lru[struct{}]) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("the de-duplication file is closed")
	}
	if j.torn || j.lines+1 >= 2*seen.size {
		// seen already holds id.
		return j.rewriteLocked(seen.oldestFirst())
	}
	if _, err := j.f.Write(appendDedupLine(nil, id, at)); err != nil {
		j.torn = true
		return fmt.Errorf("write the de-duplication file: %w", err)
	}
	j.lines++
	return nil
}

func (j *dedupJournal) rewrite(entries []lruEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rewriteLocked(entries)
}

// rewriteLocked replaces the file by one of entries, atomically: a new
// file, synced, renamed over the old one, and kept open for appending.
func (j *dedupJournal) rewriteLocked(entries []lruEntry) error {
	var buf []byte
	for _, e := range entries {
		buf = appendDedupLine(buf, e.key, e.added)
	}
	tmp, err := os.CreateTemp(filepath.Dir(j.path), "."+filepath.Base(j.path)+".*")
	if err != nil {
		return fmt.Errorf("rewrite the de-duplication file: %w", err)
	}
	if _, err := tmp.Write(buf); err != nil {
		return j.abandon(tmp, err)
	}
	if err := tmp.Sync(); err != nil {
		return j.abandon(tmp, err)
	}
	// The old file is closed before the rename, which some systems refuse
	// over an open file; its handle is useless afterwards anyway.
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		err = j.abandon(tmp, err)
		// Carry on appending to the old file, whole or torn.
		if f, oerr := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); oerr == nil {
			j.f, j.torn = f, true
		}
		return err
	}
	// tmp is now the file at path, its offset at the end: appends go on
	// there.
	j.f, j.lines, j.torn = tmp, len(entries), false
	return nil
}

// abandon removes a rewrite's temporary file and returns err wrapped.
func (j *dedupJournal) abandon(tmp *os.File, err error) error {
	tmp.Close()
	os.Remove(tmp.Name())
	return fmt.Errorf("rewrite the de-duplication file: %w", err)
}

func (j *dedupJournal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
