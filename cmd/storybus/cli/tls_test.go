package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/internal/certgen"
	"github.com/storybus/storybus/internal/kubelet"
	"github.com/storybus/storybus/internal/testutil"
)

// tlsBus is a bus served by Serve over TLS, its key pair in a directory
// written the way kubelet writes a Secret volume.
type tlsBus struct {
	api, ops string
	ca       *certgen.CA
	roots    *x509.CertPool
	volume   string
	certFile string
	// caFile holds the CA's certificate.
	caFile string
}

// serveTLS runs Serve with a key pair for 127.0.0.1 signed by a fresh CA,
// serving cliWorkspace; with, when set, changes the options and the
// workspace first.
func serveTLS(t *testing.T, with func(*tlsBus, *ServeOptions, *config.Workspace)) *tlsBus {
	t.Helper()
	ca, err := certgen.NewCA("storybus test CA")
	if err != nil {
		t.Fatal(err)
	}
	b := &tlsBus{ca: ca, roots: x509.NewCertPool(), volume: filepath.Join(t.TempDir(), "tls")}
	b.roots.AppendCertsFromPEM(ca.CertPEM)
	b.certFile = filepath.Join(b.volume, "tls.crt")
	b.caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(b.caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	b.rotate(t, b.serverPair(t))
	o := ServeOptions{
		Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0", DataDir: t.TempDir(), Sync: SyncAlways,
		TLSCertFile: b.certFile, TLSKeyFile: filepath.Join(b.volume, "tls.key"),
	}
	w := cliWorkspace()
	if with != nil {
		with(b, &o, w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, o, []*config.Workspace{w}, slog.New(slog.DiscardHandler), func(api, ops net.Addr) {
			ready <- [2]string{api.String(), ops.String()}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	select {
	case addrs := <-ready:
		b.api, b.ops = addrs[0], addrs[1]
	case err := <-done:
		t.Fatalf("Serve ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not listen within 30s")
	}
	return b
}

func (b *tlsBus) serverPair(t *testing.T) certgen.Pair {
	t.Helper()
	p, err := b.ca.Sign(certgen.Leaf{CommonName: "bus", Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rotate swaps the volume's key pair as kubelet does when cert-manager
// renews the Secret: one "..data" symlink rename.
func (b *tlsBus) rotate(t *testing.T, p certgen.Pair) {
	t.Helper()
	if err := kubelet.WriteVolume(b.volume, map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM}, 0o600); err != nil {
		t.Fatal(err)
	}
}

// client returns an HTTPS client trusting the test CA; http1 keeps it to
// HTTP/1.1.
func (b *tlsBus) client(http1 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots}, ForceAttemptHTTP2: !http1}
	if http1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (b *tlsBus) url(path string) string { return "https://" + b.api + "/v1/tenants/newsroom" + path }

// token gets a bearer token for cms over hc.
func (b *tlsBus) token(t *testing.T, hc *http.Client) (string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.url("/tokens"), strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("cms", cliCMSSecret)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&tr); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("token: %d %v", res.StatusCode, err)
	}
	return tr.AccessToken, res
}

// servedSerial returns the serial number of the certificate a new
// connection to the bus is served.
func (b *tlsBus) servedSerial(t *testing.T) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", b.api, &tls.Config{RootCAs: b.roots})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func serialOf(t *testing.T, p certgen.Pair) *big.Int {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// TestServeTLS serves the publish port with --tls-cert-file and
// --tls-key-file: HTTPS over HTTP/2 and HTTP/1.1, plain HTTP refused with
// an answer rather than served, TLS 1.1 refused at the handshake.
func TestServeTLS(t *testing.T) {
	b := serveTLS(t, nil)

	t.Run("HTTP/2", func(t *testing.T) {
		hc := b.client(false)
		token, res := b.token(t, hc)
		if res.Proto != "HTTP/2.0" || res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("token answered over %s, TLS %+v", res.Proto, res.TLS)
		}
		req, _ := http.NewRequest(http.MethodPost, b.url("/messages"), strings.NewReader(snapshotJSON("", "tls-1", 1)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted || res.Proto != "HTTP/2.0" {
			t.Fatalf("publish: %s %d %s", res.Proto, res.StatusCode, body)
		}
	})

	t.Run("HTTP/1.1", func(t *testing.T) {
		_, res := b.token(t, b.client(true))
		if res.Proto != "HTTP/1.1" {
			t.Fatalf("token answered over %s", res.Proto)
		}
	})

	t.Run("plain HTTP is refused", func(t *testing.T) {
		res, err := http.Post("http://"+b.api+"/v1/tenants/newsroom/tokens", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// Go's TLS server answers a plain request itself and closes: the
		// bus never sees it.
		if res.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte("HTTPS")) {
			t.Fatalf("plain HTTP answered %d %q", res.StatusCode, body)
		}
	})

	t.Run("TLS 1.1 is refused", func(t *testing.T) {
		conn, err := tls.Dial("tcp", b.api, &tls.Config{RootCAs: b.roots, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Fatal("a TLS 1.1 handshake succeeded")
		}
		conn, err = tls.Dial("tcp", b.api, &tls.Config{RootCAs: b.roots, MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("TLS 1.2: %v", err)
		}
		conn.Close()
	})

	t.Run("an untrusted server certificate fails the client", func(t *testing.T) {
		if _, err := http.Post("https://"+b.api+"/v1/tenants/newsroom/tokens", "application/json", nil); err == nil {
			t.Fatal("a client without the CA trusted the bus")
		}
	})
}

// TestServeTLSReloadsTheKeyPair renews the key pair the way cert-manager
// and kubelet do while a keep-alive connection is open: new connections
// get the new certificate, the open one carries on; a bad pair keeps the
// one in use and is counted and shown on /readyz until a good one comes.
func TestServeTLSReloadsTheKeyPair(t *testing.T) {
	b := serveTLS(t, nil)
	first := b.servedSerial(t)

	// An open HTTP/1.1 keep-alive connection, on the first certificate.
	open := b.client(true)
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	call := func() *http.Response {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, b.url("/tokens"), strings.NewReader("grant_type=client_credentials"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("cms", cliCMSSecret)
		res, err := open.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("token: %d", res.StatusCode)
		}
		return res
	}
	if res := call(); res.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatal("the open connection is not on the first certificate")
	}

	renewed := b.serverPair(t)
	b.rotate(t, renewed)
	testutil.EventuallyTrue(t, "new connections get the renewed certificate", 10*time.Second, func() bool {
		return b.servedSerial(t).Cmp(serialOf(t, renewed)) == 0
	})
	// The expiry metric follows the certificate in use.
	renewedLeaf, err := tls.X509KeyPair(renewed.CertPEM, renewed.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.opsContains("/metrics", fmt.Sprintf("storybus_tls_certificate_expiry_timestamp_seconds %g\n", float64(renewedLeaf.Leaf.NotAfter.Unix()))); err != nil {
		t.Fatal(err)
	}
	res := call()
	if len(reused) != 2 || !reused[1] {
		t.Fatalf("the keep-alive connection was not reused after the renewal: %v", reused)
	}
	if res.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatal("the open connection changed certificate")
	}

	// A certificate with another pair's key: refused, the renewed pair
	// keeps serving.
	other := b.serverPair(t)
	b.rotate(t, certgen.Pair{CertPEM: other.CertPEM, KeyPEM: renewed.KeyPEM})
	testutil.Eventually(t, "the bad pair is reported", 10*time.Second, func() error {
		return b.opsContains("/readyz", b.certFile+": configuration rejected")
	})
	if err := b.opsContains("/metrics", `storybus_config_reload_errors_total{workspace="`+b.certFile+`"} 1`); err != nil {
		t.Fatal(err)
	}
	if b.servedSerial(t).Cmp(serialOf(t, renewed)) != 0 {
		t.Fatal("a bad pair replaced the one in use")
	}
	if _, res := b.token(t, b.client(false)); res.StatusCode != http.StatusOK {
		t.Fatal("the bus stopped serving after a bad pair")
	}

	// A good pair again: served, and the report clears.
	b.rotate(t, other)
	testutil.EventuallyTrue(t, "the good pair is served", 10*time.Second, func() bool {
		return b.servedSerial(t).Cmp(serialOf(t, other)) == 0
	})
	testutil.Eventually(t, "the report clears", 10*time.Second, func() error {
		if b.opsContains("/readyz", "rejected") == nil {
			return errors.New("/readyz still reports a rejected pair")
		}
		return nil
	})
}

// opsContains fetches an operations path over plain HTTP and checks its
// body holds want.
func (b *tlsBus) opsContains(path, want string) error {
	res, err := http.Get("http://" + b.ops + path)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("no %s in %s:\n%s", want, path, body)
	}
	return nil
}

// TestCommandsTrustTheCAFile runs the producer and consumer commands
// against a bus over TLS: with --ca-file they verify its certificate and
// work; without it, the bus's private CA is not trusted and nothing is sent.
func TestCommandsTrustTheCAFile(t *testing.T) {
	b := serveTLS(t, nil)
	caFile := b.caFile
	conn := []string{"--url", "https://" + b.api, "--workspace", "newsroom", "--client-id", "cms", "--client-secret", cliCMSSecret}

	code, _, errOut := run(t, "", append([]string{"token"}, conn...)...)
	if code == ExitOK || !strings.Contains(errOut, "certificate") {
		t.Fatalf("without --ca-file: %d %q", code, errOut)
	}
	code, out, errOut := run(t, "", append([]string{"token", "--ca-file", caFile}, conn...)...)
	if code != ExitOK || strings.Count(out, ".") != 2 {
		t.Fatalf("token with --ca-file: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, snapshotJSON("", "tls-cli", 1), append([]string{"publish", "--ca-file", caFile, "--outbox", t.TempDir()}, conn...)...)
	if ls := lines(t, out); code != ExitOK || len(ls) != 1 || ls[0].Status != http.StatusAccepted {
		t.Fatalf("publish with --ca-file: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "", append([]string{"token", "--ca-file", filepath.Join(t.TempDir(), "missing.crt")}, conn...)...)
	if code != ExitUsage || !strings.Contains(errOut, "CA file") {
		t.Fatalf("a missing CA file: %d %q", code, errOut)
	}
}

// TestServeTLSPresentsAWorkspacesOwnKeyPair serves a workspace that brings
// its own key pair (a pooled Tenant's spec.tls): a client naming the
// workspace's host name is presented that pair, verifies it against the
// workspace's own authority and gets a token over it; every other name,
// the bus's own among them, gets the bus's pair, even though the
// workspace's certificate claims the bus's name too.
func TestServeTLSPresentsAWorkspacesOwnKeyPair(t *testing.T) {
	brandCA, err := certgen.NewCA("brand CA")
	if err != nil {
		t.Fatal(err)
	}
	brand, err := brandCA.Sign(certgen.Leaf{CommonName: "news.brand.example", Hosts: []string{"news.brand.example", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	b := serveTLS(t, func(_ *tlsBus, _ *ServeOptions, w *config.Workspace) {
		w.TLS = &config.WorkspaceTLS{Certificate: string(brand.CertPEM), Key: string(brand.KeyPEM),
			Hosts: []string{"news.brand.example", "localhost"}}
	})
	brandRoots := x509.NewCertPool()
	brandRoots.AppendCertsFromPEM(brandCA.CertPEM)

	conn, err := tls.Dial("tcp", b.api, &tls.Config{RootCAs: brandRoots, ServerName: "news.brand.example"})
	if err != nil {
		t.Fatalf("the workspace's host name, verified against its own authority: %v", err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(serialOf(t, brand)) != 0 {
		t.Errorf("served serial %v, not the workspace's pair", got)
	}
	conn.Close()

	for _, name := range []string{"localhost", "other.example", ""} {
		conn, err := tls.Dial("tcp", b.api, &tls.Config{RootCAs: b.roots, ServerName: name, InsecureSkipVerify: name == "other.example"})
		if err != nil {
			t.Fatalf("SNI %q, the bus's own pair: %v", name, err)
		}
		if issuer := conn.ConnectionState().PeerCertificates[0].Issuer.CommonName; issuer != "storybus test CA" {
			t.Errorf("SNI %q: served a certificate of %q, not the bus's own", name, issuer)
		}
		conn.Close()
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: brandRoots, ServerName: "news.brand.example"},
		ForceAttemptHTTP2: true,
	}}
	if tok, res := b.token(t, hc); tok == "" || res.ProtoMajor != 2 {
		t.Errorf("token over the workspace's pair: %q over HTTP/%d", tok, res.ProtoMajor)
	}
}
