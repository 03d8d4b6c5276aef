package tlsconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/internal/certgen"
)

// TestReloadRefusesABadPairAndKeepsTheOld reloads a pair whose files were
// replaced by an expired certificate, then by a certificate with another
// pair's key: both are refused and the pair in use stays.
func TestReloadRefusesABadPairAndKeepsTheOld(t *testing.T) {
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	sign := func(notAfter time.Time) certgen.Pair {
		p, err := ca.Sign(certgen.Leaf{CommonName: "bus", Hosts: []string{"127.0.0.1"}, NotAfter: notAfter})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(cert, key []byte) {
		if os.WriteFile(certFile, cert, 0o600) != nil || os.WriteFile(keyFile, key, 0o600) != nil {
			t.Fatal("writing the pair")
		}
	}
	good := sign(time.Time{})
	write(good.CertPEM, good.KeyPEM)
	pair, err := tlsconfig.LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	inUse := pair.Leaf().SerialNumber

	expired := sign(time.Now().Add(-time.Minute))
	write(expired.CertPEM, expired.KeyPEM)
	if err := pair.Reload(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired certificate: %v", err)
	}
	other := sign(time.Time{})
	write(other.CertPEM, good.KeyPEM)
	if err := pair.Reload(); err == nil {
		t.Fatal("a certificate with another pair's key was loaded")
	}
	if pair.Leaf().SerialNumber.Cmp(inUse) != 0 {
		t.Fatal("a refused pair replaced the one in use")
	}
	if _, err := tlsconfig.LoadKeyPair(certFile, keyFile); err == nil {
		t.Fatal("LoadKeyPair accepted a mismatched pair")
	}
}
