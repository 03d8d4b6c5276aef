package cli

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// Loopback addresses that play the hosts of TestServeTrustedProxies.
const (
	producerAddr       = "127.0.0.1"
	trustedProxyAddr   = "127.0.0.2"
	untrustedProxyAddr = "127.0.0.3"
	strangerAddr       = "127.0.0.4"
)

// from returns a transport whose connections leave from the loopback
// address addr, trusting roots for HTTPS.
func from(addr string, roots *tls.Config) *http.Transport {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 5 * time.Second}
	return &http.Transport{DialContext: d.DialContext, TLSClientConfig: roots, ForceAttemptHTTP2: true}
}

// reverseProxy starts a reverse proxy in front of the bus, reaching it over
// TLS from the address addr and appending the producer's address to
// X-Forwarded-For, as a Gateway or an Ingress controller does.
func reverseProxy(t *testing.T, b *tlsBus, addr string) string {
	t.Helper()
	target, _ := url.Parse("https://" + b.api)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = from(addr, &tls.Config{RootCAs: b.roots})
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestServeTrustedProxies sends a producer's messages to a bus over TLS
// whose workspace lets in only the producer's address (allowedCIDRs),
// directly and through reverse proxies: the firewall judges the producer's
// address when the request came through a trusted proxy, the proxy's when
// it came through another, and a forged X-Forwarded-For never counts.
func TestServeTrustedProxies(t *testing.T) {
	b := serveTLS(t, func(_ *tlsBus, o *ServeOptions, w *config.Workspace) {
		o.TrustedProxies = []string{trustedProxyAddr + "/32"}
		w.Firewall.AllowedCIDRs = []string{producerAddr + "/32"}
	})
	token, _ := b.token(t, b.client(false))
	trusted, untrusted := reverseProxy(t, b, trustedProxyAddr), reverseProxy(t, b, untrustedProxyAddr)
	direct := "https://" + b.api

	story := 0
	publish := func(client, base, forged string) (int, string) {
		t.Helper()
		story++
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/tenants/newsroom/messages",
			strings.NewReader(snapshotJSON("", "proxied-"+string(rune('a'+story)), 1)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if forged != "" {
			req.Header.Set("X-Forwarded-For", forged)
		}
		hc := &http.Client{Transport: from(client, &tls.Config{RootCAs: b.roots}), Timeout: 10 * time.Second}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var a struct {
			Violations []struct{ Rule string } `json:"violations"`
		}
		_ = json.NewDecoder(res.Body).Decode(&a)
		rule := ""
		if len(a.Violations) > 0 {
			rule = a.Violations[0].Rule
		}
		return res.StatusCode, rule
	}

	for _, c := range []struct {
		name, client, via, forged string
		status                    int
		rule                      string
	}{
		{"the producer, directly", producerAddr, direct, "", http.StatusAccepted, ""},
		{"the producer through a trusted proxy", producerAddr, trusted, "", http.StatusAccepted, ""},
		{"the producer through a proxy not trusted: the proxy's address", producerAddr, untrusted, "", http.StatusForbidden, "request.blocked"},
		{"another host, directly", strangerAddr, direct, "", http.StatusForbidden, "request.blocked"},
		{"another host forging X-Forwarded-For, directly", strangerAddr, direct, producerAddr, http.StatusForbidden, "request.blocked"},
		{"another host forging X-Forwarded-For through a trusted proxy", strangerAddr, trusted, producerAddr, http.StatusForbidden, "request.blocked"},
		{"two trusted hops: the producer's address, left of the proxy's", trustedProxyAddr, direct, producerAddr + ", " + trustedProxyAddr, http.StatusAccepted, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if status, rule := publish(c.client, c.via, c.forged); status != c.status || rule != c.rule {
				t.Fatalf("answered %d %q, want %d %q", status, rule, c.status, c.rule)
			}
		})
	}
}

func TestServeRefusesABadTrustedProxy(t *testing.T) {
	code, _, errOut := run(t, "", "serve", "--config", "newsroom.yaml", "--trusted-proxies", "10.0.0.0/8,proxy.example")
	if code != ExitUsage || !strings.Contains(errOut, "--trusted-proxies") {
		t.Fatalf("%d %q", code, errOut)
	}
}
