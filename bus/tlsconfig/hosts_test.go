package tlsconfig_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/storybus/storybus/bus/tlsconfig"
	"github.com/storybus/storybus/internal/certgen"
)

// pairFor signs a server pair for hosts.
func pairFor(t *testing.T, ca *certgen.CA, hosts ...string) *tls.Certificate {
	t.Helper()
	p, err := ca.Sign(certgen.Leaf{CommonName: hosts[0], Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestHostsPresentEachWorkspacesPairByName: a workspace's pair answers
// its host names, exactly and through a wildcard, whatever their case; a
// host name two workspaces claim is presented for neither, until one
// gives it up; a removed workspace's names are presented no more.
func TestHostsPresentEachWorkspacesPairByName(t *testing.T) {
	ca, err := certgen.NewCA("brands CA")
	if err != nil {
		t.Fatal(err)
	}
	news := pairFor(t, ca, "news.brand.example", "*.wire.brand.example")
	sport := pairFor(t, ca, "sport.brand.example", "news.brand.example")
	h := tlsconfig.NewHosts()
	if contested := h.Set("news", news, []string{"news.brand.example", "*.wire.brand.example"}); len(contested) != 0 {
		t.Fatalf("contested %v with one workspace", contested)
	}
	for _, name := range []string{"news.brand.example", "NEWS.Brand.Example.", "a.wire.brand.example"} {
		if got := h.Lookup(name); got != news {
			t.Errorf("Lookup(%q) is not news's pair", name)
		}
	}
	for _, name := range []string{"", "brand.example", "wire.brand.example", "a.b.wire.brand.example", "sport.brand.example"} {
		if got := h.Lookup(name); got != nil {
			t.Errorf("Lookup(%q) presented a pair", name)
		}
	}

	// sport claims news's name too: neither is presented for it.
	contested := h.Set("sport", sport, []string{"sport.brand.example", "news.brand.example"})
	if !slices.Equal(contested, []string{"news.brand.example"}) {
		t.Errorf("contested %v, want news.brand.example", contested)
	}
	if h.Lookup("news.brand.example") != nil {
		t.Error("a host name two workspaces claim is presented")
	}
	// Nor by a third workspace's wildcard over it.
	h.Set("wild", pairFor(t, ca, "*.brand.example"), []string{"*.brand.example"})
	if h.Lookup("news.brand.example") != nil {
		t.Error("a host name two workspaces claim is presented with a third's wildcard")
	}
	if h.Lookup("other.brand.example") == nil {
		t.Error("the wildcard does not answer a name no one else claims")
	}
	h.Remove("wild")
	if h.Lookup("sport.brand.example") != sport || h.Lookup("x.wire.brand.example") != news {
		t.Error("the names only one workspace claims are not presented")
	}
	// sport gives it up: news has it back.
	h.Set("sport", sport, []string{"sport.brand.example"})
	if h.Lookup("news.brand.example") != news {
		t.Error("news does not get its name back once sport gives it up")
	}
	h.Remove("news")
	if h.Lookup("news.brand.example") != nil || h.Lookup("x.wire.brand.example") != nil {
		t.Error("a removed workspace's pair is still presented")
	}
}

// TestServerKeepsItsOwnNames: through a real handshake, a workspace's
// pair answers its host name, the bus's own pair answers every other name
// (none at all, the bus's own, one no workspace claims), and a workspace
// that claims the bus's own name is not presented for it.
func TestServerKeepsItsOwnNames(t *testing.T) {
	ca, err := certgen.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	own, err := ca.Sign(certgen.Leaf{CommonName: "bus", Hosts: []string{"127.0.0.1", "pool.storybus.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	pair := loadPair(t, dir, own)
	hosts := tlsconfig.NewHosts()
	brand := pairFor(t, ca, "news.brand.example", "pool.storybus.svc")
	hosts.Set("news", brand, []string{"news.brand.example", "pool.storybus.svc"})

	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsconfig.Server(pair, hosts, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	served := func(serverName string) string {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	for name, want := range map[string]string{
		"news.brand.example": "news.brand.example",
		"pool.storybus.svc":  "bus",
		"other.example":      "bus",
		"":                   "bus",
	} {
		if got := served(name); got != want {
			t.Errorf("SNI %q: served %q, want %q", name, got, want)
		}
	}
}

// loadPair writes p into dir and loads it as the bus's own pair.
func loadPair(t *testing.T, dir string, p certgen.Pair) *tlsconfig.KeyPair {
	t.Helper()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if os.WriteFile(certFile, p.CertPEM, 0o600) != nil || os.WriteFile(keyFile, p.KeyPEM, 0o600) != nil {
		t.Fatal("writing the pair")
	}
	pair, err := tlsconfig.LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
