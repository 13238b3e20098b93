package server

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/server/tlscert/tlstest"
)

// TestNewRefusesBadTLSFiles: a missing, unreadable or mismatched
// certificate pair stops the server with the key and the reason.
func TestNewRefusesBadTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "one")
	_, otherKey := ca.WritePair(t, dir, "other")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name   string
		tls    config.TLS
		key    string
		reason string
	}{
		{"missing cert", config.TLS{CertFile: missing, KeyFile: keyFile}, "TLS.CertFile", "certificate file: open " + missing + ": no such file or directory"},
		{"missing key", config.TLS{CertFile: certFile, KeyFile: missing}, "TLS.KeyFile", "key file: open " + missing + ": no such file or directory"},
		{"mismatched", config.TLS{CertFile: certFile, KeyFile: otherKey}, "TLS.CertFile", "certificate and key do not load: tls: private key does not match public key (with TLS.KeyFile"},
		{"admin missing key", config.TLS{AdminCertFile: certFile, AdminKeyFile: missing}, "TLS.AdminKeyFile", "key file: open "},
		{"admin mismatched", config.TLS{AdminCertFile: certFile, AdminKeyFile: otherKey}, "TLS.AdminCertFile", "certificate and key do not load: tls: private key does not match public key (with TLS.AdminKeyFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.TLS = tc.tls
			env := newEnv(t)
			_, err := New(cfg, Deps{Engines: env.srv.engines, Tokens: env.tokens})
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalidConfig and config.ErrInvalid", err)
			}
			p := config.Problems(err)
			if len(p) != 1 || p[0].Key != tc.key || !strings.HasPrefix(p[0].Reason, tc.reason) {
				t.Errorf("problems %v, want %s: %s...", p, tc.key, tc.reason)
			}
		})
	}
	cfg := testConfig()
	cfg.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, AdminCertFile: certFile, AdminKeyFile: keyFile}
	env := newEnv(t)
	srv, err := New(cfg, Deps{Engines: env.srv.engines, Tokens: env.tokens})
	if err != nil {
		t.Fatalf("New with a good pair on both listeners: %v", err)
	}
	if srv.apiTLS == nil || srv.adminTLS == nil || srv.eventLoops() != 0 {
		t.Errorf("TLS configs %v %v, event loops %d; want both set and no loops", srv.apiTLS != nil, srv.adminTLS != nil, srv.eventLoops())
	}
}

// TestCheckTLS: CheckTLS (what app.New runs before dialling Redis) gives
// New's answer without building a server.
func TestCheckTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "one")
	cfg := testConfig()
	cfg.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, AdminCertFile: certFile, AdminKeyFile: filepath.Join(dir, "missing.key")}
	err := CheckTLS(cfg)
	if p := config.Problems(err); len(p) != 1 || p[0].Key != "TLS.AdminKeyFile" || !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("CheckTLS = %v, want a TLS.AdminKeyFile problem", err)
	}
	cfg.TLS.AdminKeyFile = keyFile
	if err := CheckTLS(cfg); err != nil {
		t.Errorf("CheckTLS with good pairs = %v", err)
	}
	cfg.TLS = config.TLS{}
	if err := CheckTLS(cfg); err != nil {
		t.Errorf("CheckTLS without TLS = %v", err)
	}
}
