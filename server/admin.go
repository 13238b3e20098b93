package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"slices"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
)

// maxAdminBody caps admin request bodies (forms and limiter JSON).
const maxAdminBody = 64 << 10

type versionResponse struct {
	BuildCommit string `json:"build_commit"`
	BuildDate   string `json:"build_date"`
	Version     string `json:"version"`
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

// The Kairos extensions of the admin API: queue settings (backoff policy,
// dead TTL, pause; queue.go) and webhook subscriptions (webhook.go). Their
// errors and shared helpers follow.

var (
	errWebhookNotFound  = newAPIError(http.StatusNotFound, "error", "webhook not found")
	errWebhooksDisabled = newAPIError(http.StatusNotImplemented, "error", "webhooks are not enabled on this server")
	errInvalidQueueConf = badRequest(`invalid queue config: the body should be a JSON object {"backoff":string,"dead_ttl_ms":int,"paused":bool,"shards":int,"max_in_flight":int,"group_max_in_flight":int,"group_weights":{string:int}}`)
	errInvalidDeadTTL   = badRequest("invalid dead_ttl_ms")
	errInvalidShards    = badRequest(fmt.Sprintf("invalid shards: an integer 1..%d (0 means 1)", engine.MaxShards))
	errInvalidWebhookJS = badRequest(`invalid webhook: the body should be a JSON object {"url":string,"secret":string,"concurrency":int,"ttr_ms":int,"timeout_ms":int}`)
)

// adminQueue reads and checks the pool, namespace and queue of an admin
// queue route and returns the pool's engine.
func (s *Server) adminQueue(c *gin.Context) (pool, ns, q string, x engine.Engine, ok bool) {
	ns, q = c.Param("namespace"), c.Param("queue")
	if err := validateNames(ns, q); err != nil {
		s.failAdmin(c, err)
		return "", "", "", nil, false
	}
	pool = c.Query("pool")
	if pool == "" {
		pool = auth.DefaultPool
	}
	eng, found := s.engines[pool]
	if !found {
		s.failAdmin(c, errAdminPool)
		return "", "", "", nil, false
	}
	return pool, ns, q, eng, true
}

// decodeAdminJSON decodes a JSON object body of at most maxAdminBody bytes
// with no unknown field.
func (s *Server) decodeAdminJSON(c *gin.Context, v any, bad *apiError) bool {
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data")
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.failAdmin(c, errBodyTooLarge)
		} else {
			s.failAdmin(c, bad)
		}
		return false
	}
	return true
}
