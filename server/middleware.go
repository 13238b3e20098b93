package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

const (
	requestIDHeader = "X-Request-ID"
	stateKey        = "kairos.request"
)

// reqState is what the middleware learns about one request.
type reqState struct {
	reqID string
	// pool is the pool the token selected, once it is known to exist.
	pool string
	// token is the token without its pool prefix.
	token string
	// nsLabel is the namespace metric label: set only once the namespace
	// is authenticated, so that random names cannot blow up cardinality.
	nsLabel string
	eng     engine.Engine
	// queues are the consume route's queues, split on ','.
	queues []string
}

// withRequestID gives every response, redirects and gin's own 404s
// included, a fresh X-Request-ID (an incoming one is ignored, as lmstfy
// does).
func withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(requestIDHeader, ulid.Make().String())
		h.ServeHTTP(w, r)
	})
}

// requestState is the first gin middleware: it creates the request's state.
func requestState(c *gin.Context) {
	id := c.Writer.Header().Get(requestIDHeader)
	if id == "" { // handler used without withRequestID
		id = ulid.Make().String()
		c.Header(requestIDHeader, id)
	}
	c.Set(stateKey, &reqState{reqID: id})
}

// state returns the request's state (created on demand).
func state(c *gin.Context) *reqState {
	if v, ok := c.Get(stateKey); ok {
		if st, ok := v.(*reqState); ok {
			return st
		}
	}
	st := &reqState{reqID: c.Writer.Header().Get(requestIDHeader)}
	c.Set(stateKey, st)
	return st
}

// accessLogger logs one line per request while the access log is enabled
// (lmstfy's fields; a token in the query string is redacted). redactPath
// replaces the path by the route template when the path holds a token.
func (s *Server) accessLogger(redactPath bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		if !s.accessLog.Load() {
			return
		}
		path := c.Request.URL.Path
		if redactPath && strings.Contains(c.FullPath(), ":token") {
			path = c.FullPath()
		}
		st := state(c)
		code := c.Writer.Status()
		e := s.log.WithFields(logrus.Fields{
			"pool":    st.pool,
			"path":    path,
			"query":   redactQuery(c.Request.URL.RawQuery),
			"latency": time.Since(start),
			"ip":      c.ClientIP(),
			"method":  c.Request.Method,
			"code":    code,
			"req_id":  st.reqID,
		})
		switch {
		case code >= 500:
			e.Error("access")
		case code >= 400 && code != http.StatusNotFound:
			e.Warn("access")
		default:
			e.Info("access")
		}
	}
}

// redactQuery hides the value of every "token" parameter of a raw query.
// Pairs are split on '&' and also on ';' (which Go no longer treats as a
// separator but older clients and proxies do), so a token never reaches the
// log in clear.
func redactQuery(raw string) string {
	if !strings.Contains(raw, "token") && !strings.Contains(raw, "%") {
		return raw
	}
	var b strings.Builder
	for len(raw) > 0 {
		end := strings.IndexAny(raw, "&;")
		if end < 0 {
			end = len(raw)
		}
		p := raw[:end]
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == "token" {
			p = k + "=REDACTED"
		}
		b.WriteString(p)
		if end < len(raw) {
			b.WriteByte(raw[end])
			end++
		}
		raw = raw[end:]
	}
	return b.String()
}

// collectMetrics records lmstfy's HTTP metrics for every response.
func (s *Server) collectMetrics(c *gin.Context) {
	start := time.Now()
	c.Next()
	st := state(c)
	api := c.FullPath()
	code := c.Writer.Status()
	if code < 300 {
		s.metrics.latency.WithLabelValues(st.pool, st.nsLabel, api, c.Request.Method).
			Observe(float64(time.Since(start)) / float64(time.Millisecond))
	}
	s.metrics.codes.WithLabelValues(st.pool, st.nsLabel, api, c.Request.Method, strconv.Itoa(code)).Inc()
}

// recovery turns a panic into a logged 500 {"error":"internal error"}.
func (s *Server) recovery(c *gin.Context) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
			panic(r)
		}
		s.reqLogger(c).WithFields(logrus.Fields{
			"panic": fmt.Sprint(r),
			"stack": string(debug.Stack()),
		}).Error("panic while serving a request")
		if !c.Writer.Written() {
			c.Data(errInternal.status, jsonContentType, errInternal.body)
		}
		c.Abort()
	}()
	c.Next()
}

// throttleAction is what a route counts against a token's rate limit.
type throttleAction int

const (
	throttleNone throttleAction = iota
	throttleConsume
	throttleProduce
)

func (a throttleAction) String() string {
	if a == throttleProduce {
		return "produce"
	}
	return "consume"
}

