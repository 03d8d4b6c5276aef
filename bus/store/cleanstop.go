package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile, in the embedded store's data directory, is locked by the
// process that serves the store, for as long as it runs.
const lockFile = "storybus.lock"

// LockDataDir takes the embedded store's data directory for this process:
// two processes serving one store would corrupt it, and the second would
// take the first's crash for a clean stop. The lock is held until the
// process ends (or the file is closed); an error says another process
// holds it.
func LockDataDir(dataDir string) (*os.File, error) {
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("the data directory %s is in use by another storybus process: %w", dataDir, err)
	}
	return f, nil
}

// cleanStopFile, in the embedded store's data directory, says that the
// store was last stopped cleanly: every record it held was flushed and on
// disk, so a start need not rebuild records from the topic.
const cleanStopFile = "storybus-clean-stop"

// TakeCleanStop reports whether the embedded store in dataDir was last
// stopped cleanly (MarkCleanStop), and removes the mark, so that a crash of
// the run about to start is never taken for a clean stop. Call it before
// StartEmbedded, and pass its answer as Options.CleanStart.
func TakeCleanStop(dataDir string) (bool, error) {
	err := os.Remove(filepath.Join(dataDir, cleanStopFile))
	switch {
	case err == nil:
		return true, syncDir(dataDir)
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// MarkCleanStop records, once the embedded server has shut down, that the
// store in dataDir stopped cleanly. The server flushed its files when it
// stopped, but not to the disk: everything is synced first, so that a
// power loss just after cannot leave the mark without the records.
func MarkCleanStop(dataDir string) error {
	syscall.Sync()
	f, err := os.Create(filepath.Join(dataDir, cleanStopFile))
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return syncDir(dataDir)
}

// syncDir makes a file's creation or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
