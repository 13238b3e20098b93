//go:build linux

package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/tlscert/tlstest"
)

// serveTLS serves a server with event loops asked for (EventLoops = 2)
// and TLS on both listeners, on 127.0.0.1; it returns the env, the fake
// engine, the CA the certificates come from and the public listener's
// certificate and key files.
func serveTLS(t *testing.T) (*testEnv, *eachFake, *tlstest.CA, string, string) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.WritePair(t, dir, "api")
	adminCert, adminKey := ca.WritePair(t, dir, "admin")
	fake := &eachFake{fakeEngine: &fakeEngine{}}
	env := newEnv(t, func(c *config.Config, d *Deps) {
		c.Kairos.EventLoops = 2
		c.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, AdminCertFile: adminCert, AdminKeyFile: adminKey}
		d.Engines["default"] = fake
	})
	if err := env.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- env.srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return env, fake, ca, certFile, keyFile
}

// TestTLSLoopsStepAside: with TLS on the public listener, the event loops
// do not start and net/http serves every request over TLS, pipelined fast
// publishes included (served_by="http"); plain HTTP on a TLS port gets
// net/http's 400; the admin listener serves TLS too.
func TestTLSLoopsStepAside(t *testing.T) {
	env, fake, ca, _, _ := serveTLS(t)
	env.srv.accessLog.Store(true)
	fake.size = func(context.Context, string, string) (int64, error) { return 42, nil }
	fake.publish = func(context.Context, *engine.PublishRequest) (string, error) { return "http-1", nil }
	if u := env.srv.URL(); u != "https://"+env.srv.Addr() {
		t.Errorf("URL() = %q, want https://%s", u, env.srv.Addr())
	}
	if u := env.srv.AdminURL(); u != "https://"+env.srv.AdminAddr() {
		t.Errorf("AdminURL() = %q, want https://%s", u, env.srv.AdminAddr())
	}

	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", env.srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if got := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "api" {
		t.Errorf("public certificate %q, want api", got)
	}
	raw := fastPut("a") + fastPut("b") + "GET /api/ns/q/size HTTP/1.1\r\nHost: kairos\r\n\r\n"
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	got := readAnswers(t, bufio.NewReader(conn), 3)
	for i, want := range []string{
		`201 {"job_id":"http-1","msg":"published"}`,
		`201 {"job_id":"http-1","msg":"published"}`,
		`200 {"namespace":"ns","queue":"q","size":42}`,
	} {
		if g := fmt.Sprintf("%d %s", got[i].status, got[i].body); g != want {
			t.Errorf("answer %d: %s, want %s", i, g, want)
		}
	}
	env.srv.mu.Lock()
	loops := env.srv.loops
	env.srv.mu.Unlock()
	if loops != nil {
		t.Error("the event loops started on a TLS listener")
	}
	if p := fake.published(); len(p) != 0 {
		t.Errorf("the loops' batch path published %q", p)
	}
	served := env.srv.metrics.served
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"default", "/api/:namespace/:queue", "PUT", "201", "http"}, 2},
		{[]string{"default", "/api/:namespace/:queue", "PUT", "201", "loop"}, 0},
		{[]string{"default", "/api/:namespace/:queue/size", "GET", "200", "http"}, 1},
	} {
		if n := counterValue(t, served.WithLabelValues(c.labels...)); n != c.want {
			t.Errorf("kairos_http_responses%v = %v, want %v", c.labels, n, c.want)
		}
	}
	for _, e := range env.logs.AllEntries() {
		if e.Message == "access" && e.Data["served_by"] != "http" {
			t.Errorf("access log served_by %v, want http: %v", e.Data["served_by"], e.Data)
		}
	}

	// Plain HTTP on the TLS port: net/http's answer, nothing served.
	plain := dialLoop(t, env.srv.Addr(), 10*time.Second)
	if _, err := io.WriteString(plain, fastPut("c")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(plain), nil)
	if err != nil {
		t.Fatalf("plain HTTP on the TLS port: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP on the TLS port: %d, want 400", resp.StatusCode)
	}

	// The admin listener: its own certificate.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(env.srv.AdminURL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil || res.TLS.PeerCertificates[0].Subject.CommonName != "admin" {
		t.Errorf("admin /healthz over TLS: %d, TLS %v", res.StatusCode, res.TLS != nil)
	}
	// The dashboard's cookies are Secure over TLS.
	res, err = hc.Get(env.srv.AdminURL() + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var csrf *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "kairos_csrf" {
			csrf = c
		}
	}
	if res.StatusCode != 200 || csrf == nil || !csrf.Secure {
		t.Errorf("dashboard over TLS: %d, CSRF cookie %+v; want 200 and a Secure cookie", res.StatusCode, csrf)
	}
	// A client that does not trust the CA is refused.
	_, err = (&http.Client{Timeout: 10 * time.Second}).Get(env.srv.AdminURL() + "/healthz")
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) {
		t.Errorf("admin without the CA: %v, want an unknown authority error", err)
	}
}

// TestTLSReload: a serving server picks up a renewed certificate for its
// new connections, without a restart; a pair that does not load keeps
// the previous one.
func TestTLSReload(t *testing.T) {
	env, _, ca, certFile, keyFile := serveTLS(t)
	served := func() string {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", env.srv.Addr(),
			&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	// waitServed handshakes until the server presents cn; the files are
	// read again at most once a second, so allow a wide margin.
	waitServed := func(cn string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for got := served(); got != cn; got = served() {
			if time.Now().After(deadline) {
				t.Fatalf("still served %q, want %q", got, cn)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := served(); got != "api" {
		t.Fatalf("served %q, want api", got)
	}
	certPEM, keyPEM := ca.Issue(t, "renewed")
	tlstest.Write(t, keyFile, keyPEM)
	tlstest.Write(t, certFile, certPEM)
	waitServed("renewed")

	// A certificate without its key: logged, and the previous pair stays.
	certPEM, _ = ca.Issue(t, "orphan")
	tlstest.Write(t, certFile, certPEM)
	deadline := time.Now().Add(20 * time.Second)
	for !loggedMismatch(env) {
		if got := served(); got != "renewed" {
			t.Fatalf("with a mismatched pair: served %q, want renewed", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the mismatched pair was not logged")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := served(); got != "renewed" {
		t.Fatalf("after the mismatch was logged: served %q, want renewed", got)
	}
}

// loggedMismatch reports whether the server logged a certificate pair
// that does not load.
func loggedMismatch(env *testEnv) bool {
	for _, e := range env.logs.AllEntries() {
		if e.Level == logrus.ErrorLevel && e.Data["listener"] == "api" &&
			e.Message == "TLS: the certificate files changed but do not load; serving the previous certificate" {
			return true
		}
	}
	return false
}
