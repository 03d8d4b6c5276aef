// Package image builds the storybus container image without a container
// engine and without pulling a base image.
//
// The image is made from scratch and matches the repository's Dockerfile,
// which puts the same binary on gcr.io/distroless/static:nonroot: one layer
// holds the static storybus binary at /usr/local/bin/storybus, /etc/passwd
// and /etc/group naming root and the non-root user 65532, that user's home
// and a /tmp; the image runs as 65532:65532 with the binary as its entry
// point and --help as its default argument. There is no CA bundle: the
// binary carries its own fallback roots. The same binary, version and
// creation time always give the same image digest.
//
// The image is written as a docker-compatible tarball, which docker load,
// kind load image-archive and crane push accept.
package image

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// What the image holds and how it runs, as in the Dockerfile.
const (
	// BinaryPath is where the image holds the storybus binary. The chart
	// and the operator run the command storybus, found on the image's PATH.
	BinaryPath = "/usr/local/bin/storybus"
	// NonRootID is the uid and gid the image runs as: distroless's nonroot.
	NonRootID = 65532
	// NonRootName is the name of the non-root user and of its group.
	NonRootName = "nonroot"
	// NonRootHome is the non-root user's home directory.
	NonRootHome = "/home/nonroot"
	// User is the image's user, numeric so that Kubernetes can check
	// runAsNonRoot.
	User = "65532:65532"
	// DefaultArg is the image's default argument: with no arguments of
	// its own the image prints the subcommands.
	DefaultArg = "--help"
	// SearchPath is the image's PATH.
	SearchPath = "/usr/local/bin:/usr/bin:/bin"
	// Source is the repository the image is built from, its
	// org.opencontainers.image.source label.
	Source = "https://github.com/storybus/storybus"
	// MainPackage is the package a storybus binary is built from.
	MainPackage = "github.com/storybus/storybus/cmd/storybus"
)

// Options describe the image to build around a storybus binary.
type Options struct {
	// Arch is the GOARCH the binary is built for: the image's
	// architecture.
	Arch string
	// Version is the storybus version, the image's
	// org.opencontainers.image.version label; empty leaves it out.
	Version string
	// Created is the image's creation time and the modification time of
	// every file in it. The zero time stands for the Unix epoch.
	Created time.Time
}

// BinaryArch checks that contents are a storybus binary that runs in an
// image from scratch, built from the storybus command for Linux with cgo
// off (hence static), and returns the GOARCH it was built for.
func BinaryArch(contents []byte) (string, error) {
	info, err := buildinfo.Read(bytes.NewReader(contents))
	if err != nil {
		return "", fmt.Errorf("not a Go binary: %w", err)
	}
	if info.Path != MainPackage {
		return "", fmt.Errorf("binary built from %s, want %s", info.Path, MainPackage)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if goos := settings["GOOS"]; goos != "linux" {
		return "", fmt.Errorf("binary built for GOOS=%s, want linux", goos)
	}
	if cgo := settings["CGO_ENABLED"]; cgo != "0" {
		return "", fmt.Errorf("binary built with CGO_ENABLED=%s, want 0: an image from scratch has no C library", cgo)
	}
	return settings["GOARCH"], nil
}

// Build returns the image holding binary, a static storybus binary built
// for linux/opts.Arch.
func Build(binary []byte, opts Options) (v1.Image, error) {
	if opts.Arch == "" {
		return nil, errors.New("no architecture given")
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC().Truncate(time.Second)

	files, err := layerTar(binary, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "storybus image: " + BinaryPath + ", /etc/passwd, /etc/group, " + NonRootHome + ", /tmp",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = "linux"
	cf.Architecture = opts.Arch
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{DefaultArg},
		Env:        []string{"PATH=" + SearchPath},
		WorkingDir: "/",
		Labels:     labels(opts.Version),
	}
	return mutate.ConfigFile(img, cf)
}

// License is the SPDX identifier of the repository's LICENSE, the image's
// org.opencontainers.image.licenses label.
const License = "Apache-2.0"

// labels returns the image's OCI labels, with version unless it is empty.
func labels(version string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    "storybus",
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.licenses": License,
	}
	if version != "" {
		l["org.opencontainers.image.version"] = version
	}
	return l
}

// Write writes img to path as a docker-compatible tarball named tag.
func Write(path string, tag name.Tag, img v1.Image) error {
	return tarball.WriteToFile(path, tag, img)
}

// layerTar returns the image's one layer, uncompressed: every entry owned
// by root unless said otherwise, and modified at created.
func layerTar(binary []byte, created time.Time) ([]byte, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("%[1]s:x:%[2]d:%[2]d:%[1]s:%[3]s:/sbin/nologin\n", NonRootName, NonRootID, NonRootHome)
	group := "root:x:0:\n" +
		fmt.Sprintf("%s:x:%d:\n", NonRootName, NonRootID)
	entries := []struct {
		name     string
		mode     int64
		owner    int
		contents []byte
		dir      bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, contents: []byte(group)},
		{name: "etc/passwd", mode: 0o644, contents: []byte(passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(NonRootHome, "/") + "/", mode: 0o700, owner: NonRootID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, contents: binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.owner,
			Gid:     e.owner,
			ModTime: created,
		}
		if e.dir {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.contents))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
