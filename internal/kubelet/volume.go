// Package kubelet plays, for tests, the part of kubelet that writes a pod's
// ConfigMap, Secret and projected volumes. Kubelet's atomic writer keeps
// the files in a timestamped directory, points the "..data" symlink at it
// and makes every file a symlink through "..data"; an update writes a new
// timestamped directory and renames a fresh symlink over "..data", so a
// reader sees all of the old files or all of the new ones, never a mix.
// A process watching the directory sees that swap as its only change.
package kubelet

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// dataLink is the symlink that points at the current timestamped directory.
const dataLink = "..data"

// WriteVolume makes the files of dir exactly files (name → content) the
// way kubelet's atomic writer does, creating dir when it does not exist.
// Names are plain file names. Files are written with mode.
func WriteVolume(dir string, files map[string][]byte, mode os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name := range files {
		if name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, "..") {
			return fmt.Errorf("volume file name %q: must be a plain name, not starting with \"..\"", name)
		}
	}
	oldData, _ := os.Readlink(filepath.Join(dir, dataLink))

	// The new content goes into a directory of its own first.
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), content, mode); err != nil {
			return err
		}
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}

	// The swap: one rename of a symlink over "..data".
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return err
	}

	// The visible names point through "..data"; names no longer in the
	// volume go, and so does the previous content.
	for _, name := range slices.Sorted(maps.Keys(files)) {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if oldData != "" && oldData != filepath.Base(ts) {
		return os.RemoveAll(filepath.Join(dir, oldData))
	}
	return nil
}
