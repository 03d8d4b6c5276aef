package kubelet_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/storybus/storybus/internal/kubelet"
)

func TestWriteVolumeSwapsAtomically(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := kubelet.WriteVolume(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || read("a") != "1" || read("b") != "2" {
		t.Fatalf("first write: %v", err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != filepath.Join("..data", "a") {
		t.Fatalf("a links to %q, want through ..data", target)
	}
	if err := kubelet.WriteVolume(dir, map[string][]byte{"a": []byte("3"), "c": []byte("4")}, 0o644); err != nil {
		t.Fatal(err)
	}
	second, _ := os.Readlink(filepath.Join(dir, "..data"))
	if second == first || read("a") != "3" || read("c") != "4" {
		t.Fatalf("second write: ..data %s → %s", first, second)
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Fatalf("a removed key is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Fatalf("the previous content is still there: %v", err)
	}
	if err := kubelet.WriteVolume(dir, map[string][]byte{"../x": nil}, 0o644); err == nil {
		t.Fatal("a path escaping the volume was written")
	}
}
