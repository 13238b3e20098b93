// Package server is Kairos's HTTP layer: the public job API, wire-compatible
// with lmstfy's, and the admin API (tokens, rate limits, pools, metrics,
// pprof) on its own listener.
//
// New builds both handlers and starts nothing; Listen binds the listeners
// (port 0 picks a free port, which tests use); Serve serves until its
// context is done and then shuts down gracefully, answering every waiting
// long-poll consumer at once. The binary in server/cmd/kairos-server only
// wires a Config, the engines and the auth store into Deps.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/evloop"
)

// ErrInvalidConfig is wrapped by every error New returns about its
// arguments; check it with errors.Is.
var ErrInvalidConfig = errors.New("server: invalid configuration")

// TokenStore is what the server needs from the token store (auth.Store):
// verification on the API, management on the admin API. A store that can
// also verify from memory (VerifyCached, as auth.Store) lets the event
// loops admit cached tokens without leaving the loop (admit.go).
type TokenStore interface {
	// HasPool reports whether pool is configured.
	HasPool(pool string) bool
	// Verify checks a token for namespace in pool and returns its scope;
	// auth.ErrInvalidToken when the token is unknown.
	Verify(ctx context.Context, pool, namespace, token string) (auth.Scope, error)
	// Create makes a token and returns it as clients must send it.
	Create(ctx context.Context, pool, namespace, description, token string, scope auth.Scope) (string, error)
	// List returns token → description for namespace in pool.
	List(ctx context.Context, pool, namespace string, prefixPool bool) (map[string]string, error)
	// Delete removes a token; an unknown token is not an error.
	Delete(ctx context.Context, pool, namespace, token string) error
}

// Throttler is what the server needs from the rate limiter (auth.Throttler).
// One that can also tell without I/O that a token has no limit (Unlimited,
// as auth.Throttler) lets the event loops admit it without leaving the
// loop (admit.go).
type Throttler interface {
	// Allow takes one request from the token's bucket (write = publish).
	Allow(ctx context.Context, pool, namespace, token string, write bool) (bool, error)
	// Refund gives back one request taken by Allow.
	Refund(ctx context.Context, pool, namespace, token string, write bool) error
	// Get returns the token's limit, and whether it has one.
	Get(ctx context.Context, pool, namespace, token string) (auth.Limit, bool, error)
	// Add creates a limit; auth.ErrLimitExists when there is one already.
	Add(ctx context.Context, pool, namespace, token string, l auth.Limit) error
	// Set creates or replaces a limit.
	Set(ctx context.Context, pool, namespace, token string, l auth.Limit) error
	// Delete removes a limit.
	Delete(ctx context.Context, pool, namespace, token string) error
	// List returns every limit.
	List(ctx context.Context, forceUpdate bool) ([]auth.LimitEntry, error)
}

// VersionInfo is what GET /version reports; empty fields read "unknown".
type VersionInfo struct {
	Version     string
	BuildCommit string
	BuildDate   string
}

// Deps are the server's collaborators, injected so that tests can use fakes.
type Deps struct {
	// Engines maps a pool name to its engine; it must contain "default".
	Engines map[string]engine.Engine
	// Tokens verifies and manages tokens (required).
	Tokens TokenStore
	// Throttler enforces per-token rate limits; nil means no throttling
	// (and the admin limit endpoints refuse to change anything).
	Throttler Throttler
	// Logger receives the error and access logs; nil discards them.
	Logger logrus.FieldLogger
	// Registerer is where the HTTP metrics are registered; nil means a
	// private registry, which then is also the Gatherer.
	Registerer prometheus.Registerer
	// Gatherer is served at the admin /metrics; nil means Registerer when
	// it is a Gatherer.
	Gatherer prometheus.Gatherer
	// Version is reported by the admin /version.
	Version VersionInfo
	// Now is the clock (elapsed_ms); nil means time.Now.
	Now func() time.Time
	// SkipVerify is lmstfy's -sv development flag: no token checks on the
	// public API at all.
	SkipVerify bool
	// Webhooks manages the queues' push subscriptions (webhook.Manager);
	// nil means the admin webhook routes answer 501.
	Webhooks Webhooks
	// ReadyChecks are what GET /readyz checks (each pool's Redis, the
	// admin Redis); none means ready while not shutting down.
	ReadyChecks []ReadyCheck
	// Tracer makes the spans of publish, consume, ACK and release
	// (tracing.Provider's Tracer); nil means tracing is off, at no cost.
	Tracer trace.Tracer
	// Audit stores the audit log of the admin listener (audit.Store on
	// the admin Redis, audit.go); nil means the entries only go to the
	// log and GET /audit answers 501.
	Audit AuditLog
}

