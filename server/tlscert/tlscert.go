// Package tlscert serves a listener's TLS certificate from its PEM files
// and reloads it when they change, so that a renewed certificate (by
// cert-manager, certbot, a rotated Kubernetes secret) is served without a
// restart and without dropping a connection.
//
// The files are read once by Load, which fails on a missing, unreadable or
// mismatched pair; after that, a handshake at most once per CheckInterval
// reads them again (no file watcher: reading two small files a second
// costs nothing, and it sees a symlink swap as well as a rewrite). A pair
// that changed and loads is served from the next handshake on; a pair that
// changed and does not load (a half-written file, a key that does not
// match the certificate yet) is logged as an error and the previous
// certificate is kept, until the files change again.
package tlscert

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// CheckInterval is how often, at most, the files are read again: a
// handshake later than that after the last check reads them.
const CheckInterval = time.Second

// Reloader holds a certificate loaded from a certificate file and a key
// file and reloads it when they change. Its GetCertificate is the
// GetCertificate of the listener's tls.Config.
type Reloader struct {
	certFile, keyFile string
	log               logrus.FieldLogger
	// interval is CheckInterval, shorter in tests.
	interval time.Duration
	now      func() time.Time

	cur atomic.Pointer[tls.Certificate]

	// mu guards the check; a handshake that finds it held does not wait.
	mu sync.Mutex
	// next is when the files may be read again.
	next time.Time
	// certPEM and keyPEM are the files' contents at the last check,
	// whether they loaded or not: a check that reads them unchanged does
	// nothing (and logs nothing again).
	certPEM, keyPEM []byte
}

// Load reads the certificate (PEM, the leaf first, then any
// intermediates) and its private key (PEM) and returns a Reloader serving
// them. Its error names the file that is missing or unreadable, or says
// that the pair does not load (the key does not match, a file holds no
// PEM block of the right type).
func Load(certFile, keyFile string, log logrus.FieldLogger) (*Reloader, error) {
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	r := &Reloader{
		certFile: certFile, keyFile: keyFile,
		log:      log.WithFields(logrus.Fields{"cert_file": certFile, "key_file": keyFile}),
		interval: CheckInterval, now: time.Now,
	}
	certPEM, keyPEM, err := r.read()
	if err != nil {
		return nil, err
	}
	cert, err := parse(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	r.certPEM, r.keyPEM = certPEM, keyPEM
	r.cur.Store(cert)
	r.next = r.now().Add(r.interval)
	return r, nil
}

// Which files a LoadError is about.
const (
	CertFile = "certificate file"
	KeyFile  = "key file"
	Pair     = "certificate and key"
)

// LoadError is why a pair does not load: a file that cannot be read
// (Which is CertFile or KeyFile) or a pair that does not load (Pair: not
// PEM, the key does not match the certificate...).
type LoadError struct {
	Which string
	Err   error
}

// Error returns "Which: Err" ("certificate and key do not load: Err" for
// a pair).
func (e *LoadError) Error() string {
	if e.Which == Pair {
		return Pair + " do not load: " + e.Err.Error()
	}
	return e.Which + ": " + e.Err.Error()
}

// Unwrap returns the underlying error (fs.ErrNotExist for a missing file).
func (e *LoadError) Unwrap() error { return e.Err }

// read returns the contents of both files.
func (r *Reloader) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(r.certFile); err != nil {
		return nil, nil, &LoadError{Which: CertFile, Err: err}
	}
	if keyPEM, err = os.ReadFile(r.keyFile); err != nil {
		return nil, nil, &LoadError{Which: KeyFile, Err: err}
	}
	return certPEM, keyPEM, nil
}

// parse loads a pair and checks that the leaf parses (tls.X509KeyPair
// fills Leaf).
func parse(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &LoadError{Which: Pair, Err: err}
	}
	if cert.Leaf == nil {
		return nil, &LoadError{Which: Pair, Err: errors.New("no leaf certificate")}
	}
	return &cert, nil
}

// Certificate returns the certificate served now.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load() }

// GetCertificate returns the certificate to serve, after reading the
// files again when the last check is older than CheckInterval. It never
// fails once Load succeeded: a pair that does not load keeps the previous
// certificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if r.mu.TryLock() {
		if now := r.now(); !now.Before(r.next) {
			r.check()
			r.next = now.Add(r.interval)
		}
		r.mu.Unlock()
	}
	return r.cur.Load(), nil
}

// check reads the files and, when they changed since the last check,
// loads them; r.mu is held.
func (r *Reloader) check() {
	certPEM, keyPEM, err := r.read()
	if err != nil {
		// Remember nothing: the next readable pair is a change.
		if r.certPEM != nil {
			r.log.WithError(err).Error("TLS: cannot read the certificate files; serving the previous certificate")
		}
		r.certPEM, r.keyPEM = nil, nil
		return
	}
	if bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return
	}
	r.certPEM, r.keyPEM = certPEM, keyPEM
	cert, err := parse(certPEM, keyPEM)
	if err != nil {
		r.log.WithError(err).Error("TLS: the certificate files changed but do not load; serving the previous certificate")
		return
	}
	r.cur.Store(cert)
	r.log.WithFields(logrus.Fields{"subject": cert.Leaf.Subject.String(), "not_after": cert.Leaf.NotAfter}).
		Info("TLS: certificate reloaded")
}

// ServerConfig returns the tls.Config of a listener serving r's
// certificate: TLS minVersion or later (at least 1.2), HTTP/1.1 only (the
// API's wire format, and what the plain listener speaks).
func (r *Reloader) ServerConfig(minVersion uint16) *tls.Config {
	return &tls.Config{
		MinVersion:     max(minVersion, tls.VersionTLS12),
		GetCertificate: r.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
}
