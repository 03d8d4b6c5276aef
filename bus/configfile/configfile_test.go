package configfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/storybus/storybus/bus/configfile"
)

func TestSigningKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ws.yaml")
	if err := os.WriteFile(cfg, []byte("workspace: w1\nsigningKeyFile: "+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := configfile.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.SigningKey != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("key %q", w.SigningKey)
	}
}

func TestSecretAccessKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "cms.secretAccessKey")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(key, "wJalrXUtnFEMI/K7MDENG\n")
	cfg := filepath.Join(dir, "ws.yaml")
	write(cfg, "workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\nconnections:\n"+
		"  - {name: cms, iam: {accessKeyID: AKIDEXAMPLE, secretAccessKeyFile: "+key+"}}\n"+
		"  - {name: wire, iam: {accessKeyID: AKIDWIRE, secretAccessKey: inline}}\n")
	w, err := configfile.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Connections[0].IAM.SecretAccessKey; got != "wJalrXUtnFEMI/K7MDENG" {
		t.Fatalf("cms key %q", got)
	}
	if got := w.Connections[1].IAM.SecretAccessKey; got != "inline" {
		t.Fatalf("wire key %q", got)
	}
	// Every load reads the file again: a rotated key is what a reload serves.
	write(key, "rotated")
	if w, err = configfile.Load(cfg); err != nil || w.Connections[0].IAM.SecretAccessKey != "rotated" {
		t.Fatalf("after rotation: %v %+v", err, w)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if _, err := configfile.Load(cfg); err == nil || !strings.Contains(err.Error(), "secretAccessKeyFile") {
		t.Fatalf("a missing key file loaded: %v", err)
	}
}

func TestLoadErrorNamesTheWorkspace(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"invalid", "workspace: newsroom\nsigningKey: short\n", "newsroom"},
		{"unknown field", "workspace: newsroom\nsigningKey: 0123456789abcdef0123456789abcdef\ntypo: 1\n", "newsroom"},
		{"missing key file", "workspace: newsroom\nsigningKeyFile: " + filepath.Join(dir, "absent") + "\n", "newsroom"},
		{"not YAML", "connections: [cms\n", ""},
		{"no workspace", "signingKey: short\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "workspace.yaml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := configfile.Load(path)
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("error %q does not start with the file", err)
			}
			got, ok := configfile.WorkspaceOf(err)
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("WorkspaceOf(%v) = %q %v, want %q", err, got, ok, tc.want)
			}
		})
	}
	if _, ok := configfile.WorkspaceOf(os.ErrNotExist); ok {
		t.Fatal("a read error names a workspace")
	}
}
