package server

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server/tlscert"
)

// TLS on the listeners ([TLS], doc/config.md).
//
// net/http (crypto/tls) serves TLS; on the public listener the event loops
// step aside, since they read plain HTTP off the socket. Every request of
// a TLS listener is served by net/http (served_by="http"), with the same
// answers the loops would give (the differential test proves the two
// paths equal). That costs more than the encryption: leaving the loops
// more than doubles the server's CPU per publish, the encryption adds a
// fifth on top (doc/performance.md). Serving TLS in the loops would win
// most of it back, but needs a TLS record layer they can drive without
// blocking (kernel TLS after crypto/tls's handshake, or crypto/tls's
// records over a buffer): a second TLS path beside a well-kept one, to
// be proven equal to it, not done yet.
//
// The certificate files are loaded by New, so that a missing, unreadable
// or mismatched pair stops the server with the key and the reason, and
// reloaded when they change (package tlscert).

// CheckTLS loads the certificate pairs of cfg's [TLS] as New does and
// returns New's error, naming the key, for a pair that is missing,
// unreadable or does not load. app.New calls it before it connects to
// any Redis, so that such a configuration stops the server at once.
func CheckTLS(cfg *config.Config) error {
	_, _, err := loadTLS(cfg, nil)
	return err
}

// loadTLS loads the certificates of the listeners that serve TLS.
func (s *Server) loadTLS() (err error) {
	s.apiTLS, s.adminTLS, err = loadTLS(s.cfg, s.log)
	return err
}

// loadTLS returns the TLS configurations of the public and the admin
// listener (nil for plain HTTP).
func loadTLS(cfg *config.Config, log logrus.FieldLogger) (api, admin *tls.Config, err error) {
	t := cfg.TLS
	load := func(certKey, certFile, keyKey, keyFile, listener string) (*tlscert.Reloader, error) {
		var l logrus.FieldLogger
		if log != nil {
			l = log.WithField("listener", listener)
		}
		r, err := tlscert.Load(certFile, keyFile, l)
		if err == nil {
			return r, nil
		}
		key, reason := certKey, err.Error()
		var le *tlscert.LoadError
		if errors.As(err, &le) {
			switch le.Which {
			case tlscert.KeyFile:
				key = keyKey
			case tlscert.Pair:
				reason = fmt.Sprintf("%s (with TLS.%s %q)", reason, keyKey, keyFile)
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, &config.ValidationError{Key: "TLS." + key, Reason: reason})
	}
	if t.PublicEnabled() {
		r, err := load("CertFile", t.CertFile, "KeyFile", t.KeyFile, "api")
		if err != nil {
			return nil, nil, err
		}
		api = r.ServerConfig(t.MinTLSVersion())
	}
	if t.AdminEnabled() {
		r, err := load("AdminCertFile", t.AdminCertFile, "AdminKeyFile", t.AdminKeyFile, "admin")
		if err != nil {
			return nil, nil, err
		}
		admin = r.ServerConfig(t.MinTLSVersion())
	}
	return api, admin, nil
}

// URL returns the public listener's base URL, "http://ADDR" or
// "https://ADDR", or "" before Listen.
func (s *Server) URL() string { return baseURL(s.Addr(), s.apiTLS != nil) }

// AdminURL returns the admin listener's base URL, "http://ADDR" or
// "https://ADDR", or "" before Listen.
func (s *Server) AdminURL() string { return baseURL(s.AdminAddr(), s.adminTLS != nil) }

func baseURL(addr string, tls bool) string {
	switch {
	case addr == "":
		return ""
	case tls:
		return "https://" + addr
	}
	return "http://" + addr
}