// defaults are the lmstfy parameter defaults, checked once in New.
type defaults struct {
	ttl, delay, ttr, timeout uint64 // seconds
	tries                    uint64
	maxTimeout               uint64 // seconds
}

// Server serves Kairos's public and admin HTTP APIs.
type Server struct {
	cfg        *config.Config
	engines    map[string]engine.Engine
	pools      []string
	tokens     TokenStore
	throttler  Throttler
	log        logrus.FieldLogger
	gatherer   prometheus.Gatherer
	metrics    *metrics
	version    VersionInfo
	now        func() time.Time
	skipVerify bool
	webhooks   Webhooks
	def        defaults
	// audit keeps the admin listener's audit log (audit.go); nil: the
	// log only.
	audit        AuditLog
	auditMetrics *auditMetrics
	// quotaMetrics count the publishes refused for room (quota_metrics.go).
	quotaMetrics *quotaMetrics
	// passwords checks the admin accounts' passwords (admin_door.go);
	// logins throttles the failed ones (admin_login.go).
	passwords passwordChecker
	logins    *loginGuard
	// sizes and activity cache whole-namespace reads for the dashboard
	// (dashboard_cache.go).
	sizes    *nsCache[engine.QueueStats]
	activity *nsCache[engine.QueueDetail]
	// tracer is nil when tracing is off (trace.go); storeTrace is
	// Kairos.StoreTraceContext.
	tracer     trace.Tracer
	storeTrace bool

	accessLog atomic.Bool
	// debug is whether the logger logs at debug level: the hot paths build
	// their debug fields only then.
	debug bool

	api   http.Handler
	admin http.Handler

	readyChecks []ReadyCheck
	readiness   readyState
	// draining is set when Close begins: /readyz answers 503 from then on.
	draining   atomic.Bool
	drainDelay time.Duration

	// pollCtx is cancelled at shutdown: every waiting consume listens to it.
	pollCtx     context.Context
	cancelPolls context.CancelFunc

	mu       sync.Mutex
	apiSrv   *http.Server
	adminSrv *http.Server
	apiLn    net.Listener
	adminLn  net.Listener
	serving  bool
	// loops serve the public listener's requests of loopRoutes (package
	// evloop, fastpath.go);
	// nil when Kairos.EventLoops is negative or the platform has none.
	loops   *evloop.Group
	closing bool // Close has begun

	// apiTLS and adminTLS are the listeners' TLS configurations ([TLS],
	// tls.go); nil serves plain HTTP.
	apiTLS, adminTLS *tls.Config

	closeOnce       sync.Once
	closeErr        error
	shutdownTimeout time.Duration
}

// ginMode sets gin's process-wide mode once: release mode, so that gin
// prints no debug banner or route table.
var ginMode sync.Once

