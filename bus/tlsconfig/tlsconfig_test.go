package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/internal/certgen"
	"github.com/storybus/storybus/internal/filewatch"
	"github.com/storybus/storybus/internal/testutil"
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

// TestWatchRenewsWhileANeighbourIsWritten renews the pair as kubelet does
// (both files written in a new directory, then the "..data" link swapped)
// while another file in the certificate's directory is written every
// 50 ms. The neighbour reloads nothing, and the renewed pair is in use
// within filewatch.MaxDelay, not when the writer stops.
func TestWatchRenewsWhileANeighbourIsWritten(t *testing.T) {
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	publish := func(version string) *big.Int {
		p, err := ca.Sign(certgen.Leaf{CommonName: "bus", Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, version), 0o700); err != nil {
			t.Fatal(err)
		}
		if os.WriteFile(filepath.Join(dir, version, "tls.crt"), p.CertPEM, 0o600) != nil ||
			os.WriteFile(filepath.Join(dir, version, "tls.key"), p.KeyPEM, 0o600) != nil {
			t.Fatal("writing the pair")
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		leaf, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Leaf.SerialNumber
	}
	first := publish("..v1")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if os.Symlink("..data/tls.crt", certFile) != nil || os.Symlink("..data/tls.key", keyFile) != nil {
		t.Fatal("linking the pair")
	}
	pair, err := tlsconfig.LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatal("the pair loaded is not the one written")
	}
	reloads := make(chan error, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := pair.Watch(ctx, func(err error) { reloads <- err }); err != nil {
		t.Fatal(err)
	}

	testutil.KeepWriting(t, filepath.Join(dir, "neighbour.log"), 50*time.Millisecond)

	// Ten quiet periods and more of neighbour writes: a watcher that read
	// on any event would have reloaded several times.
	select {
	case err := <-reloads:
		t.Fatalf("reloaded for a neighbour file: %v", err)
	case <-time.After(10 * filewatch.Quiet):
	}

	renewed := time.Now()
	second := publish("..v2")
	// The bound is filewatch.MaxDelay; the deadline is loose for a busy
	// machine, but far shorter than the writer's 30 s.
	select {
	case err := <-reloads:
		if err != nil {
			t.Fatalf("the renewed pair was refused: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the renewed pair was not read while the neighbour was written")
	}
	if pair.Leaf().SerialNumber.Cmp(second) != 0 {
		t.Fatal("the renewed pair is not in use")
	}
	t.Logf("renewed pair in use after %s with a neighbour written every 50ms", time.Since(renewed))
}
