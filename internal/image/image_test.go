package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// repoRoot is the repository's root, from this package's folder.
var repoRoot = filepath.Join("..", "..")

// buildStorybus builds the storybus binary as `make image` does: static,
// for Linux, here for the machine's own architecture so that it can run.
func buildStorybus(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "storybus")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/storybus")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildTarball builds the image of binary and writes it to a new tarball
// named tag, whose path it returns with the image.
func buildTarball(t *testing.T, binary []byte, arch string, tag name.Tag) (string, v1.Image) {
	t.Helper()
	img, err := Build(binary, Options{Arch: arch, Version: tag.TagStr()})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "storybus-image.tar")
	if err := Write(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p, img
}

// layerFile is one entry of the image's layer.
type layerFile struct {
	header   *tar.Header
	contents []byte
}

// layerFiles reads the image's only layer.
func layerFiles(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(hdr.Name, "/")] = layerFile{hdr, b}
	}
}

// dockerfileFinalStage returns the USER, ENTRYPOINT, CMD and COPY
// arguments of the repository's Dockerfile's last stage.
func dockerfileFinalStage(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stage := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		keyword, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch keyword {
		case "FROM":
			clear(stage)
		case "USER", "ENTRYPOINT", "CMD", "COPY":
			stage[keyword] = strings.TrimSpace(args)
		}
	}
	return stage
}

func execForm(t *testing.T, args string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("Dockerfile %s: want the exec (JSON) form: %v", args, err)
	}
	return v
}