// New checks cfg and deps and builds the server. It starts nothing and
// binds nothing: see Listen and Serve.
func New(cfg *config.Config, deps Deps) (*Server, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalidConfig)
	}
	if _, ok := deps.Engines[auth.DefaultPool]; !ok {
		return nil, fmt.Errorf("%w: no engine for the %q pool", ErrInvalidConfig, auth.DefaultPool)
	}
	for name, e := range deps.Engines {
		if e == nil {
			return nil, fmt.Errorf("%w: nil engine for pool %q", ErrInvalidConfig, name)
		}
	}
	if deps.Tokens == nil {
		return nil, fmt.Errorf("%w: no token store", ErrInvalidConfig)
	}
	for user := range cfg.Accounts {
		if user == "" {
			return nil, fmt.Errorf("%w: Accounts has an empty user name", ErrInvalidConfig)
		}
	}
	for user, a := range cfg.AccountAccess {
		if _, ok := cfg.Accounts[user]; !ok {
			return nil, fmt.Errorf("%w: Accounts.%s has a role but no password", ErrInvalidConfig, user)
		}
		if a.Role != "" && !slices.Contains(config.Roles, a.Role) {
			return nil, fmt.Errorf("%w: Accounts.%s.Role: unknown role %q (want %s)", ErrInvalidConfig, user, a.Role, strings.Join(config.Roles, ", "))
		}
		if a.Namespaces != nil && len(a.Namespaces) == 0 {
			return nil, fmt.Errorf("%w: Accounts.%s.Namespaces is empty (nil means every namespace)", ErrInvalidConfig, user)
		}
	}
	def, err := checkDefaults(cfg)
	if err != nil {
		return nil, err
	}

	s := &Server{
		logins:     newLoginGuard(),
		cfg:        cfg,
		engines:    deps.Engines,
		tokens:     deps.Tokens,
		throttler:  deps.Throttler,
		log:        deps.Logger,
		version:    deps.Version,
		now:        deps.Now,
		skipVerify: deps.SkipVerify,
		webhooks:   deps.Webhooks,
		def:        def,
		tracer:     deps.Tracer,
		storeTrace: cfg.Kairos.TraceContextStored(),
		audit:      deps.Audit,

		readyChecks: deps.ReadyChecks,
		sizes:       newNSCache[engine.QueueStats](sizesCacheTTL, sizesPerQueue),
		activity:    newNSCache[engine.QueueDetail](activityCacheTTL, activityPerQueue),
	}
	for name := range deps.Engines {
		s.pools = append(s.pools, name)
	}
	slices.Sort(s.pools)
	if s.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		s.log = l
	}
	switch l := s.log.(type) {
	case *logrus.Logger:
		s.debug = l.IsLevelEnabled(logrus.DebugLevel)
	case *logrus.Entry:
		s.debug = l.Logger.IsLevelEnabled(logrus.DebugLevel)
	default:
		s.debug = true // an unknown logger: do not hide its debug lines
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, f := range []*string{&s.version.Version, &s.version.BuildCommit, &s.version.BuildDate} {
		if *f == "" {
			*f = "unknown"
		}
	}
	reg := deps.Registerer
	s.gatherer = deps.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg = r
		if s.gatherer == nil {
			s.gatherer = r
		}
	}
	if s.gatherer == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			s.gatherer = g
		} else {
			s.gatherer = prometheus.NewRegistry()
		}
	}
	if s.metrics, err = newMetrics(reg); err != nil {
		return nil, err
	}
	if s.auditMetrics, err = newAuditMetrics(reg); err != nil {
		return nil, err
	}
	if s.quotaMetrics, err = s.newQuotaMetrics(reg); err != nil {
		return nil, err
	}
	s.accessLog.Store(cfg.EnableAccessLog)
	s.pollCtx, s.cancelPolls = context.WithCancel(context.Background())

	ginMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	s.api = withRequestID(s.apiRoutes())
	s.admin = withRequestID(s.adminRoutes())

	k := cfg.Kairos
	dk := config.Default().Kairos
	read := seconds(k.ReadTimeoutSecond, dk.ReadTimeoutSecond)
	readHeader := min(seconds(k.ReadHeaderTimeoutSecond, dk.ReadHeaderTimeoutSecond), read)
	write := seconds(k.WriteTimeoutSecond, dk.WriteTimeoutSecond) + time.Duration(def.maxTimeout)*time.Second
	idle := seconds(k.IdleTimeoutSecond, dk.IdleTimeoutSecond)
	s.shutdownTimeout = seconds(k.ShutdownTimeoutSecond, dk.ShutdownTimeoutSecond)
	if k.DrainDelaySecond > 0 {
		s.drainDelay = time.Duration(k.DrainDelaySecond) * time.Second
	}
	s.apiSrv = s.httpServer(s.api, readHeader, read, write, idle)
	s.adminSrv = s.httpServer(s.admin, readHeader, read, write, idle)
	if err := s.loadTLS(); err != nil {
		return nil, err
	}
	return s, nil
}

