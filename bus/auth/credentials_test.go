package auth_test

import (
	"strings"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
)

func TestHashSecret(t *testing.T) {
	const secret = "s3cret-0123456789abcdef0123456789"
	c := config.Connection{SecretHash: config.HashSecret(secret)}
	if !auth.CheckSecret(&c, secret) || auth.CheckSecret(&c, secret+" ") || auth.CheckSecret(&c, "") {
		t.Fatal("CheckSecret")
	}
	if auth.CheckSecret(&config.Connection{SecretHash: secret}, secret) {
		t.Fatal("an unhashed secret matched")
	}
}

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
			if auth.CheckSecret(&c, tc.secret) != tc.ok {
				t.Fatalf("CheckSecret(%q) = %v, want %v", tc.secret, !tc.ok, tc.ok)
			}
		})
	}
}

// TestLoadErrorNamesTheWorkspace: a file that does not load names its
// workspace whenever it decoded far enough to tell, even with an unknown
// field; never when it does not decode.