// routeOpts say how guard protects one route.
type routeOpts struct {
	multi    bool      // consume route: the queue segment is "q1,q2,…"
	public   bool      // size routes: no token check
	role     auth.Role // what the token's scope must allow
	throttle throttleAction
}

// guard runs the checks of lmstfy's middleware chain in lmstfy's order:
// name validation → pool (404) → token (401) → scope (403) → throttle
// (429), then the handler, then a refund of the throttle when the request
// did not deliver (consume not 200, publish not 201).
func (s *Server) guard(o routeOpts) gin.HandlerFunc {
	return func(c *gin.Context) {
		st := state(c)
		ns, q := c.Param("namespace"), c.Param("queue")
		var err error
		if o.multi {
			err = validateMulti(ns, q)
		} else {
			err = validateNames(ns, q)
		}
		if err != nil {
			s.failAPI(c, err)
			return
		}
		queues := []string{q}
		if o.multi {
			queues = splitQueues(q)
			st.queues = queues
		}

		raw := c.GetHeader("X-Token")
		if raw == "" {
			raw = c.Query("token")
		}
		pool, token := auth.ParseToken(raw)
		eng, ok := s.engines[pool]
		if !ok {
			s.failAPI(c, errPoolNotFound)
			return
		}
		st.pool, st.token, st.eng = pool, token, eng

		if !o.public {
			if !s.skipVerify {
				if err := s.verify(c.Request.Context(), pool, ns, token, queues, o.role); err != nil {
					s.failAPI(c, err)
					return
				}
			}
			st.nsLabel = ns
		}

		if o.throttle == throttleNone || s.throttler == nil {
			c.Next()
			return
		}
		write := o.throttle == throttleProduce
		allowed, err := s.throttler.Allow(c.Request.Context(), pool, ns, token, write)
		if err != nil {
			s.failAPI(c, fmt.Errorf("throttle: %w", throttlerError{err}))
			return
		}
		if !allowed {
			s.metrics.rateLimit.WithLabelValues(pool, ns, s.tokenLabel(token), o.throttle.String()).Inc()
			s.failAPI(c, errRateLimited(token, o.throttle.String()))
			return
		}
		c.Next()
		want := http.StatusOK
		if write {
			want = http.StatusCreated
		}
		if c.Writer.Status() != want {
			// The client may be gone; the refund must happen anyway.
			ctx := context.WithoutCancel(c.Request.Context())
			if err := s.throttler.Refund(ctx, pool, ns, token, write); err != nil {
				s.reqLogger(c).WithError(err).Warn("throttle refund failed")
			}
		}
	}
}

// throttlerError marks a rate limiter failure, which lmstfy reports as
// 500 {"err":…}.
type throttlerError struct{ err error }

func (e throttlerError) Error() string { return e.err.Error() }
func (e throttlerError) Unwrap() error { return e.err }

// verify checks the token and its scope for every queue of the request.
func (s *Server) verify(ctx context.Context, pool, ns, token string, queues []string, role auth.Role) error {
	if token == "" {
		return errTokenNotFound
	}
	scope, err := s.tokens.Verify(ctx, pool, ns, token)
	if err != nil {
		return fmt.Errorf("verify token: %w", err)
	}
	for _, q := range queues {
		if !scope.Allows(q, role) {
			return errForbidden(role, q)
		}
	}
	return nil
}

// validateNames is lmstfy's ValidateParams.
func validateNames(ns, q string) error {
	if len(ns) > engine.MaxNameLength || len(q) > engine.MaxNameLength {
		return errNameTooLong
	}
	if !engine.ValidName(ns) {
		return errNamespaceChars
	}
	if !engine.ValidQueueName(q) {
		return errQueueChars
	}
	return nil
}

// validateMulti is lmstfy's ValidateMultiConsume (plus a length check on
// the namespace); each queue name is checked by the handler.
func validateMulti(ns, qs string) error {
	if len(ns) > engine.MaxNameLength {
		return errNameTooLong
	}
	if !engine.ValidName(ns) {
		return errNamespaceChars
	}
	if qs == "" {
		return errQueueChars
	}
	for i := 0; i < len(qs); i++ {
		c := qs[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == ',') {
			return errQueueChars
		}
	}
	return nil
}

// splitQueues splits "q1,,q2" into [q1 q2].
func splitQueues(qs string) []string {
	out := make([]string, 0, strings.Count(qs, ",")+1)
	for _, q := range strings.Split(qs, ",") {
		if q != "" {
			out = append(out, q)
		}
	}
	return out
}

// noRoute is lmstfy's answer to unknown routes and wrong methods.
func noRoute(c *gin.Context) {
	c.Data(errAPINotFound.status, jsonContentType, errAPINotFound.body)
}
