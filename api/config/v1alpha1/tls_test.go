package v1alpha1_test

import (
	"strings"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/certgen"
)

// TestWorkspaceTLSNamesOnlyWhatItsCertificateCovers: a workspace's own
// key pair is accepted for the host names its certificate covers (exact,
// or one label under a wildcard of it), and refused with every problem
// named for a name it does not cover, a malformed or repeated name, no
// name at all, or a key that is not the certificate's.
func TestWorkspaceTLSNamesOnlyWhatItsCertificateCovers(t *testing.T) {
	ca, err := certgen.NewCA("brands CA")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Sign(certgen.Leaf{CommonName: "news", Hosts: []string{"news.brand.example", "*.wire.brand.example"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Sign(certgen.Leaf{CommonName: "other", Hosts: []string{"news.brand.example"}})
	if err != nil {
		t.Fatal(err)
	}
	workspace := func(tls *config.WorkspaceTLS) *config.Workspace {
		w := &config.Workspace{ID: "news", SigningKey: "0123456789abcdef0123456789abcdef", TLS: tls}
		w.Default()
		return w
	}
	good := &config.WorkspaceTLS{Certificate: string(pair.CertPEM), Key: string(pair.KeyPEM),
		Hosts: []string{"news.brand.example", "agency.wire.brand.example", "*.wire.brand.example"}}
	if err := workspace(good).Validate(); err != nil {
		t.Fatalf("a pair for names its certificate covers: %v", err)
	}

	bad := &config.WorkspaceTLS{Certificate: string(pair.CertPEM), Key: string(pair.KeyPEM),
		Hosts: []string{"sport.brand.example", "a.b.wire.brand.example", "News.Brand.Example", "news.brand.example", "news.brand.example", "*.brand.example"}}
	err = workspace(bad).Validate()
	for _, want := range []string{`hosts[0] "sport.brand.example" is not a name the certificate covers`,
		`hosts[1] "a.b.wire.brand.example" is not`, `hosts[2] "News.Brand.Example" must be a lower-case DNS name`,
		`hosts[4] "news.brand.example" is named twice`, `hosts[5] "*.brand.example" is not`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := workspace(&config.WorkspaceTLS{Certificate: string(pair.CertPEM), Key: string(pair.KeyPEM)}).Validate(); err == nil || !strings.Contains(err.Error(), "hosts must name 1 to 32") {
		t.Errorf("no host name: %v", err)
	}
	mismatched := &config.WorkspaceTLS{Certificate: string(other.CertPEM), Key: string(pair.KeyPEM), Hosts: []string{"news.brand.example"}}
	if err := workspace(mismatched).Validate(); err == nil || !strings.Contains(err.Error(), "tls: the key pair") {
		t.Errorf("another certificate's key: %v", err)
	}
}
