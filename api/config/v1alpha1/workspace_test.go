package v1alpha1_test

import (
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
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
	if !ok || cms.SecretHash != config.HashSecret(samples.CMSSecret) {
		t.Fatal("the sample cms secret does not match its hash")
	}
	wire, _ := w.ConnectionByClientID(samples.WireClientID)
	if wire.SecretHash != config.HashSecret(samples.WireSecret) {
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

// TestSecretLength: a secret under 32 bytes is refused by the check the
// operator applies, and never matches at the token endpoint, even when the
// configuration holds its hash.
