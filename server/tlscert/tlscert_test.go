package tlscert

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/kairos-dev/kairos/server/tlscert/tlstest"
)

func TestLoadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "one")
	otherCert, otherKey := ca.WritePair(t, dir, "other")
	garbage := filepath.Join(dir, "garbage")
	tlstest.Write(t, garbage, []byte("not PEM"))
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"missing cert", filepath.Join(dir, "nope.crt"), keyFile, "certificate file: open "},
		{"missing key", certFile, filepath.Join(dir, "nope.key"), "key file: open "},
		{"mismatched", certFile, otherKey, "certificate and key do not load: tls: private key does not match public key"},
		{"key as cert", keyFile, keyFile, "certificate and key do not load"},
		{"garbage key", otherCert, garbage, "certificate and key do not load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(tc.cert, tc.key, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, %v; want an error containing %q", r, err, tc.want)
			}
			if strings.HasPrefix(tc.want, "certificate file") || strings.HasPrefix(tc.want, "key file") {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Load error %v is not fs.ErrNotExist", err)
				}
			}
		})
	}
}

// clock is a settable time for the check interval.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// serve runs a TLS listener on 127.0.0.1:0 with r's configuration that
// completes handshakes and closes; it returns the address.
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig(tls.VersionTLS12))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// served returns the common name of the certificate the server at addr
// presents to a client trusting only ca.
func served(t *testing.T, addr string, ca *tlstest.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestReloadWhenFilesChange(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "cert")
	log, hook := test.NewNullLogger()
	r, err := Load(certFile, keyFile, log)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	r.now = clk.now
	r.next = clk.now().Add(r.interval)
	addr := serve(t, r)
	if got := served(t, addr, ca); got != "cert" {
		t.Fatalf("served %q, want cert", got)
	}

	// A new pair is not read before the check interval has passed...
	certPEM, keyPEM := ca.Issue(t, "renewed")
	tlstest.Write(t, keyFile, keyPEM)
	tlstest.Write(t, certFile, certPEM)
	if got := served(t, addr, ca); got != "cert" {
		t.Fatalf("within the check interval: served %q, want cert", got)
	}
	// ...and is served from the first handshake after it.
	clk.add(CheckInterval)
	if got := served(t, addr, ca); got != "renewed" {
		t.Fatalf("after the interval: served %q, want renewed", got)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.InfoLevel || e.Message != "TLS: certificate reloaded" {
		t.Errorf("last log entry %+v, want the reload", e)
	}

	// A certificate whose key is not written yet does not load: the
	// previous pair stays, with an error in the log.
	certPEM, keyPEM = ca.Issue(t, "third")
	tlstest.Write(t, certFile, certPEM)
	clk.add(CheckInterval)
	if got := served(t, addr, ca); got != "renewed" {
		t.Fatalf("mismatched pair: served %q, want renewed (the previous one)", got)
	}
	e := hook.LastEntry()
	if e == nil || e.Level != logrus.ErrorLevel || !strings.Contains(e.Message, "do not load") ||
		!strings.Contains(e.Data[logrus.ErrorKey].(error).Error(), "private key does not match public key") {
		t.Fatalf("last log entry %+v, want the mismatch as an error", e)
	}
	// The same bad pair is not logged again at every check.
	n := len(hook.AllEntries())
	clk.add(CheckInterval)
	served(t, addr, ca)
	if got := len(hook.AllEntries()); got != n {
		t.Errorf("an unchanged bad pair logged again: %d entries, want %d", got, n)
	}
	// Once the key arrives, the pair loads.
	tlstest.Write(t, keyFile, keyPEM)
	clk.add(CheckInterval)
	if got := served(t, addr, ca); got != "third" {
		t.Fatalf("completed pair: served %q, want third", got)
	}

	// A deleted file keeps the certificate too.
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	clk.add(CheckInterval)
	if got := served(t, addr, ca); got != "third" {
		t.Fatalf("deleted cert file: served %q, want third", got)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.ErrorLevel || !strings.Contains(e.Message, "cannot read") {
		t.Errorf("last log entry %+v, want the unreadable file as an error", e)
	}
}

func TestServerConfigVersionsAndProtocols(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "cert")
	r, err := Load(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		min, max uint16
		ok       bool
	}{
		{"1.2 server, 1.1 client", tls.VersionTLS12, tls.VersionTLS11, false},
		{"1.2 server, 1.2 client", tls.VersionTLS12, tls.VersionTLS12, true},
		{"1.3 server, 1.2 client", tls.VersionTLS13, tls.VersionTLS12, false},
		{"1.3 server, 1.3 client", tls.VersionTLS13, tls.VersionTLS13, true},
		// A lower minimum than 1.2 is raised to 1.2.
		{"1.0 asked, 1.1 client", tls.VersionTLS10, tls.VersionTLS11, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := r.ServerConfig(tc.min)
			ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					_ = c.(*tls.Conn).Handshake()
					_ = c.Close()
				}
			}()
			d := &net.Dialer{Timeout: 10 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{
				RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tc.max,
				NextProtos: []string{"h2", "http/1.1"},
			})
			if (err == nil) != tc.ok {
				t.Fatalf("handshake error %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				return
			}
			defer c.Close()
			if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
				t.Errorf("negotiated %q, want http/1.1 (no HTTP/2)", p)
			}
		})
	}
}
