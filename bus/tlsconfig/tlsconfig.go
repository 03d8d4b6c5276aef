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
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/storybus/storybus/internal/filewatch"
)

// KeyPair is a certificate and key loaded from two files, replaced in
// place by Reload. Handshakes read it through GetCertificate, so a new pair
// reaches new connections while open ones carry on with the old.
type KeyPair struct {
	certFile, keyFile string
	now               func() time.Time
	cert              atomic.Pointer[tls.Certificate]
	// loaded is the digest of the files LoadKeyPair read: the content
	// Watch starts from.
	loaded [32]byte
}

// LoadKeyPair loads the PEM certificate chain and key at certFile and
// keyFile.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	p := &KeyPair{certFile: certFile, keyFile: keyFile, now: time.Now}
	r := p.read()
	if err := r.Apply(); err != nil {
		return nil, err
	}
	p.loaded = r.Digest
	return p, nil
}

// Reload reads the files again. A pair that does not load, whose key does
// not match the certificate, or whose certificate has expired is refused,
// and the previous pair stays in use.
func (p *KeyPair) Reload() error { return p.read().Apply() }

// read reads the two files; the reading's Apply puts the pair in use, or
// refuses it.
func (p *KeyPair) read() filewatch.Reading {
	r := filewatch.NewReader()
	certPEM, certErr := r.ReadFile(p.certFile)
	keyPEM, keyErr := r.ReadFile(p.keyFile)
	return r.Reading(func() error {
		if err := errors.Join(certErr, keyErr); err != nil {
			return fmt.Errorf("TLS key pair %s, %s: %w", p.certFile, p.keyFile, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return fmt.Errorf("TLS key pair %s, %s: %w", p.certFile, p.keyFile, err)
		}
		if cert.Leaf.NotAfter.Before(p.now()) {
			return fmt.Errorf("TLS certificate %s expired at %s", p.certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		p.cert.Store(&cert)
		return nil
	})
}

// Leaf returns the certificate in use.
func (p *KeyPair) Leaf() *x509.Certificate { return p.cert.Load().Leaf }

// GetCertificate is the tls.Config hook: the pair in use.
func (p *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.cert.Load(), nil
}

// Watch reloads the pair when the content of its files changes, until ctx
// ends, and calls onReload with each reload's outcome. It watches the
// files' directories, and in them only the two files and a Kubernetes
// Secret volume's "..data" symlink (cert-manager renews a Secret in place
// and kubelet swaps that link); an editor's rename-over-write is seen too.
// The files are read once they have been quiet for filewatch.Quiet, so the
// certificate and the key written one after the other are read together,
// and never later than filewatch.MaxDelay after their first change, however
// busy their directory. Files rewritten with the same bytes reload nothing;
// a refused pair is tried again at the next change to its files.
func (p *KeyPair) Watch(ctx context.Context, onReload func(error)) error {
	read := func() filewatch.Reading {
		r := p.read()
		apply := r.Apply
		r.Apply = func() error {
			err := apply()
			onReload(err)
			return err
		}
		return r
	}
	err := filewatch.Watch(ctx, []string{p.certFile, p.keyFile}, p.loaded, read, func(err error) {
		onReload(fmt.Errorf("watch TLS key pair: %w", err))
	})
	if err != nil {
		return fmt.Errorf("watch TLS key pair: %w", err)
	}
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
// HTTP/2 preferred over HTTP/1.1. With hosts, a client naming a host name
// a workspace claims is presented that workspace's pair instead, unless
// the bus's own pair covers the name: no workspace can stand in for the
// bus's own names, which every workspace's producers may use. With
// clientCAs, a client may present a certificate, which is then verified
// against them; a client without one is still served (it authenticates
// with a secret instead).
func Server(pair *KeyPair, hosts *Hosts, clientCAs *x509.CertPool) *tls.Config {
	get := pair.GetCertificate
	if hosts != nil {
		get = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			own := pair.cert.Load()
			if hello.ServerName == "" || own.Leaf.VerifyHostname(hello.ServerName) == nil {
				return own, nil
			}
			if c := hosts.Lookup(hello.ServerName); c != nil {
				return c, nil
			}
			return own, nil
		}
	}
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: get,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if clientCAs != nil {
		c.ClientCAs = clientCAs
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return c
}
