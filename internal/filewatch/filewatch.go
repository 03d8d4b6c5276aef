// Package filewatch reloads what the bus reads from a few files (a
// workspace configuration and its key files, the publish port's TLS key
// pair) when their content changes.
//
// It watches the files' directories, and in them only those files and a
// Kubernetes volume's "..data" link: a log file or a data directory beside
// them never triggers a read. It reads once the files have been quiet for
// Quiet, and never later than MaxDelay after their first change, so a file
// written without a pause is read all the same. It compares a digest of the
// files' content with the one in force: a file rewritten with the same
// bytes, touched or chmod-ed reloads nothing.
package filewatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload timing of Watch: a change is in force within a second of being
// written, the reload's own reading included.
const (
	// Quiet is how long the watched files must stay unchanged before they
	// are read, so that an editor's or kubelet's several steps are read
	// once.
	Quiet = 100 * time.Millisecond
	// MaxDelay bounds the wait for quiet: files written without a pause
	// are read this long after their first change all the same.
	MaxDelay = 500 * time.Millisecond
)

// dataLink is the symlink a Kubernetes ConfigMap or Secret volume swaps to
// update its files.
const dataLink = "..data"

// Reading is one reading of the watched files.
type Reading struct {
	// Files are the files read; they are watched until the next reading.
	Files []string
	// Digest is the SHA-256 of the files' names and contents (or read
	// errors), from a Reader.
	Digest [32]byte
	// Apply puts what was read in force. An error counts it as not
	// applied: the next change to a watched file applies it again, even
	// unchanged.
	Apply func() error
}

// Reader reads files for a Reading, recording their names and hashing their
// names and contents (or read errors) in the order read.
type Reader struct {
	files []string
	h     hash.Hash
}

// NewReader returns a Reader that has read nothing yet.
func NewReader() *Reader { return &Reader{h: sha256.New()} }

// ReadFile reads the file name, as os.ReadFile, and adds it to the reading.
func (r *Reader) ReadFile(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	r.files = append(r.files, name)
	// Lengths first: no two sequences of files hash alike.
	fmt.Fprintf(r.h, "%d:%s", len(name), name)
	if err != nil {
		fmt.Fprintf(r.h, "error:%d:%s", len(err.Error()), err)
	} else {
		fmt.Fprintf(r.h, "content:%d:", len(b))
		r.h.Write(b)
	}
	return b, err
}

// Reading returns the reading of the files read so far, applied by apply.
func (r *Reader) Reading(apply func() error) Reading {
	rd := Reading{Files: append([]string(nil), r.files...), Apply: apply}
	copy(rd.Digest[:], r.h.Sum(nil))
	return rd
}

// Watch watches the files read, until ctx ends. files are the files the
// content in force was read from, and applied its digest. Watch calls read
// at once (a change made since the caller's own reading is not missed), then
// each time one of the files the last reading named changes, debounced as
// the package comment says; when the reading's digest differs from the one
// applied, it calls the reading's Apply. The watcher's own errors are passed
// to onError. Watch fails when a directory of files cannot be watched.
func Watch(ctx context.Context, files []string, applied [32]byte, read func() Reading, onError func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	fw := &fileWatch{fs: w, dirs: map[string]bool{}}
	for _, name := range files {
		dir := filepath.Dir(name)
		if fw.dirs[dir] {
			continue
		}
		if err := w.Add(dir); err != nil {
			w.Close()
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		fw.dirs[dir] = true
	}
	fw.follow(files)
	go func() {
		defer w.Close()
		d := debounce{quiet: Quiet, max: MaxDelay}
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !fw.watched(ev.Name) {
					continue
				}
				timer.Reset(time.Until(d.changed(time.Now())))
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				onError(err)
			case <-timer.C:
				d.fired()
				r := read()
				fw.follow(r.Files)
				if r.Digest == applied {
					continue
				}
				applied = r.Digest
				if r.Apply() != nil {
					applied = [32]byte{}
				}
			}
		}
	}()
	return nil
}

// fileWatch is the set of files watched, and the directories watched for
// them.
type fileWatch struct {
	fs *fsnotify.Watcher
	// files are the files read and the "..data" links of their
	// directories, cleaned.
	files map[string]bool
	dirs  map[string]bool
}

// follow watches files (the last reading's) and their directories, and
// stops watching directories none of them is in any longer.
func (f *fileWatch) follow(files []string) {
	f.files = map[string]bool{}
	dirs := map[string]bool{}
	for _, name := range files {
		f.files[filepath.Clean(name)] = true
		dirs[filepath.Dir(name)] = true
	}
	for dir := range dirs {
		f.files[filepath.Join(dir, dataLink)] = true
		if !f.dirs[dir] {
			// A directory that cannot be watched holds a file that cannot
			// be read: the reading reports that.
			_ = f.fs.Add(dir)
		}
	}
	for dir := range f.dirs {
		if !dirs[dir] {
			_ = f.fs.Remove(dir)
		}
	}
	f.dirs = dirs
}

// watched reports whether an event's name is one of the files.
func (f *fileWatch) watched(name string) bool { return f.files[filepath.Clean(name)] }

// debounce decides when to read after a run of changes: quiet after the
// last one, and never later than max after the first.
type debounce struct {
	quiet, max time.Duration
	first      time.Time // zero: no change pending
}

// changed records a change at now and returns when to read.
func (d *debounce) changed(now time.Time) time.Time {
	if d.first.IsZero() {
		d.first = now
	}
	due := now.Add(d.quiet)
	if limit := d.first.Add(d.max); due.After(limit) {
		return limit
	}
	return due
}

// fired records that the files were read.
func (d *debounce) fired() { d.first = time.Time{} }
