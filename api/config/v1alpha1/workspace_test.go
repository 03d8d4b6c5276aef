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

// TestTopicLimits: topic.maxBytes reads as a quantity or a number of
// bytes, and a limit that is negative, too small to hold a few of the
// largest messages, or beyond any store is refused with its bounds.
func TestTopicLimits(t *testing.T) {
	const head = "workspace: w1\nsigningKey: 0123456789abcdef0123456789abcdef\n"
	for doc, want := range map[string]int64{
		"topic: {maxBytes: 10Gi, maxMessages: 5000}": 10 << 30,
		"topic: {maxBytes: 1048576}":                 1 << 20,
		"topic: {maxMessages: 1}":                    0,
		"":                                           0,
	} {
		w, err := config.Parse([]byte(head + doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := w.Topic.Bytes(); got != want {
			t.Errorf("%q: maxBytes %d bytes, want %d", doc, got, want)
		}
	}
	if w, err := config.Parse([]byte(head + "topic: {maxAge: 720h}")); err != nil || w.Topic.MaxAge.Duration != 30*24*time.Hour {
		t.Errorf("topic.maxAge 720h: %v, %v", w, err)
	}
	for doc, want := range map[string]string{
		"topic: {maxBytes: -1Gi}":                        "topic.maxBytes -1Gi must be between 1Mi and 1Pi",
		"topic: {maxBytes: 1000}":                        "topic.maxBytes 1k must be between 1Mi and 1Pi",
		"topic: {maxBytes: 2Pi}":                         "topic.maxBytes 2Pi must be between 1Mi and 1Pi",
		"topic: {maxBytes: 1E}":                          "topic.maxBytes 1E must be between 1Mi and 1Pi",
		"topic: {maxMessages: -5}":                       "topic.maxMessages -5 must be between 1 and 1000000000000",
		"topic: {maxMessages: 1000000000001}":            "topic.maxMessages 1000000000001 must be between 1 and 1000000000000",
		"topic: {maxBytes: lots}":                        "quantities must match",
		"topic: {maxAge: 24h}":                           "topic.maxAge 24h0m0s is shorter than idempotencyWindow 168h0m0s",
		"idempotencyWindow: 336h\ntopic: {maxAge: 200h}": "topic.maxAge 200h0m0s is shorter than idempotencyWindow 336h0m0s",
		"topic: {maxAge: -1h}":                           "topic.maxAge -1h0m0s is shorter",
		"topic: {maxMessages: 5, maxRecords: 1}":         "unknown field",
	} {
		_, err := config.Parse([]byte(head + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", doc, err, want)
		}
	}
}
