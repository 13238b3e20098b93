package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

const (
	// requestIDHeader is in canonical form, so that setting it needs no
	// canonicalisation.
	requestIDHeader = "X-Request-Id"
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
	// adm is the request's admission (guard), for a handler that takes
	// more from the rate limits (a bulk's jobs, admitJobs).
	adm *admission
	// start is when the request reached the handler chain.
	start time.Time
}

// stateWriter is the ResponseWriter withRequestID gives the router: it
// carries the request's state, so that the hot routes need no per-request
// map (gin's Context.Set) to find it.
type stateWriter struct {
	http.ResponseWriter
	st reqState
}

// Unwrap lets http.ResponseController and gin reach the connection's
// writer.
func (w *stateWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the underlying writer when it can.
func (w *stateWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands over the connection when the underlying writer allows it.
func (w *stateWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, http.ErrNotSupported
}

// withRequestID gives every response, redirects and gin's own 404s
// included, a fresh X-Request-ID (an incoming one is ignored, as lmstfy
// does), and creates the request's state.
func withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ulid.Make().String()
		w.Header()[requestIDHeader] = []string{id}
		h.ServeHTTP(&stateWriter{ResponseWriter: w, st: reqState{reqID: id, start: time.Now()}}, r)
	})
}

// state returns the request's state: the one withRequestID made, else one
// kept in the gin context (created on demand; for handlers used without
// withRequestID, as some tests do).
func state(c *gin.Context) *reqState {
	w := http.ResponseWriter(c.Writer)
	for {
		if sw, ok := w.(*stateWriter); ok {
			return &sw.st
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	if v, ok := c.Get(stateKey); ok {
		if st, ok := v.(*reqState); ok {
			return st
		}
	}
	id := c.Writer.Header().Get(requestIDHeader)
	if id == "" {
		id = ulid.Make().String()
		c.Header(requestIDHeader, id)
	}
	st := &reqState{reqID: id, start: time.Now()}
	c.Set(stateKey, st)
	return st
}

// stateKey keeps the state of a request that did not come through
// withRequestID.
const stateKey = "kairos.request"

// requestState is the first gin middleware: it makes sure the request has
// its state (and so its X-Request-ID) before anything else runs.
func requestState(c *gin.Context) { state(c) }

// accessLogger logs one line per request while the access log is enabled
// (lmstfy's fields; a token in the query string is redacted). redactPath
// replaces the path by the route template when the path holds a token.
func (s *Server) accessLogger(redactPath bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if !s.accessLog.Load() {
			return
		}
		path := c.Request.URL.Path
		if redactPath && strings.Contains(c.FullPath(), ":token") {
			path = c.FullPath()
		}
		st := state(c)
		s.logAccess(st.pool, path, c.Request.URL.RawQuery, st.start, c.ClientIP(), c.Request.Method, c.Writer.Status(), st.reqID, servedByHTTP)
	}
}

// logAccess writes one access log line (lmstfy's fields, the token in the
// query redacted, and Kairos's served_by: which path answered, "loop" or
// "http"), at a level that follows the status code.
func (s *Server) logAccess(pool, path, rawQuery string, start time.Time, ip, method string, code int, reqID, servedBy string) {
	e := s.log.WithFields(logrus.Fields{
		"pool":    pool,
		"path":    path,
		"query":   redactQuery(rawQuery),
		"latency": time.Since(start),
		"ip":      ip,
		"method":  method,
		"code":    code,
		"req_id":  reqID,

		"served_by": servedBy,
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
	c.Next()
	st := state(c)
	code := c.Writer.Status()
	r := s.metrics.route(routeLabels{st.pool, st.nsLabel, c.FullPath(), c.Request.Method, code, servedByHTTP})
	if r.latency != nil {
		r.latency.Observe(float64(time.Since(st.start)) / float64(time.Millisecond))
	}
	r.code.Inc()
	r.served.Inc()
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
	// jobs is what a publish takes from its token's jobs limit at
	// admission (admitJobs): 1, a bulk's first job (its handler charges
	// the rest once it has read them, chargeJobs).
	jobs int
}

// guard admits the request (admit: names → pool (404) → token (401) →
// scope (403) → throttle (429), lmstfy's order), then runs the handler,
// then refunds the throttle when the request did not deliver (consume not
// 200, publish not 201).
func (s *Server) guard(o routeOpts) gin.HandlerFunc {
	return func(c *gin.Context) {
		st := state(c)
		raw := c.GetHeader("X-Token")
		if raw == "" {
			raw = queryString(c, "token")
		}
		a := admission{ns: c.Param("namespace"), queue: c.Param("queue"), rawToken: raw, opts: o}
		err := s.admit(c.Request.Context(), &a, false)
		if o.multi && err == nil {
			st.queues = a.queues
			if st.queues == nil {
				st.queues = []string{a.queue}
			}
		}
		st.pool, st.token, st.eng, st.adm = a.pool, a.token, a.eng, &a
		if a.authenticated {
			st.nsLabel = a.ns
		}
		if err != nil {
			s.failAPI(c, err)
			return
		}
		c.Next()
		if !a.throttled && a.jobs == 0 {
			return
		}
		want := http.StatusOK
		if o.throttle == throttleProduce {
			want = http.StatusCreated
		}
		if c.Writer.Status() != want {
			// The client may be gone; the refund must happen anyway.
			ctx := context.WithoutCancel(c.Request.Context())
			if err := s.refundAdmission(ctx, &a); err != nil {
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
