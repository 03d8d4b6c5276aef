package cli

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/auth"
	"github.com/storybus/storybus/internal/certgen"
)

// TestServeMutualTLS serves a bus with --tls-client-ca-file whose cms
// connection authenticates by a SPIFFE id in its client certificate: the
// token endpoint takes the certificate instead of the secret and binds the
// token to it (cnf x5t#S256); the bound token is refused over another
// certificate or none, and a secret still works without a certificate.
func TestServeMutualTLS(t *testing.T) {
	const spiffeID = "spiffe://newsroom.example/ns/cms/sa/publisher"
	b := serveTLS(t, func(b *tlsBus, o *ServeOptions, w *config.Workspace) {
		o.TLSClientCAFile = b.caFile
		w.Connections[0].TLSClientAuth = &config.TLSClientAuth{SANURI: spiffeID}
	})
	clientCert := func(ca *certgen.CA, uri string) tls.Certificate {
		p, err := ca.Sign(certgen.Leaf{CommonName: "producer", URIs: []string{uri}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	over := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: b.roots, Certificates: certs}, ForceAttemptHTTP2: true}}
	}
	cms, other := clientCert(b.ca, spiffeID), clientCert(b.ca, "spiffe://newsroom.example/ns/wire/sa/publisher")
	type answer struct {
		status int
		rule   string
		token  string
	}
	post := func(hc *http.Client, path, token string, body string, basic bool) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, b.url(path), strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
		}
		if token == "" && body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if basic {
			req.SetBasicAuth("cms", cliCMSSecret)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var a struct {
			AccessToken string                  `json:"access_token"`
			Violations  []struct{ Rule string } `json:"violations"`
			Rule        string                  `json:"rule"`
		}
		_ = json.NewDecoder(res.Body).Decode(&a)
		out := answer{status: res.StatusCode, token: a.AccessToken, rule: a.Rule}
		if len(a.Violations) > 0 {
			out.rule = a.Violations[0].Rule
		}
		return out
	}
	story := 0
	publish := func(hc *http.Client, token string) answer {
		story++
		return post(hc, "/messages", token, snapshotJSON("", "mtls-"+string(rune('a'+story)), 1), false)
	}

	got := post(over(cms), "/tokens", "", "grant_type=client_credentials", false)
	if got.status != http.StatusOK {
		t.Fatalf("token by certificate: %+v", got)
	}
	claims, ok := auth.Peek(got.token)
	if !ok || claims.Confirmation == nil || claims.Confirmation.X5tS256 != auth.Thumbprint(cms.Leaf) || claims.Connection() != "cms" {
		t.Fatalf("the token is not bound to the certificate: %+v", claims)
	}
	bound := got.token
	if got := publish(over(cms), bound); got.status != http.StatusAccepted {
		t.Fatalf("the bound token over its certificate: %+v", got)
	}
	if got := publish(over(), bound); got.status != http.StatusUnauthorized || got.rule != "auth.token.invalid" {
		t.Fatalf("the bound token without a certificate: %+v", got)
	}
	if got := publish(over(other), bound); got.status != http.StatusUnauthorized || got.rule != "auth.token.invalid" {
		t.Fatalf("the bound token over another certificate: %+v", got)
	}
	if got := post(over(other), "/tokens", "", "grant_type=client_credentials", false); got.status != http.StatusUnauthorized || got.rule != "auth.credentials.invalid" {
		t.Fatalf("a certificate of no connection: %+v", got)
	}
	if got := post(over(cms), "/tokens", "", "grant_type=client_credentials&client_id=reader", false); got.status != http.StatusUnauthorized || got.rule != "auth.credentials.invalid" {
		t.Fatalf("a client_id other than the certificate's: %+v", got)
	}

	// The secret still works, without a certificate, for an unbound token.
	got = post(over(), "/tokens", "", "grant_type=client_credentials", true)
	if claims, _ := auth.Peek(got.token); got.status != http.StatusOK || claims.Confirmation != nil {
		t.Fatalf("token by secret: %+v", got)
	}
	if got := publish(over(), got.token); got.status != http.StatusAccepted {
		t.Fatalf("an unbound token without a certificate: %+v", got)
	}

	// A certificate from another CA fails the handshake.
	stranger, err := certgen.NewCA("stranger CA")
	if err != nil {
		t.Fatal(err)
	}
	forged := clientCert(stranger, spiffeID)
	insist := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots,
		// Sent even though the bus names the CAs it accepts.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forged, nil }}}}
	if res, err := insist.Post(b.url("/tokens"), "", nil); err == nil {
		res.Body.Close()
		t.Fatalf("a client certificate of an unknown CA was accepted: %d", res.StatusCode)
	}

	// The command line: a certificate and no secret.
	dir := t.TempDir()
	p, err := b.ca.Sign(certgen.Leaf{CommonName: "producer", URIs: []string{spiffeID}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cms.crt"), filepath.Join(dir, "cms.key")
	if os.WriteFile(certFile, p.CertPEM, 0o600) != nil || os.WriteFile(keyFile, p.KeyPEM, 0o600) != nil {
		t.Fatal("writing the client certificate")
	}
	code, out, errOut := run(t, snapshotJSON("", "mtls-cli", 1), "publish", "--url", "https://"+b.api, "--workspace", "newsroom",
		"--client-id", "cms", "--ca-file", b.caFile, "--cert-file", certFile, "--key-file", keyFile, "--outbox", t.TempDir())
	if ls := lines(t, out); code != ExitOK || len(ls) != 1 || ls[0].Status != http.StatusAccepted {
		t.Fatalf("publish with a client certificate: %d %q %q", code, out, errOut)
	}
}
