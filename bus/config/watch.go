package config

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls onChange with the reloaded configuration each time the file
// at path changes, until ctx ends. It watches the file's directory, so an
// editor's rename-over-write and a Kubernetes ConfigMap's symlink swap are
// both seen. Changes within debounce of each other are read once. A file
// that fails to load is passed as an error; the caller keeps serving the
// previous configuration.
func Watch(ctx context.Context, path string, debounce time.Duration, onChange func(*Workspace, error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				// A ConfigMap volume swaps a "..data" symlink; anything in
				// the directory may be the file's new content.
				if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
					continue
				}
				fire = time.After(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				onChange(nil, fmt.Errorf("watch %s: %w", path, err))
			case <-fire:
				fire = nil
				onChange(Load(path))
			}
		}
	}()
	return nil
}
