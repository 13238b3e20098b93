package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
	"github.com/kairos-dev/kairos/server/audit"
	"github.com/kairos-dev/kairos/server/webhook"
)

// A live server: the real HTTP stack on 127.0.0.1 listeners, the Redis
// engine, the token store and the throttler, all over one Redis, as
// server/app wires them (server/app cannot be imported here: it imports
// this package).

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// live is one running server instance.
type live struct {
	srv       *Server
	eng       *rdb.Engine
	cfg       *config.Config
	client    redis.UniversalClient
	tokens    *auth.Store
	throttler *auth.Throttler
	logs      *syncBuffer
	api       string // http://host:port of the public listener
	admin     string // http://host:port of the admin listener
}

// liveBackends are the Redis servers the live tests run on, as clients for
// liveOptions.client: nil (a fresh miniredis) and a real redis-server.
var liveBackends = map[string]func(t *testing.T) redis.UniversalClient{
	"miniredis": func(*testing.T) redis.UniversalClient { return nil },
	"redis":     func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() },
}

// liveOptions tune startLive.
type liveOptions struct {
	client   redis.UniversalClient // nil: a fresh miniredis
	cacheTTL time.Duration         // token cache; 0: auth's default
	config   func(*config.Config)
	now      func() time.Time // the server's and the engine's clock; nil: time.Now
	// throttleRefresh is how often the throttler reloads the limits; 0:
	// 50 ms.
	throttleRefresh time.Duration
	// historyFlush is the engine's HistoryFlush (0: no history).
	historyFlush time.Duration
	// tracer makes the spans of the server and the engine; nil: off.
	tracer trace.Tracer
}

// startLive starts a server over opts.client (a fresh miniredis by
// default) and stops it when the test ends.
func startLive(t testing.TB, opts liveOptions) *live {
	t.Helper()
	client := opts.client
	if client == nil {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		client = c
	}
	cfg := testConfig()
	cfg.EnableAccessLog = true
	cfg.Kairos.ShutdownTimeoutSecond = 2
	if opts.config != nil {
		opts.config(cfg)
	}
	logs := &syncBuffer{}
	logger := logrus.New()
	logger.SetOutput(logs)
	logger.SetLevel(logrus.DebugLevel)

	ctx, cancel := context.WithCancel(context.Background())
	eng, err := rdb.New(ctx, client, rdb.Options{Logger: logger, Now: opts.now, HistoryFlush: opts.historyFlush, Tracer: opts.tracer,
		DefaultQuota: cfg.Pool[auth.DefaultPool].DefaultQuota()})
	if err != nil {
		cancel()
		t.Fatalf("rdb.New: %v", err)
	}
	l := &live{
		eng:    eng,
		cfg:    cfg,
		client: client,
		logs:   logs,
		tokens: auth.NewStore(client, []string{auth.DefaultPool}, logger, auth.StoreOptions{
			HashTokens: cfg.Kairos.HashTokens, CacheTTL: opts.cacheTTL,
		}),
		throttler: auth.NewThrottler(client, logger, auth.ThrottlerOptions{
			HashTokens: cfg.Kairos.HashTokens, Refresh: cmp.Or(opts.throttleRefresh, 50*time.Millisecond),
		}),
	}
	hooks, err := webhook.NewManager(webhook.NewStore(client), map[string]webhook.Engine{auth.DefaultPool: eng},
		webhook.Options{Logger: logger, Registerer: prometheus.NewRegistry()})
	if err != nil {
		cancel()
		t.Fatalf("webhook.NewManager: %v", err)
	}
	l.srv, err = New(cfg, Deps{
		Engines:   map[string]engine.Engine{auth.DefaultPool: eng},
		Tokens:    l.tokens,
		Throttler: l.throttler,
		Webhooks:  hooks,                                              // not run: the admin routes only manage subscriptions
		Audit:     audit.NewStore(client, cfg.Kairos.AuditMaxEntries), // as the app does
		Logger:    logger,
		Now:       opts.now,
		Tracer:    opts.tracer,
	})
	if err != nil {
		cancel()
		t.Fatalf("New: %v", err)
	}
	if err := l.srv.Listen(); err != nil {
		cancel()
		t.Fatalf("Listen: %v", err)
	}
	l.api, l.admin = "http://"+l.srv.Addr(), "http://"+l.srv.AdminAddr()

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = eng.Run(ctx) }()
	go func() { defer wg.Done(); _ = l.throttler.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := l.srv.Serve(ctx); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		// Connections the client dialled but never used are "new" to the
		// server, and Shutdown waits 5 s before it counts them as idle.
		httpClient.CloseIdleConnections()
		cancel()
		wg.Wait()
		if out := logs.String(); strings.Contains(out, "panic while serving") || strings.Contains(out, "http: panic") {
			t.Errorf("the server logged a panic:\n%s", out)
		}
	})
	return l
}

// token creates a token through the store (scope may be zero).
func (l *live) token(t testing.TB, ns string, scope auth.Scope) string {
	t.Helper()
	tok, err := l.tokens.Create(context.Background(), "", ns, "test", "", scope)
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	return tok
}

// liveResponse is a response read in full.
type liveResponse struct {
	status int
	body   string
	header http.Header
}

// httpClient is a client without keep-alive surprises between tests.
var httpClient = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// liveDo sends one request with net/http's client.
func liveDo(t testing.TB, method, url string, body io.Reader, header map[string]string) liveResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatalf("new request %s %s: %v", method, url, err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return liveResponse{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// rawResult is what a raw TCP exchange produced: a status (0 when the
// server closed the connection without answering) and the error that
// ended the read, if any.
type rawResult struct {
	status int
	body   string
	err    error
}

// rawExchange writes raw bytes to addr (host:port) and reads one response.
func rawExchange(addr string, raw []byte, timeout time.Duration) rawResult {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return rawResult{err: err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	// The answer is read while the request is still being written: a
	// server refusing a request too large (net/http's 431) answers before
	// it has read it all, then closes, and the kernel resets a connection
	// closed with bytes unread; a reader that waited for its own write to
	// finish could lose the answer to that reset on a loaded machine.
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(raw)
		wrote <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if werr := <-wrote; werr != nil {
			return rawResult{err: fmt.Errorf("write: %v; read: %w", werr, err)}
		}
		return rawResult{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return rawResult{status: resp.StatusCode, body: string(b)}
}

// newRequest builds a request with an optional body.
func newRequest(t testing.TB, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
