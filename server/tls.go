package server

import (
	"errors"
	"fmt"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server/tlscert"
)

// TLS on the listeners ([TLS], doc/config.md).
//
// net/http (crypto/tls) serves TLS; on the public listener the event loops
// step aside: they read plain HTTP off the socket, and serving TLS in them
// would mean a second TLS stack beside crypto/tls, a hand-written
// replacement of a well-kept component for a path whose cost is then
// dominated by the encryption anyway (doc/performance.md measures it).
// Every request of a TLS listener is therefore served by net/http
// (served_by="http"), with the same answers the loops would give (the
// differential test proves the two paths equal).
//
// The certificate files are loaded by New, so that a missing, unreadable
// or mismatched pair stops the server with the key and the reason, and
// reloaded when they change (package tlscert).

// loadTLS loads the certificates of the listeners that serve TLS.
func (s *Server) loadTLS() error {
	t := s.cfg.TLS
	load := func(certKey, certFile, keyKey, keyFile, listener string) (*tlscert.Reloader, error) {
		r, err := tlscert.Load(certFile, keyFile, s.log.WithField("listener", listener))
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
			return err
		}
		s.apiTLS = r.ServerConfig(t.MinTLSVersion())
	}
	if t.AdminEnabled() {
		r, err := load("AdminCertFile", t.AdminCertFile, "AdminKeyFile", t.AdminKeyFile, "admin")
		if err != nil {
			return err
		}
		s.adminTLS = r.ServerConfig(t.MinTLSVersion())
	}
	return nil
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
