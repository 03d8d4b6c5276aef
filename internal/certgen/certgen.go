// Package certgen makes throwaway certificates: a certificate authority
// and the server and client certificates it signs, as PEM. `storybus dev
// --tls` serves with them, and the tests build their TLS servers and
// clients from them. They are for development and tests only: the keys
// are written in clear and nothing revokes them.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// validity is how long the certificates last: long enough for any test or
// development session, short enough to be obviously throwaway.
const validity = 7 * 24 * time.Hour

// CA is a certificate authority that signs certificates.
type CA struct {
	// CertPEM is the authority's certificate, the file clients trust.
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// Pair is a certificate and its private key, as PEM.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Leaf describes a certificate to sign.
type Leaf struct {
	// CommonName is the subject's CN.
	CommonName string
	// Organization, when set, is the subject's O.
	Organization string
	// Hosts are DNS names and IP addresses the certificate is valid for.
	Hosts []string
	// URIs are URI subject alternative names (a SPIFFE id).
	URIs []string
	// Client makes a client certificate; otherwise a server certificate.
	Client bool
	// NotAfter, when set, replaces the default expiry.
	NotAfter time.Time
}

// NewCA returns a fresh authority named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{CertPEM: pemBlock("CERTIFICATE", der), cert: cert, key: key}, nil
}

// Sign returns a certificate for l signed by the authority, with a fresh
// key.
func (ca *CA) Sign(l Leaf) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if l.Organization != "" {
		tmpl.Subject.Organization = []string{l.Organization}
	}
	if l.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if !l.NotAfter.IsZero() {
		tmpl.NotAfter = l.NotAfter
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	for _, raw := range l.URIs {
		u, err := url.Parse(raw)
		if err != nil {
			return Pair{}, fmt.Errorf("URI %q: %w", raw, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
