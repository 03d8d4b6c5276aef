// Package tlsconfig is the TLS of the bus's publish port: a server
// configuration with TLS 1.2 at least and Go's default cipher suites,
// HTTP/2 and HTTP/1.1, a key pair that is reloaded when its files change
// without dropping a connection, and the optional client authority of
// mutual TLS.
package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// KeyPair is a certificate and key loaded from two files, replaced in
// place by Reload. Handshakes read it through GetCertificate, so a new pair
// reaches new connections while open ones carry on with the old.
type KeyPair struct {
	certFile, keyFile string
	now               func() time.Time
	cert              atomic.Pointer[tls.Certificate]
}

// LoadKeyPair loads the PEM certificate chain and key at certFile and
// keyFile.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	p := &KeyPair{certFile: certFile, keyFile: keyFile, now: time.Now}
	if err := p.Reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads the files again. A pair that does not load, whose key does
// not match the certificate, or whose certificate has expired is refused,
// and the previous pair stays in use.
func (p *KeyPair) Reload() error {
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", p.certFile, p.keyFile, err)
	}
	if cert.Leaf.NotAfter.Before(p.now()) {
		return fmt.Errorf("TLS certificate %s expired at %s", p.certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	p.cert.Store(&cert)
	return nil
}

// Leaf returns the certificate in use.
func (p *KeyPair) Leaf() *x509.Certificate { return p.cert.Load().Leaf }

// GetCertificate is the tls.Config hook: the pair in use.
func (p *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.cert.Load(), nil
}

// Watch reloads the pair when anything changes in the directories of its
// files, until ctx ends, and calls onReload with each reload's outcome.
// Watching the directories, not the files, sees a Kubernetes Secret
// volume's "..data" symlink swap (cert-manager renews a Secret in place)
// and an editor's rename-over-write. Changes within debounce of each other
// are read once, so the certificate and the key written one after the
// other are read together.
func (p *KeyPair) Watch(ctx context.Context, debounce time.Duration, onReload func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch TLS key pair: %w", err)
	}
	for _, dir := range []string{filepath.Dir(p.certFile), filepath.Dir(p.keyFile)} {
		if err := w.Add(dir); err != nil {
			w.Close()
			return fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	go func() {
		defer w.Close()
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
					continue
				}
				fire = time.After(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				onReload(fmt.Errorf("watch TLS key pair: %w", err))
			case <-fire:
				fire = nil
				onReload(p.Reload())
			}
		}
	}()
	return nil
}

// LoadClientCAs reads the PEM certificates of the authorities whose client
// certificates mutual TLS accepts.
func LoadClientCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("TLS client CA %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// Server returns the publish port's TLS configuration: the pair's
// certificate, TLS 1.2 or newer with Go's default (secure) cipher suites,
// HTTP/2 preferred over HTTP/1.1. With clientCAs, a client may present a
// certificate, which is then verified against them; a client without one
// is still served (it authenticates with a secret instead).
func Server(pair *KeyPair, clientCAs *x509.CertPool) *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: pair.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if clientCAs != nil {
		c.ClientCAs = clientCAs
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return c
}
