// Command build-image builds the storybus image from a static storybus
// binary, without a container engine and without pulling a base image, and
// writes it as a docker-compatible tarball. `make image` runs it:
//
//	build-image -binary bin/image/storybus -tag ghcr.io/storybus/storybus:0.1.0 -o bin/storybus-image.tar
//
// The image's architecture is the one the binary was built for. Its
// org.opencontainers.image.version label is the tag's version. Its creation
// time, and every file's modification time, is SOURCE_DATE_EPOCH when set,
// the Unix epoch otherwise, so the same binary always gives the same image.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/storybus/storybus/internal/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("build-image", flag.ContinueOnError)
	flags.SetOutput(stderr)
	binaryPath := flags.String("binary", "", "the static storybus binary to put in the image (CGO_ENABLED=0 GOOS=linux go build ./cmd/storybus)")
	tagName := flags.String("tag", "", "the image's name and tag, e.g. ghcr.io/storybus/storybus:0.1.0; the tag is also its version label")
	out := flags.String("o", "", "the tarball to write, for docker load, kind load image-archive or crane push")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *binaryPath == "" || *tagName == "" || *out == "" || flags.NArg() > 0 {
		flags.Usage()
		return errors.New("-binary, -tag and -o are required, and nothing else")
	}
	tag, err := name.NewTag(*tagName)
	if err != nil {
		return err
	}
	created, err := sourceDate()
	if err != nil {
		return err
	}
	binary, err := os.ReadFile(*binaryPath)
	if err != nil {
		return err
	}
	arch, err := image.BinaryArch(binary)
	if err != nil {
		return fmt.Errorf("%s: %w", *binaryPath, err)
	}
	img, err := image.Build(binary, image.Options{Arch: arch, Version: tag.TagStr(), Created: created})
	if err != nil {
		return err
	}
	if err := image.Write(*out, tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	info, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s, linux/%s, %d bytes\n  digest   %s\n  image id %s\n", *out, tag, arch, info.Size(), digest, id)
	return nil
}

// sourceDate is the image's creation time: SOURCE_DATE_EPOCH (seconds
// since the Unix epoch) when set, the Unix epoch otherwise.
func sourceDate() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		return time.Unix(0, 0), nil
	}
	seconds, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since the Unix epoch", epoch)
	}
	return time.Unix(seconds, 0), nil
}
