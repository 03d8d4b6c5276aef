package bus

import (
	"crypto/x509"
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"
)

// forwardedHeader is the one header a trusted proxy's client address is
// read from. X-Real-IP is not read: a proxy that appends to
// X-Forwarded-For may pass a client's X-Real-IP through untouched.
const forwardedHeader = "X-Forwarded-For"

// trustProxies makes gin read a request's client address through the
// trusted proxies only: the peer's address, unless the peer is one of
// proxies; then, walking X-Forwarded-For from the right, the first address
// that is not a trusted proxy. With no proxies, no header is ever read.
func trustProxies(r *gin.Engine, proxies []netip.Prefix) {
	r.ForwardedByClientIP = true
	r.RemoteIPHeaders = []string{forwardedHeader}
	r.TrustedPlatform = ""
	cidrs := make([]string, 0, len(proxies))
	for _, p := range proxies {
		cidrs = append(cidrs, p.Masked().String())
	}
	// Valid prefixes always parse, so the error cannot happen.
	_ = r.SetTrustedProxies(cidrs)
}

// clientAddress is the address of the client a request comes from, as
// trustProxies decides it. Everything that judges a client by its address
// (the firewall's allowedCIDRs, the token endpoint's failure limit, the
// logs) uses this and never the peer address or a header directly, so a
// forged X-Forwarded-For counts nowhere.
func clientAddress(c *gin.Context) string { return c.ClientIP() }

// clientCertificate returns the client certificate the TLS handshake
// verified against the bus's client CAs, or nil.
func clientCertificate(r *http.Request) *x509.Certificate {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return nil
	}
	return r.TLS.VerifiedChains[0][0]
}
