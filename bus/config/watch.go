package config

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload timing of Watch: a change is in force within a second of being
// written, the reload's own reading and compiling included.
const (
	// ReloadQuiet is how long the watched files must stay unchanged before
	// they are read, so that an editor's or kubelet's several steps are
	// read once.
	ReloadQuiet = 100 * time.Millisecond
	// ReloadMaxDelay bounds the wait for quiet: files written without a
	// pause are read this long after their first change all the same.
	ReloadMaxDelay = 500 * time.Millisecond
)

// dataLink is the symlink a Kubernetes ConfigMap or Secret volume swaps to
// update its files.
const dataLink = "..data"

// Watch calls onChange each time the content of the configuration file at
// path, or of a key file it names, changes, until ctx ends. loaded is the
// configuration the caller serves (from Load); a content equal to the one it
// was read from is not passed again.
//
// Only those files' directories are watched, and in them only those files
// and a Kubernetes volume's "..data" link: a log file or a data directory
// beside the configuration never triggers a read. A change is read once its
// files have been quiet for ReloadQuiet, and never later than ReloadMaxDelay
// after it. A content that fails to load is passed as an error (the caller
// keeps serving the previous configuration). When onChange returns an error,
// the content counts as not applied, and the next change to a watched file
// passes it again, even unchanged.
func Watch(ctx context.Context, path string, loaded *Workspace, onChange func(*Workspace, error) error) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	fw := &fileWatch{fs: w, path: path, dirs: map[string]bool{filepath.Dir(path): true}}
	var applied [32]byte
	if loaded != nil {
		applied = loaded.source.digest
		fw.follow(loaded.source.files)
	}
	go func() {
		defer w.Close()
		d := debounce{quiet: ReloadQuiet, max: ReloadMaxDelay}
		// A first read at once: a change made between the caller's Load
		// and this watch is not missed.
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
				_ = onChange(nil, fmt.Errorf("watch %s: %w", path, err))
			case <-timer.C:
				d.fired()
				cfg, src, err := load(path)
				fw.follow(src.files)
				if src.digest == applied {
					continue
				}
				applied = src.digest
				if onChange(cfg, err) != nil {
					applied = [32]byte{}
				}
			}
		}
	}()
	return nil
}

// fileWatch is the set of files a configuration was read from, and the
// directories watched for them.
type fileWatch struct {
	fs   *fsnotify.Watcher
	path string
	// files are the configuration file, its key files and the "..data"
	// links of their directories, cleaned.
	files map[string]bool
	dirs  map[string]bool
}

// follow watches files (the last read's) and their directories, and stops
// watching directories none of them is in any longer. The configuration
// file's directory is always watched.
func (f *fileWatch) follow(files []string) {
	f.files = map[string]bool{filepath.Clean(f.path): true}
	dirs := map[string]bool{filepath.Dir(f.path): true}
	for _, name := range files {
		f.files[filepath.Clean(name)] = true
		dirs[filepath.Dir(name)] = true
	}
	for dir := range dirs {
		f.files[filepath.Join(dir, dataLink)] = true
		if !f.dirs[dir] {
			// A key file's directory that cannot be watched is a key file
			// that cannot be read: the load reports that.
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
