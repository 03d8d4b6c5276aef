package v1alpha1

import (
	"crypto/tls"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxTLSHosts bounds the host names one workspace's key pair is served
// for.
const MaxTLSHosts = 32

// WorkspaceTLS is a workspace's own key pair, inline, and the host names
// a bus presents it for.
type WorkspaceTLS struct {
	// Certificate is the PEM certificate chain, the leaf first.
	Certificate string `json:"certificate"`
	// Key is the PEM private key of the leaf.
	Key string `json:"key"`
	// Hosts are the host names, lower case, a client names (SNI) to be
	// presented this pair; "*.example.com" stands for any one label in
	// front of example.com. Each must be one the certificate covers.
	Hosts []string `json:"hosts"`
}

// hostPattern is a DNS name of lower-case labels, the first of which may
// be the wildcard "*".
var hostPattern = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidHost reports whether h may be one of WorkspaceTLS.Hosts: a
// lower-case DNS name of at most 253 bytes, its first label possibly the
// wildcard "*".
func ValidHost(h string) bool { return len(h) <= 253 && hostPattern.MatchString(h) }

// Overlap reports whether host names a and b can name one host: they are
// the same, or one is a wildcard covering the other.
func Overlap(a, b string) bool { return a == b || Covers([]string{a}, b) || Covers([]string{b}, a) }

// KeyPair parses the pair.
func (t *WorkspaceTLS) KeyPair() (tls.Certificate, error) {
	return tls.X509KeyPair([]byte(t.Certificate), []byte(t.Key))
}

func (t *WorkspaceTLS) validate() error {
	pair, err := t.KeyPair()
	if err != nil {
		return fmt.Errorf("the key pair: %w", err)
	}
	if len(t.Hosts) == 0 || len(t.Hosts) > MaxTLSHosts {
		return fmt.Errorf("hosts must name 1 to %d host names", MaxTLSHosts)
	}
	var errs []error
	for i, h := range t.Hosts {
		switch {
		case !ValidHost(h):
			errs = append(errs, fmt.Errorf("hosts[%d] %q must be a lower-case DNS name, its first label possibly *", i, h))
		case slices.Index(t.Hosts, h) != i:
			errs = append(errs, fmt.Errorf("hosts[%d] %q is named twice", i, h))
		case !Covers(pair.Leaf.DNSNames, h):
			errs = append(errs, fmt.Errorf("hosts[%d] %q is not a name the certificate covers", i, h))
		}
	}
	return errors.Join(errs...)
}

// Covers reports whether a certificate with the DNS names dnsNames covers
// host: one of them is host, or a wildcard "*.parent" covers a host of one
// label in front of parent. A wildcard host is covered only by the same
// wildcard.
func Covers(dnsNames []string, host string) bool {
	for _, n := range dnsNames {
		n = strings.ToLower(n)
		if n == host {
			return true
		}
		if parent, ok := strings.CutPrefix(n, "*."); ok && !strings.HasPrefix(host, "*.") {
			if label, rest, found := strings.Cut(host, "."); found && label != "" && rest == parent {
				return true
			}
		}
	}
	return false
}