// eventLoops is how many event loops serve the public listener: none
// where the platform has none, Kairos.EventLoops is negative, or the
// public listener serves TLS (the loops step aside: tls.go).
func (s *Server) eventLoops() int {
	n := s.cfg.Kairos.EventLoops
	switch {
	case !evloop.Supported || n < 0 || s.apiTLS != nil:
		return 0
	case n == 0:
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// seconds converts a config value, falling back to def when it is not > 0.
func seconds(v, def int) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// checkDefaults validates the lmstfy parameter defaults the way lmstfy
// parses them per request, so that a bad default fails at startup instead
// of failing every request.
func checkDefaults(cfg *config.Config) (defaults, error) {
	var d defaults
	check := func(name string, v int, lo, hi int64) (uint64, error) {
		if int64(v) < lo || int64(v) > hi {
			return 0, fmt.Errorf("%w: %s must be in [%d, %d], not %d", ErrInvalidConfig, name, lo, hi, v)
		}
		return uint64(v), nil
	}
	var err error
	if d.ttl, err = check("TTLSecond", cfg.TTLSecond, 0, math.MaxUint32); err != nil {
		return d, err
	}
	if d.delay, err = check("DelaySecond", cfg.DelaySecond, 0, math.MaxUint32); err != nil {
		return d, err
	}
	if d.tries, err = check("TriesNum", cfg.TriesNum, 1, engine.MaxTries); err != nil {
		return d, err
	}
	if d.ttr, err = check("TTRSecond", cfg.TTRSecond, 0, math.MaxUint32); err != nil {
		return d, err
	}
	if d.timeout, err = check("TimeoutSecond", cfg.TimeoutSecond, 0, math.MaxUint32); err != nil {
		return d, err
	}
	maxTimeout := cfg.Kairos.MaxTimeoutSecond
	if maxTimeout <= 0 {
		maxTimeout = config.Default().Kairos.MaxTimeoutSecond
	}
	if d.maxTimeout, err = check("Kairos.MaxTimeoutSecond", maxTimeout, 1, math.MaxUint32); err != nil {
		return d, err
	}
	return d, nil
}

func (s *Server) httpServer(h http.Handler, readHeader, read, write, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeader,
		ReadTimeout:       read,
		WriteTimeout:      write,
		IdleTimeout:       idle,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          log.New(logWriter{s.log.WithField("component", "http")}, "", 0),
	}
}

// logWriter sends net/http's own error lines (TLS handshakes, malformed
// requests…) to the injected logger.
type logWriter struct{ log logrus.FieldLogger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Handler returns the public API handler (every route under /api).
func (s *Server) Handler() http.Handler { return s.api }

// AdminHandler returns the admin API handler.
func (s *Server) AdminHandler() http.Handler { return s.admin }

// Listen binds the public listener on Host:Port and the admin listener on
// AdminHost:AdminPort (AdminHost "" means 127.0.0.1); port 0 picks a free
// port, see Addr and AdminAddr.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiLn != nil {
		return errors.New("server: already listening")
	}
	apiLn, err := net.Listen("tcp", net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port)))
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	adminHost := s.cfg.AdminHost
	if adminHost == "" {
		adminHost = "127.0.0.1"
	}
	adminLn, err := net.Listen("tcp", net.JoinHostPort(adminHost, strconv.Itoa(s.cfg.AdminPort)))
	if err != nil {
		_ = apiLn.Close()
		return fmt.Errorf("server: listen admin: %w", err)
	}
	s.apiLn, s.adminLn = apiLn, adminLn
	return nil
}

