// Package kairostest runs a whole Kairos server (server/app) on a
// throwaway redis-server for the client's and the CLI's tests: real
// sockets, real Redis, and a Restart that brings the server back on the
// same ports, as an operator restarting it would.
package kairostest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/app"
	"github.com/kairos-dev/kairos/server/tlscert/tlstest"
)

// Server is a running Kairos app.
type Server struct {
	// Redis is the redis-server behind every pool and the admin store.
	Redis *redistest.Server
	// API and Admin are the listeners' host:port.
	API, Admin string
	// CAFile is the PEM file of the CA of the listeners' certificates,
	// when the server serves TLS (StartTLS); "" otherwise.
	CAFile string
	// hc is the HTTP client of Token: one that trusts CAFile.
	hc *http.Client

	tb     testing.TB
	cfg    *config.Config
	log    logrus.FieldLogger
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// Start starts a redis-server and a Kairos app on free loopback ports;
// both stop at cleanup. edit, when given, may change the config first.
// It skips the test when redis-server is missing (see redistest).
func Start(tb testing.TB, edit ...func(*config.Config)) *Server {
	tb.Helper()
	return start(tb, "", edit)
}

// start is Start, or StartTLS with the CA file of the certificates.
func start(tb testing.TB, caFile string, edit []func(*config.Config)) *Server {
	tb.Helper()
	rs := redistest.Start(tb)
	cfg := config.Default()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.AdminPort = 0
	cfg.AdminRedis = config.RedisConf{Addr: rs.Addr}
	cfg.Pool = map[string]config.RedisConf{config.DefaultPoolName: {Addr: rs.Addr}}
	for _, e := range edit {
		e(cfg)
	}
	s := &Server{Redis: rs, tb: tb, cfg: cfg, log: testLogger(tb), hc: http.DefaultClient, CAFile: caFile}
	if caFile != "" {
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(caFile)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			tb.Fatalf("kairostest: CA file %s: %v", caFile, err)
		}
		s.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		tb.Cleanup(s.hc.CloseIdleConnections)
	}
	s.start()
	tb.Cleanup(s.Stop)
	return s
}

// StartTLS is Start with TLS on both listeners: a throw-away CA (its file
// in CAFile) signs a certificate for each, valid for 127.0.0.1 and
// localhost. APIURL and AdminURL are then https:// URLs.
func StartTLS(tb testing.TB, edit ...func(*config.Config)) *Server {
	tb.Helper()
	dir := tb.TempDir()
	ca := tlstest.NewCA(tb, "kairostest CA")
	caFile := ca.WriteCA(tb, dir)
	certFile, keyFile := ca.WritePair(tb, dir, "api")
	adminCert, adminKey := ca.WritePair(tb, dir, "admin")
	return start(tb, caFile, append([]func(*config.Config){func(c *config.Config) {
		c.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, AdminCertFile: adminCert, AdminKeyFile: adminKey}
	}}, edit...))
}

func (s *Server) start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, s.cfg, app.Options{Logger: s.log})
	if err != nil {
		cancel()
		s.tb.Fatalf("kairostest: app.New: %v", err)
	}
	// The port of a stopped server may take a moment to be free again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = a.Listen()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		cancel()
		s.tb.Fatalf("kairostest: Listen: %v", err)
	}
	s.API, s.Admin = a.Server.Addr(), a.Server.AdminAddr()
	// Restarts come back on the same ports.
	s.cfg.Port = portOf(s.tb, s.API)
	s.cfg.AdminPort = portOf(s.tb, s.Admin)
	s.cancel = cancel
	s.done = make(chan error, 1)
	done := s.done
	go func() { done <- a.Run(ctx) }()
}

func portOf(tb testing.TB, addr string) int {
	tb.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatalf("kairostest: address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Stop stops the app gracefully (waiting consumers are answered at once)
// and waits for it. It is safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return
	}
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			s.tb.Errorf("kairostest: Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		s.tb.Errorf("kairostest: the app did not stop within 15s")
	}
	s.cancel = nil
}

// Restart stops the app and starts a new one on the same ports and the
// same Redis, after down (the time the server is unreachable).
func (s *Server) Restart(down time.Duration) {
	s.tb.Helper()
	s.Stop()
	time.Sleep(down)
	s.start()
}

// APIURL and AdminURL are the listeners' base URLs: https:// for a
// listener that serves TLS, http:// otherwise.
func (s *Server) APIURL() string   { return scheme(s.cfg.TLS.PublicEnabled()) + s.API }
func (s *Server) AdminURL() string { return scheme(s.cfg.TLS.AdminEnabled()) + s.Admin }

func scheme(tls bool) string {
	if tls {
		return "https://"
	}
	return "http://"
}

// Token creates a token for namespace through the admin API (raw HTTP, so
// that the client under test is not used to set up its own test). query
// may add parameters such as "queues=a&roles=consume".
func (s *Server) Token(tb testing.TB, namespace, query string) string {
	tb.Helper()
	q := url.Values{"description": {"kairostest"}}
	extra, err := url.ParseQuery(query)
	if err != nil {
		tb.Fatalf("kairostest: token query %q: %v", query, err)
	}
	for k, v := range extra {
		q[k] = v
	}
	req, err := http.NewRequest(http.MethodPost, s.AdminURL()+"/token/"+namespace, strings.NewReader(q.Encode()))
	if err != nil {
		tb.Fatalf("kairostest: create token: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for user, pass := range s.cfg.Accounts {
		req.SetBasicAuth(user, pass)
		break
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		tb.Fatalf("kairostest: create token: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		tb.Fatalf("kairostest: create token: %d %s", resp.StatusCode, body)
	}
	var out struct{ Token string }
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		tb.Fatalf("kairostest: create token: %q: %v", body, err)
	}
	return out.Token
}

// logWriter sends the server's log lines to tb.Log while the test runs and
// drops them afterwards.
type logWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(tb testing.TB) logrus.FieldLogger {
	w := &logWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(logrus.ErrorLevel)
	return l
}

// String describes the server for test logs.
func (s *Server) String() string {
	return fmt.Sprintf("kairos api=%s admin=%s redis=%s", s.API, s.Admin, s.Redis.Addr)
}
