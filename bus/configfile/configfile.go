// Package configfile reads workspace configuration files for storybus
// serve and storybus dev (the document is api/config/v1alpha1's): a YAML
// file and the key files it names (signingKeyFile, an IAM connection's
// secretAccessKeyFile), and watches them for changes.
package configfile

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/filewatch"
)

// Load reads, defaults and validates a workspace configuration file.
func Load(path string) (*config.Workspace, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return f.Workspace, nil
}

// File is a configuration file as it was read: its workspace, and the
// files it was read from, which Watch watches.
type File struct {
	// Path is the configuration file.
	Path string
	// Workspace is the configuration the file holds.
	Workspace *config.Workspace
	// source is what it was read from.
	source source
}

// Open reads, defaults and validates a workspace configuration file, and
// remembers what it read for Watch.
func Open(path string) (*File, error) {
	w, src, err := load(path)
	if err != nil {
		return nil, err
	}
	return &File{Path: path, Workspace: w, source: src}, nil
}

// source is what a configuration was read from: the configuration file and
// the key files it names, in the order read, and the SHA-256 of their names
// and contents (or read errors). Watch reloads only when the digest changes.
type source struct {
	files  []string
	digest [32]byte
}

// load is Load, and also returns the source read so far, whether or not the
// configuration loads.
func load(path string) (*config.Workspace, source, error) {
	r := filewatch.NewReader()
	w, err := loadWith(path, func(name string) (string, error) {
		b, err := r.ReadFile(name)
		return string(b), err
	})
	rd := r.Reading(nil)
	return w, source{files: rd.Files, digest: rd.Digest}, err
}

func loadWith(path string, read func(string) (string, error)) (*config.Workspace, error) {
	b, err := read(path)
	if err != nil {
		return nil, err
	}
	w, err := config.Decode([]byte(b))
	if err != nil {
		return nil, &LoadError{File: path, Workspace: workspaceOf([]byte(b)), Err: err}
	}
	if w.SigningKeyFile != "" {
		key, err := read(w.SigningKeyFile)
		if err != nil {
			return nil, &LoadError{File: path, Workspace: w.ID, Err: fmt.Errorf("signingKeyFile: %w", err)}
		}
		w.SigningKey = strings.TrimSpace(key)
	}
	for i := range w.Connections {
		iam := w.Connections[i].IAM
		if iam == nil || iam.SecretAccessKeyFile == "" {
			continue
		}
		key, err := read(iam.SecretAccessKeyFile)
		if err != nil {
			return nil, &LoadError{File: path, Workspace: w.ID, Err: fmt.Errorf("connections[%d].iam.secretAccessKeyFile: %w", i, err)}
		}
		iam.SecretAccessKey = strings.TrimSpace(key)
	}
	if err := w.Validate(); err != nil {
		return nil, &LoadError{File: path, Workspace: w.ID, Err: err}
	}
	return w, nil
}

// LoadError is a configuration file that was read but did not load.
type LoadError struct {
	// File is the configuration file.
	File string
	// Workspace is the workspace id the file names, when it decoded far
	// enough to tell; empty otherwise.
	Workspace string
	Err       error
}

func (e *LoadError) Error() string { return e.File + ": " + e.Err.Error() }

// Unwrap returns the problem.
func (e *LoadError) Unwrap() error { return e.Err }

// WorkspaceOf returns the workspace id a Load error names, when the file
// decoded far enough to tell.
func WorkspaceOf(err error) (string, bool) {
	var le *LoadError
	if errors.As(err, &le) && le.Workspace != "" {
		return le.Workspace, true
	}
	return "", false
}

// workspaceOf reads the workspace id alone from a document that does not
// decode strictly; empty when it cannot.
func workspaceOf(b []byte) string {
	var doc struct {
		ID string `json:"workspace"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return ""
	}
	return doc.ID
}
