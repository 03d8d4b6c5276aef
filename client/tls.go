package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// TLSFiles name the PEM files of a client's TLS to the bus.
type TLSFiles struct {
	// CAFile holds the certificates of the authorities the bus's
	// certificate is checked against, instead of the system's roots (as
	// curl's --cacert). Empty: the system's roots, which Go reads from
	// SSL_CERT_FILE and SSL_CERT_DIR when they are set.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, for a bus
	// that takes mutual TLS. Both or neither.
	CertFile string
	KeyFile  string
}

// NewHTTPClient returns an http.Client for the bus with the TLS of f and
// a whole-request timeout (0: none), to pass as Options.HTTPClient,
// ConsumerOptions.HTTPClient and ClientCredentials.HTTPClient. It speaks
// HTTP/2 to a bus that offers it, and TLS 1.2 at least.
func NewHTTPClient(f TLSFiles, timeout time.Duration) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", f.CAFile)
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("client: a client certificate needs both its certificate and key files")
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}
