package auth

import (
	"crypto/subtle"
	"crypto/x509"
	"strings"

	config "github.com/storybus/storybus/api/config/v1alpha1"
)

// CertificateMatches reports whether cert carries the subject DN or URI
// SAN a connection's mutual-TLS client authentication names.
func CertificateMatches(a *config.TLSClientAuth, cert *x509.Certificate) bool {
	if a.SubjectDN != "" {
		return cert.Subject.String() == a.SubjectDN
	}
	for _, u := range cert.URIs {
		if u.String() == a.SANURI {
			return true
		}
	}
	return false
}

// CheckSecret reports whether secret matches the connection's hash, in
// constant time. A secret under config.MinSecretBytes never matches, even when it
// is the one that was hashed.
func CheckSecret(c *config.Connection, secret string) bool {
	want, ok := strings.CutPrefix(c.SecretHash, "sha256:")
	if !ok || config.CheckSecretLength(secret) != nil {
		return false
	}
	got := config.HashSecret(secret)[len("sha256:"):]
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// ConnectionByCertificate returns the connection whose TLSClientAuth the
// verified client certificate matches.
func ConnectionByCertificate(w *config.Workspace, cert *x509.Certificate) (*config.Connection, bool) {
	for i := range w.Connections {
		if a := w.Connections[i].TLSClientAuth; a != nil && CertificateMatches(a, cert) {
			return &w.Connections[i], true
		}
	}
	return nil, false
}
