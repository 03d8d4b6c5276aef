package bus

import (
	"log"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
)

// NewEngine returns the gin engine the publish API is built on: no
// redirects, raw paths kept as sent, and the client's address taken from
// X-Forwarded-For only when the peer is one of the trusted proxies. The
// benchmark builds its bare relay handler on it too, so that both stand
// on the same HTTP stack.
func NewEngine(trusted []netip.Prefix) *gin.Engine {
	r := gin.New()
	trustProxies(r, trusted)
	// Unknown paths and methods get API Gateway's answer (see routes),
	// never a redirect, a 404 or a 405.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = false
	r.RemoveExtraSlash = false
	r.UseRawPath = true
	r.UnescapePathValues = false
	return r
}

// NewHTTPServer returns the http.Server the publish API is served with: its
// timeouts bound a slow or stalled client, and keep-alive connections are
// kept for two minutes. errorLog receives the server's own errors (failed
// TLS handshakes); nil is the standard logger.
func NewHTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errorLog,
	}
}