func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the storybus binary")
	}
	binary := buildStorybus(t)
	arch, err := BinaryArch(binary)
	if err != nil {
		t.Fatal(err)
	}
	if arch != runtime.GOARCH {
		t.Fatalf("BinaryArch %s, want %s", arch, runtime.GOARCH)
	}
	tag, err := name.NewTag("ghcr.io/storybus/storybus:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	tarPath, built := buildTarball(t, binary, arch, tag)
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("the tarball does not load: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, img)
	epoch := time.Unix(0, 0).UTC()

	t.Run("tagged", func(t *testing.T) {
		manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarPath) })
		if err != nil {
			t.Fatal(err)
		}
		if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"ghcr.io/storybus/storybus:1.2.3"}) {
			t.Errorf("manifest.json %+v, want one image tagged ghcr.io/storybus/storybus:1.2.3", manifest)
		}
	})

	t.Run("config", func(t *testing.T) {
		c := cf.Config
		if c.User != "65532:65532" {
			t.Errorf("User %q, want 65532:65532", c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/storybus"}) {
			t.Errorf("Entrypoint %q, want [/usr/local/bin/storybus]", c.Entrypoint)
		}
		if !slices.Equal(c.Cmd, []string{"--help"}) {
			t.Errorf("Cmd %q, want [--help]", c.Cmd)
		}
		if !slices.Equal(c.Env, []string{"PATH=/usr/local/bin:/usr/bin:/bin"}) {
			t.Errorf("Env %q, want PATH=/usr/local/bin:/usr/bin:/bin alone", c.Env)
		}
		if c.WorkingDir != "/" {
			t.Errorf("WorkingDir %q, want /", c.WorkingDir)
		}
		if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
			t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
		}
		wantLabels := map[string]string{
			"org.opencontainers.image.title":    "storybus",
			"org.opencontainers.image.source":   "https://github.com/storybus/storybus",
			"org.opencontainers.image.version":  "1.2.3",
			"org.opencontainers.image.licenses": "Apache-2.0",
		}
		if !maps.Equal(c.Labels, wantLabels) {
			t.Errorf("Labels %v, want %v", c.Labels, wantLabels)
		}
		// The licenses label must name the repository's own licence.
		license, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(license), "Apache License") || !strings.Contains(string(license), "Version 2.0") {
			t.Errorf("LICENSE is not the Apache License 2.0 the licenses label says")
		}
		if !cf.Created.Time.Equal(epoch) {
			t.Errorf("created %v, want the Unix epoch", cf.Created.Time)
		}
		if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(epoch) {
			t.Errorf("history %+v, want one entry created at the Unix epoch", cf.History)
		}
	})

	t.Run("files", func(t *testing.T) {
		want := []string{"/etc", "/etc/group", "/etc/passwd", "/home", "/home/nonroot", "/tmp", "/usr", "/usr/local", "/usr/local/bin", "/usr/local/bin/storybus"}
		if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
			t.Errorf("layer holds %q, want %q", got, want)
		}
		for p, f := range files {
			if !f.header.ModTime.Equal(epoch) {
				t.Errorf("%s modified %v, want the Unix epoch", p, f.header.ModTime)
			}
			if owner := f.header.Uid; p != "/home/nonroot" && (owner != 0 || f.header.Gid != 0) {
				t.Errorf("%s owned by %d:%d, want root", p, owner, f.header.Gid)
			}
		}
		bin := files["/usr/local/bin/storybus"]
		if bin.header == nil || bin.header.Typeflag != tar.TypeReg || bin.header.Mode != 0o755 {
			t.Errorf("/usr/local/bin/storybus %+v, want a regular file with mode 0755", bin.header)
		}
		if !bytes.Equal(bin.contents, binary) {
			t.Errorf("/usr/local/bin/storybus holds %d bytes, not the %d of the built binary", len(bin.contents), len(binary))
		}
		if tmp := files["/tmp"].header; tmp == nil || tmp.Typeflag != tar.TypeDir || tmp.Mode != 0o1777 {
			t.Errorf("/tmp %+v, want a directory with mode 1777", tmp)
		}
		passwd := string(files["/etc/passwd"].contents)
		if !slices.Contains(strings.Split(passwd, "\n"), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin") {
			t.Errorf("/etc/passwd lacks the user nonroot, 65532, at home in /home/nonroot:\n%s", passwd)
		}
		if !strings.HasPrefix(passwd, "root:x:0:0:") {
			t.Errorf("/etc/passwd does not start with root:\n%s", passwd)
		}
		group := string(files["/etc/group"].contents)
		if !slices.Contains(strings.Split(group, "\n"), "nonroot:x:65532:") || !strings.HasPrefix(group, "root:x:0:") {
			t.Errorf("/etc/group lacks root or nonroot (65532):\n%s", group)
		}
		home := files["/home/nonroot"].header
		if home == nil || home.Typeflag != tar.TypeDir || home.Uid != 65532 || home.Gid != 65532 {
			t.Errorf("/home/nonroot %+v, want a directory owned by 65532:65532", home)
		}
	})

	t.Run("agrees with the Dockerfile", func(t *testing.T) {
		stage := dockerfileFinalStage(t)
		copied := strings.Fields(stage["COPY"])
		if len(copied) == 0 {
			t.Fatalf("Dockerfile's final stage copies nothing: %v", stage)
		}
		dockerBinary := copied[len(copied)-1]
		if _, ok := files[dockerBinary]; !ok {
			t.Errorf("the Dockerfile puts the binary at %s, the image does not", dockerBinary)
		}
		if !slices.Contains(strings.Split(strings.TrimPrefix(cf.Config.Env[0], "PATH="), ":"), path.Dir(dockerBinary)) {
			t.Errorf("%s is not on the image's %s: the chart runs the command storybus", path.Dir(dockerBinary), cf.Config.Env[0])
		}
		if cf.Config.User != stage["USER"] {
			t.Errorf("User %q, the Dockerfile's USER %q", cf.Config.User, stage["USER"])
		}
		if want := execForm(t, stage["ENTRYPOINT"]); !slices.Equal(cf.Config.Entrypoint, want) {
			t.Errorf("Entrypoint %q, the Dockerfile's %q", cf.Config.Entrypoint, want)
		}
		if want := execForm(t, stage["CMD"]); !slices.Equal(cf.Config.Cmd, want) {
			t.Errorf("Cmd %q, the Dockerfile's %q", cf.Config.Cmd, want)
		}
	})

	t.Run("reproducible", func(t *testing.T) {
		first, err := built.Digest()
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if loaded != first {
			t.Errorf("the tarball's image has digest %s, the built one %s", loaded, first)
		}
		againPath, again := buildTarball(t, binary, arch, tag)
		second, err := again.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if second != first {
			t.Errorf("the same binary gave the digests %s and %s", first, second)
		}
		a, errA := os.ReadFile(tarPath)
		b, errB := os.ReadFile(againPath)
		if err := errors.Join(errA, errB); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Error("the same binary gave two different tarballs")
		}
	})

	t.Run("runs", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("the image's binary runs on Linux")
		}
		bin := filepath.Join(t.TempDir(), "storybus")
		if err := os.WriteFile(bin, files[cf.Config.Entrypoint[0]].contents, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, cf.Config.Cmd...).CombinedOutput()
		if err != nil {
			t.Fatalf("storybus %s: %v\n%s", cf.Config.Cmd, err, out)
		}
		for _, sub := range []string{"serve", "dev", "operator", "token", "publish", "outbox", "consume", "bench"} {
			if !strings.Contains(string(out), "\n  "+sub+" ") {
				t.Errorf("storybus %s does not list the subcommand %s:\n%s", cf.Config.Cmd, sub, out)
			}
		}
	})
}

func TestBinaryArchRefuses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testBinary, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	for what, contents := range map[string][]byte{
		"a file that is not a Go binary": []byte("#!/bin/sh\necho storybus\n"),
		"another Go program":             testBinary,
	} {
		if arch, err := BinaryArch(contents); err == nil {
			t.Errorf("BinaryArch took %s, for %s", what, arch)
		}
	}
}

func TestBuildNeedsArch(t *testing.T) {
	if _, err := Build([]byte("binary"), Options{}); err == nil {
		t.Error("Build made an image of no architecture")
	}
}

func TestCreatedSetsEveryTime(t *testing.T) {
	created := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	img, err := Build([]byte("binary"), Options{Arch: "arm64", Version: "0.1.0", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Time.Equal(created) || cf.Architecture != "arm64" {
		t.Errorf("created %v on %s, want %v on arm64", cf.Created.Time, cf.Architecture, created)
	}
	for p, f := range layerFiles(t, img) {
		if !f.header.ModTime.Equal(created) {
			t.Errorf("%s modified %v, want %v", p, f.header.ModTime, created)
		}
	}
}
