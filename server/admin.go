package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kairos-dev/kairos/auth"
)

// maxAdminBody caps admin request bodies (forms and limiter JSON).
const maxAdminBody = 64 << 10

type versionResponse struct {
	BuildCommit string `json:"build_commit"`
	BuildDate   string `json:"build_date"`
	Version     string `json:"version"`
}

type tokensResponse struct {
	Tokens map[string]string `json:"tokens"`
}

type tokenResponse struct {
	Token string `json:"token"`
}

type limiterResponse struct {
	Limiter auth.Limit `json:"limiter"`
}

type msgResponse struct {
	Msg string `json:"msg"`
}

type statusResponse struct {
	Status string `json:"status"`
}

// listPools serves GET /pools: the pool names, sorted, indented.
func (s *Server) listPools(c *gin.Context) {
	c.IndentedJSON(http.StatusOK, s.pools)
}

// showVersion serves GET /version.
func (s *Server) showVersion(c *gin.Context) {
	c.IndentedJSON(http.StatusOK, versionResponse{
		BuildCommit: s.version.BuildCommit,
		BuildDate:   s.version.BuildDate,
		Version:     s.version.Version,
	})
}

// info serves GET /info?pool=: {namespace: [queues…]} of one pool (the
// default pool when pool is absent), 4-space indented like lmstfy.
func (s *Server) info(c *gin.Context) {
	pool := c.Query("pool")
	if pool == "" {
		pool = auth.DefaultPool
	}
	eng, ok := s.engines[pool]
	if !ok {
		s.failAdmin(c, errAdminPool)
		return
	}
	meta, err := eng.Info(c.Request.Context())
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if meta == nil {
		meta = map[string][]string{}
	}
	for ns, qs := range meta {
		if qs == nil {
			qs = []string{}
		}
		qs = slices.Clone(qs)
		slices.Sort(qs)
		meta[ns] = qs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "    ")
	if err := enc.Encode(meta); err != nil {
		s.failAdmin(c, err)
		return
	}
	c.Data(http.StatusOK, jsonContentType, buf.Bytes())
}

// serveMetrics serves GET /metrics from the injected Gatherer.
func (s *Server) serveMetrics(c *gin.Context) {
	promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}).ServeHTTP(c.Writer, c.Request)
}

// pprof serves /debug/pprof/* with net/http/pprof's handlers (never
// through http.DefaultServeMux).
func (s *Server) pprof(c *gin.Context) {
	switch c.Param("profile") {
	case "/profile":
		pprof.Profile(c.Writer, c.Request)
	case "/trace":
		pprof.Trace(c.Writer, c.Request)
	case "/cmdline":
		pprof.Cmdline(c.Writer, c.Request)
	case "/symbol":
		pprof.Symbol(c.Writer, c.Request)
	default:
		pprof.Index(c.Writer, c.Request)
	}
}

// getAccessLog serves GET /accesslog.
func (s *Server) getAccessLog(c *gin.Context) {
	c.JSON(http.StatusOK, s.accessLogStatus())
}

// setAccessLog serves POST /accesslog?status=enable|disable: a runtime
// toggle of this instance's access log.
func (s *Server) setAccessLog(c *gin.Context) {
	switch c.Query("status") {
	case "enable":
		s.accessLog.Store(true)
	case "disable":
		s.accessLog.Store(false)
	default:
		s.failAdmin(c, errInvalidStatus)
		return
	}
	c.JSON(http.StatusOK, s.accessLogStatus())
}

func (s *Server) accessLogStatus() statusResponse {
	if s.accessLog.Load() {
		return statusResponse{Status: "enabled"}
	}
	return statusResponse{Status: "disabled"}
}

// listTokens serves GET /token/:namespace?pool=. With a non-empty pool
// parameter the tokens are listed as "pool:token" (even pool=default, as
// lmstfy does).
func (s *Server) listTokens(c *gin.Context) {
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	pool := c.Query("pool")
	prefix := pool != ""
	if pool == "" {
		pool = auth.DefaultPool
	}
	if !s.tokens.HasPool(pool) {
		s.failAdmin(c, errAdminPool)
		return
	}
	tokens, err := s.tokens.List(c.Request.Context(), pool, ns, prefix)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if tokens == nil {
		tokens = map[string]string{}
	}
	c.IndentedJSON(http.StatusOK, tokensResponse{Tokens: tokens})
}

