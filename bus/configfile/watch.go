package configfile

import (
	"context"
	"fmt"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/filewatch"
)

// Watch calls onChange each time the content of the configuration file at
// path, or of a key file it names, changes, until ctx ends. loaded is the
// configuration file the caller serves (from Open); a content equal to the one it
// was read from is not passed again.
//
// Only those files' directories are watched, and in them only those files
// and a Kubernetes volume's "..data" link; a change is read once its files
// have been quiet for filewatch.Quiet, and never later than
// filewatch.MaxDelay after it (see package filewatch). A content that fails
// to load is passed as an error (the caller keeps serving the previous
// configuration). When onChange returns an error, the content counts as not
// applied, and the next change to a watched file passes it again, even
// unchanged.
func Watch(ctx context.Context, path string, loaded *File, onChange func(*config.Workspace, error) error) error {
	files := []string{path}
	var applied [32]byte
	if loaded != nil {
		files = append(files, loaded.source.files...)
		applied = loaded.source.digest
	}
	read := func() filewatch.Reading {
		cfg, src, err := load(path)
		// The configuration file stays watched when it could not be read.
		return filewatch.Reading{
			Files:  append([]string{path}, src.files...),
			Digest: src.digest,
			Apply:  func() error { return onChange(cfg, err) },
		}
	}
	err := filewatch.Watch(ctx, files, applied, read, func(err error) {
		_ = onChange(nil, fmt.Errorf("watch %s: %w", path, err))
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	return nil
}
