package config

import (
	"crypto/tls"
	"strings"
)

// TLS holds the listeners' TLS settings (a [TLS] table, Kairos only;
// doc/config.md). A listener serves TLS when its certificate and key files
// are both set, plain HTTP when neither is: each listener on its own, so
// that the admin listener can stay on a private network in plain HTTP
// while the public one is encrypted, or the other way round. The files
// are read at start (a missing, unreadable or mismatched pair stops the
// server) and again when they change, so that a renewed certificate is
// served without a restart.
type TLS struct {
	// CertFile and KeyFile are the public listener's certificate (PEM,
	// the leaf first, then any intermediates) and private key (PEM).
	CertFile string `toml:"CertFile"`
	KeyFile  string `toml:"KeyFile"`
	// AdminCertFile and AdminKeyFile are the admin listener's; they may
	// name the same files as CertFile and KeyFile.
	AdminCertFile string `toml:"AdminCertFile"`
	AdminKeyFile  string `toml:"AdminKeyFile"`
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3". Older versions are refused: they are broken or deprecated
	// (RFC 8996).
	MinVersion string `toml:"MinVersion"`
}

// PublicEnabled reports whether the public listener serves TLS.
func (t TLS) PublicEnabled() bool { return strings.TrimSpace(t.CertFile) != "" }

// AdminEnabled reports whether the admin listener serves TLS.
func (t TLS) AdminEnabled() bool { return strings.TrimSpace(t.AdminCertFile) != "" }

// MinTLSVersion returns MinVersion as a crypto/tls constant:
// tls.VersionTLS12 unless MinVersion is "1.3". Validate refuses any other
// value.
func (t TLS) MinTLSVersion() uint16 {
	if strings.TrimSpace(t.MinVersion) == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// validateTLS checks that each listener has both files or neither, and
// MinVersion. Whether the files exist and hold a matching pair is checked
// when the server starts (server.New), which reads them.
func (c *Config) validateTLS(p *problems) {
	pair := func(certKey, cert, keyKey, key string) {
		switch hasCert, hasKey := strings.TrimSpace(cert) != "", strings.TrimSpace(key) != ""; {
		case hasCert && !hasKey:
			p.add("TLS."+keyKey, "is required with TLS.%s (the private key of that certificate)", certKey)
		case hasKey && !hasCert:
			p.add("TLS."+certKey, "is required with TLS.%s (the certificate of that key)", keyKey)
		}
	}
	pair("CertFile", c.TLS.CertFile, "KeyFile", c.TLS.KeyFile)
	pair("AdminCertFile", c.TLS.AdminCertFile, "AdminKeyFile", c.TLS.AdminKeyFile)
	switch v := strings.TrimSpace(c.TLS.MinVersion); v {
	case "", "1.2", "1.3":
	case "1.0", "1.1":
		p.add("TLS.MinVersion", "TLS %s is not allowed: the oldest version Kairos accepts is 1.2", v)
	default:
		p.add("TLS.MinVersion", `must be "1.2" or "1.3", not %q`, c.TLS.MinVersion)
	}
}