// createToken serves POST /token/:namespace. description (required),
// token (optional, ≥ 20 characters, may be "pool:token"), and the Kairos
// scope parameters queues and roles come from the query or a form body;
// pool from the query only.
func (s *Server) createToken(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
	}
	if err := c.Request.ParseForm(); err != nil {
		// lmstfy ignores form errors (a bad query escape drops that pair);
		// only an oversized body is refused.
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.failAdmin(c, errBodyTooLarge)
			return
		}
	}
	form := c.Request.Form
	desc, token := form.Get("description"), form.Get("token")
	if desc == "" {
		s.failAdmin(c, errInvalidDesc)
		return
	}
	if token != "" && len(token) < auth.MinUserTokenLength {
		s.failAdmin(c, errTokenTooShort)
		return
	}
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	scope, err := auth.ParseScope(form.Get("queues"), form.Get("roles"))
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	tok, err := s.tokens.Create(c.Request.Context(), c.Query("pool"), ns, desc, token, scope)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	s.reqLogger(c).WithField("scoped", !scope.IsZero()).Info("token created")
	c.IndentedJSON(http.StatusCreated, tokenResponse{Token: tok})
}

// deleteToken serves DELETE /token/:namespace/:token (":token" may be
// "pool:token"); the token's rate limit goes with it. 204 also for an
// unknown token.
func (s *Server) deleteToken(c *gin.Context) {
	ns := c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	pool, token := auth.ParseToken(c.Param("token"))
	if err := s.tokens.Delete(c.Request.Context(), pool, ns, token); err != nil {
		s.failAdmin(c, err)
		return
	}
	if s.throttler != nil {
		if err := s.throttler.Delete(c.Request.Context(), pool, ns, token); err != nil {
			s.reqLogger(c).WithError(err).Error("failed to delete the token's rate limit")
		}
	}
	s.reqLogger(c).Info("token deleted")
	c.Status(http.StatusNoContent)
}

// listLimits serves GET /limits?force_update=: every rate limit, sorted by
// namespace and token.
func (s *Server) listLimits(c *gin.Context) {
	entries := []auth.LimitEntry{}
	if s.throttler != nil {
		force, _ := strconv.ParseBool(c.Query("force_update"))
		got, err := s.throttler.List(c.Request.Context(), force)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		entries = append(entries, got...)
	}
	slices.SortFunc(entries, func(a, b auth.LimitEntry) int {
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Token, b.Token)
	})
	c.JSON(http.StatusOK, entries)
}

// limitTarget reads and checks the namespace and token of a limit route.
func (s *Server) limitTarget(c *gin.Context) (pool, ns, token string, ok bool) {
	ns = c.Param("namespace")
	if err := auth.ValidateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return "", "", "", false
	}
	pool, token = auth.ParseToken(c.Param("token"))
	return pool, ns, token, true
}

// getLimit serves GET /token/:namespace/:token/limit: the limit, or 404
// with the body null (lmstfy).
func (s *Server) getLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	if s.throttler != nil {
		l, found, err := s.throttler.Get(c.Request.Context(), pool, ns, token)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		if found {
			c.JSON(http.StatusOK, l)
			return
		}
	}
	c.JSON(http.StatusNotFound, nil)
}

// readLimit decodes and checks a limiter body in lmstfy's order.
func (s *Server) readLimit(c *gin.Context) (auth.Limit, bool) {
	var l auth.Limit
	if s.throttler == nil {
		s.failAdmin(c, errThrottleDisabled)
		return l, false
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody)
	if err := json.NewDecoder(body).Decode(&l); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.failAdmin(c, errBodyTooLarge)
		} else {
			s.failAdmin(c, errInvalidLimiter)
		}
		return l, false
	}
	if l.Read <= 0 && l.Write <= 0 {
		c.JSON(http.StatusBadRequest, limiterResponse{Limiter: l})
		c.Abort()
		return l, false
	}
	if l.Interval <= 0 {
		s.failAdmin(c, errInvalidInterval)
		return l, false
	}
	return l, true
}

// addLimit serves POST /token/:namespace/:token/limit: 201, or 409 when
// the token has a limit already.
func (s *Server) addLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	l, ok := s.readLimit(c)
	if !ok {
		return
	}
	if err := s.throttler.Add(c.Request.Context(), pool, ns, token, l); err != nil {
		if errors.Is(err, auth.ErrLimitExists) {
			err = errLimitExists(token)
		}
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusCreated, limiterResponse{Limiter: l})
}

// setLimit serves PUT /token/:namespace/:token/limit (create or replace).
func (s *Server) setLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	l, ok := s.readLimit(c)
	if !ok {
		return
	}
	if err := s.throttler.Set(c.Request.Context(), pool, ns, token, l); err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, limiterResponse{Limiter: l})
}

// deleteLimit serves DELETE /token/:namespace/:token/limit.
func (s *Server) deleteLimit(c *gin.Context) {
	pool, ns, token, ok := s.limitTarget(c)
	if !ok {
		return
	}
	if s.throttler == nil {
		s.failAdmin(c, errThrottleDisabled)
		return
	}
	if err := s.throttler.Delete(c.Request.Context(), pool, ns, token); err != nil {
		s.failAdmin(c, err)
		return
	}
	c.JSON(http.StatusOK, msgResponse{Msg: "success"})
}