// Addr returns the public listener's address, or "" before Listen.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apiLn == nil {
		return ""
	}
	return s.apiLn.Addr().String()
}

// AdminAddr returns the admin listener's address, or "" before Listen.
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Serve serves both APIs (calling Listen first if needed) until ctx is
// done or a listener fails, then shuts down as Close does. It returns nil
// after a clean shutdown.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	needListen := s.apiLn == nil
	s.mu.Unlock()
	if needListen {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	if s.serving {
		s.mu.Unlock()
		return errors.New("server: already serving")
	}
	s.serving = true
	apiLn, adminLn := s.apiLn, s.adminLn
	s.mu.Unlock()

	s.log.WithFields(logrus.Fields{"url": s.URL(), "admin_url": s.AdminURL()}).Info("serving")
	errc := make(chan error, 2)
	serve := func(srv *http.Server, ln net.Listener) {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}
	apiServed := apiLn
	if n := s.eventLoops(); n > 0 {
		g, err := s.startLoops(apiLn, n)
		if err != nil {
			s.log.WithError(err).Warn("event loops unavailable; net/http serves every request")
		} else {
			s.mu.Lock()
			closing := s.closing
			s.loops = g
			s.mu.Unlock()
			if closing {
				// Close ran meanwhile and did not see the loops.
				g.Shutdown()
			}
			apiServed = g.Handoff()
		}
	}
	if s.apiTLS != nil {
		apiServed = tls.NewListener(apiServed, s.apiTLS)
		if s.cfg.Kairos.EventLoops >= 0 && evloop.Supported {
			s.log.Info("the public listener serves TLS: the event loops step aside, net/http serves every request")
		}
	}
	if s.adminTLS != nil {
		adminLn = tls.NewListener(adminLn, s.adminTLS)
	}
	go serve(s.apiSrv, apiServed)
	go serve(s.adminSrv, adminLn)

	var serveErr error
	pending := 2
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		pending--
	}
	closeErr := s.Close()
	for ; pending > 0; pending-- {
		if err := <-errc; err != nil && serveErr == nil {
			serveErr = err
		}
	}
	if serveErr != nil {
		return fmt.Errorf("server: serve: %w", serveErr)
	}
	return closeErr
}

// Close shuts both servers down gracefully: /readyz turns 503 at once, and
// the server keeps serving for Kairos.DrainDelaySecond (when it is serving)
// so that load balancers stop routing to it; then it cancels every waiting
// long-poll (those consumers get 404 "no job available" at once), waits up
// to Kairos.ShutdownTimeoutSecond for requests in flight, and closes what
// is left. It is safe to call more than once and concurrently.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.draining.Store(true)
		s.mu.Lock()
		serving := s.serving
		s.mu.Unlock()
		if serving && s.drainDelay > 0 {
			s.log.WithField("delay", s.drainDelay).Info("not ready: draining before closing the listeners")
			time.Sleep(s.drainDelay)
		}
		s.cancelPolls()
		s.mu.Lock()
		s.closing = true
		loops := s.loops
		s.mu.Unlock()
		if loops != nil {
			// The loops answer what they have read and close their
			// connections; net/http then shuts down those it was given.
			loops.Shutdown()
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
		defer cancel()
		var errs []error
		var wg sync.WaitGroup
		for _, srv := range []*http.Server{s.apiSrv, s.adminSrv} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := srv.Shutdown(ctx); err != nil {
					_ = srv.Close()
					s.mu.Lock()
					errs = append(errs, fmt.Errorf("server: shutdown: %w", err))
					s.mu.Unlock()
				}
			}()
		}
		wg.Wait()
		s.mu.Lock()
		// Listeners bound by Listen but never served are not known to the
		// http.Servers; close them here (closing twice is harmless).
		for _, ln := range []net.Listener{s.apiLn, s.adminLn} {
			if ln != nil {
				_ = ln.Close()
			}
		}
		s.closeErr = errors.Join(errs...)
		s.mu.Unlock()
	})
	return s.closeErr
}
