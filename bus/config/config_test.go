package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/config"
	"github.com/storybus/storybus/config/dev"
	"github.com/storybus/storybus/config/samples"
)

func TestSampleParses(t *testing.T) {
	w, err := config.Parse(dev.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != samples.WorkspaceID || w.IdempotencyWindow.Duration != 168*time.Hour || w.Ownership.NotOwner != config.NotOwnerTolerate {
		t.Fatalf("sample %+v", w)
	}
	cms, ok := w.ConnectionByClientID(samples.CMSClientID)
	if !ok || !cms.CheckSecret(samples.CMSSecret) || cms.CheckSecret(samples.WireSecret) {
		t.Fatal("the sample cms secret does not match its hash")
	}
	wire, _ := w.ConnectionByClientID(samples.WireClientID)
	if !wire.CheckSecret(samples.WireSecret) {
		t.Fatal("the sample wire secret does not match its hash")
	}
}

func TestDefaults(t *testing.T) {
	w, err := config.Parse([]byte("workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\nconnections: [{name: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w.TokenTTL.Duration != time.Hour || w.Connections[0].ClientID != "a" || !w.Connections[0].IsActive() || w.Kind != config.Kind {
		t.Fatalf("defaults %+v", w)
	}
}

func TestValidationReportsEveryProblem(t *testing.T) {
	_, err := config.Parse([]byte(`
workspace: Bad_ID
idempotencyWindow: 24h
tokenTTL: 1s
signingKey: short
ownership: {notOwner: sometimes, owners: [{storyIDPattern: "(", systemID: cms}]}
firewall: {blockedPatterns: ["["]}
policyConcurrency: 65
connections:
  - {name: a, secretHash: md5:abc}
  - {name: a}
  - {name: long, clientID: ` + strings.Repeat("x", 513) + `}
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"DNS label", "under the minimum of 168h", "signingKey", "tolerate or refuse",
		"storyIDPattern", "blockedPatterns", "64 lower-case hex", `"a" is used twice`, "tokenTTL",
		"policyConcurrency 65", "clientID is 513 bytes, over 512"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestUnknownFieldsAreErrors(t *testing.T) {
	if _, err := config.Parse([]byte("workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\nconections: []\n")); err == nil {
		t.Fatal("a misspelt field was ignored")
	}
}

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
	w, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if w.SigningKey != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("key %q", w.SigningKey)
	}
}

func TestHashSecret(t *testing.T) {
	const secret = "s3cret-0123456789abcdef0123456789"
	c := config.Connection{SecretHash: config.HashSecret(secret)}
	if !c.CheckSecret(secret) || c.CheckSecret(secret+" ") || c.CheckSecret("") {
		t.Fatal("CheckSecret")
	}
	if (&config.Connection{SecretHash: secret}).CheckSecret(secret) {
		t.Fatal("an unhashed secret matched")
	}
}

// TestSecretLength: a secret under 32 bytes is refused by the check the
// operator applies, and never matches at the token endpoint, even when the
// configuration holds its hash.
func TestSecretLength(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string
		ok     bool
	}{
		{"empty", "", false},
		{"a word", "s3cret", false},
		{"31 bytes", strings.Repeat("x", 31), false},
		{"32 bytes", strings.Repeat("x", 32), true},
		{"32 random bytes, hex", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", true},
		{"31 bytes of multi-byte characters count as bytes", strings.Repeat("é", 15) + "x", false},
		{"16 two-byte characters are 32 bytes", strings.Repeat("é", 16), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := config.CheckSecretLength(tc.secret)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckSecretLength(%q) = %v, want ok %v", tc.secret, err, tc.ok)
			}
			if !tc.ok && !strings.Contains(err.Error(), "at least 32") {
				t.Fatalf("message %q does not say what is required", err)
			}
			c := config.Connection{SecretHash: config.HashSecret(tc.secret)}
			if c.CheckSecret(tc.secret) != tc.ok {
				t.Fatalf("CheckSecret(%q) = %v, want %v", tc.secret, !tc.ok, tc.ok)
			}
		})
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
	w, err := config.Load(cfg)
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
	if w, err = config.Load(cfg); err != nil || w.Connections[0].IAM.SecretAccessKey != "rotated" {
		t.Fatalf("after rotation: %v %+v", err, w)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(cfg); err == nil || !strings.Contains(err.Error(), "secretAccessKeyFile") {
		t.Fatalf("a missing key file loaded: %v", err)
	}
}

// TestLoadErrorNamesTheWorkspace: a file that does not load names its
// workspace whenever it decoded far enough to tell, even with an unknown
// field; never when it does not decode.
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
			_, err := config.Load(path)
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("error %q does not start with the file", err)
			}
			got, ok := config.WorkspaceOf(err)
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("WorkspaceOf(%v) = %q %v, want %q", err, got, ok, tc.want)
			}
		})
	}
	if _, ok := config.WorkspaceOf(os.ErrNotExist); ok {
		t.Fatal("a read error names a workspace")
	}
}
