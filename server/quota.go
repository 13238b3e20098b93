package server

// Namespace quotas on the admin listener (issue #31, doc/API.md#quotas):
// what a namespace holds in a pool (its jobs and their stored bytes, counted by
// the engine as jobs change) against what it may hold. The engine keeps
// the counts and the quotas and refuses, in the publish's own script, a
// publish that would exceed one (engine.Tenancy); this file is the HTTP
// side: the /quota routes, the 429 of a refused publish on every path,
// and the metrics of usage, quotas and refusals.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
)

var (
	errNoTenancy     = newAPIError(http.StatusNotImplemented, "error", "this pool's engine keeps no usage or quotas")
	errInvalidQuota  = badRequest(`invalid quota: the body should be a JSON object {"max_jobs":int,"max_bytes":int}, each >= 0 (0: no limit)`)
	errNegativeQuota = badRequest("invalid quota: max_jobs and max_bytes must be >= 0 (0: no limit)")
)

// Where a namespace's quota comes from (quotaJSON.Source).
const (
	quotaOwn     = "namespace" // set for the namespace (PUT /quota/:namespace)
	quotaDefault = "default"   // the pool's [Pool.NAME] DefaultMaxJobs and DefaultMaxBytes
)

// errQuotaExceeded is the 429 of a publish refused for a quota: the
// engine's message, which names the limit ("namespace quota exceeded:
// max_jobs 50"), under "error". lmstfy's rate limit answers 429 too, with
// "msg" and another text, so that clients can tell the two apart. No
// Retry-After: room comes back when the namespace's consumers ACK, which
// no server can predict.
func errQuotaExceeded(qe *engine.QuotaError) *apiError {
	return newAPIError(http.StatusTooManyRequests, "error", qe.Error())
}

// quotaRefusal returns the 429 of err when it is a quota's refusal, else
// nil. It is called by mapAPIError and mapAdminError, so that every
// publishing path (net/http, the event loops, bulk, re-publish) answers it
// the same.
func quotaRefusal(err error) *apiError {
	if err == nil || !errors.Is(err, engine.ErrQuotaExceeded) {
		return nil
	}
	var qe *engine.QuotaError
	if errors.As(err, &qe) {
		return errQuotaExceeded(qe)
	}
	return newAPIError(http.StatusTooManyRequests, "error", "namespace quota exceeded")
}

// refusalReason is the reason label of kairos_publish_refused_total for a
// write refused for room, or "" for any other error.
func refusalReason(err error) string {
	var qe *engine.QuotaError
	var pf *engine.PoolFullError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &qe):
		return "quota_" + strings.TrimPrefix(qe.Limit, "max_")
	case errors.Is(err, engine.ErrQuotaExceeded):
		return "quota"
	case errors.As(err, &pf), errors.Is(err, engine.ErrPoolFull):
		return "pool_full"
	}
	return ""
}

// countRefused counts a write refused for room (a quota or a full pool);
// any other error is not counted. ns is the metric namespace label ("" for
// an unauthenticated request).
func (s *Server) countRefused(pool, ns string, err error) {
	if reason := refusalReason(err); reason != "" {
		s.quotaMetrics.refused.WithLabelValues(pool, ns, reason).Inc()
	}
}

// tenancyPool is the pool whose engine counts and limits a pool's
// namespaces: the pool itself, or for a pool migrating (MigrateTo) the
// pool its publishes go to.
func (s *Server) tenancyPool(pool string) string {
	if m, ok := s.engines[pool].(*migration.Engine); ok && s.cfg != nil {
		if to := s.cfg.Pool[pool].MigrateTo; to != "" && s.engines[to] == m.New {
			return to
		}
	}
	return pool
}

// tenancyOf returns the usage and quotas of a pool: its engine's, or for
// a migrating pool those of the engine its publishes go to.
func (s *Server) tenancyOf(pool string) (engine.Tenancy, error) {
	eng, ok := s.engines[pool]
	if !ok {
		return nil, errAdminPool
	}
	if m, ok := eng.(*migration.Engine); ok {
		eng = m.New
	}
	t, ok := eng.(engine.Tenancy)
	if !ok {
		return nil, errNoTenancy
	}
	return t, nil
}

// defaultQuota is the quota of a pool's namespaces that have none of
// their own: [Pool.NAME] DefaultMaxJobs and DefaultMaxBytes, as the engine
// was given them (app.New).
func (s *Server) defaultQuota(pool string) engine.Quota {
	if s.cfg == nil {
		return engine.Quota{}
	}
	return s.cfg.Pool[s.tenancyPool(pool)].DefaultQuota()
}

// quotaJSON is one namespace's quota and usage on the wire (keys in
// alphabetical order).
type quotaJSON struct {
	// Bytes and Jobs are the namespace's usage now.
	Bytes     int64  `json:"bytes"`
	Jobs      int64  `json:"jobs"`
	MaxBytes  int64  `json:"max_bytes"`
	MaxJobs   int64  `json:"max_jobs"`
	Namespace string `json:"namespace"`
	Pool      string `json:"pool"`
	// Source is quotaOwn or quotaDefault.
	Source string `json:"source"`
}

func renderQuota(pool, ns string, q engine.Quota, own bool, u engine.Usage) quotaJSON {
	src := quotaDefault
	if own {
		src = quotaOwn
	}
	return quotaJSON{Bytes: u.Bytes, Jobs: u.Jobs, MaxBytes: q.MaxBytes, MaxJobs: q.MaxJobs, Namespace: ns, Pool: pool, Source: src}
}

// quotaBody is a PUT /quota body: an absent key is 0, no limit. Pointers
// are not needed: every key is replaced.
type quotaBody struct {
	MaxJobs  int64 `json:"max_jobs"`
	MaxBytes int64 `json:"max_bytes"`
}

// quotaTarget reads and checks the pool and namespace of a /quota route
// and returns the pool's tenancy.
func (s *Server) quotaTarget(c *gin.Context) (pool, ns string, t engine.Tenancy, ok bool) {
	ns = c.Param("namespace")
	if err := validateNamespace(ns); err != nil {
		s.failAdmin(c, err)
		return "", "", nil, false
	}
	pool = queryPool(c)
	t, err := s.tenancyOf(pool)
	if err != nil {
		s.failAdmin(c, err)
		return "", "", nil, false
	}
	return pool, ns, t, true
}

// namespaceQuota reads a namespace's quota (its own or the default) and
// usage.
func namespaceQuota(ctx context.Context, t engine.Tenancy, pool, ns string) (quotaJSON, error) {
	q, own, err := t.Quota(ctx, ns)
	if err != nil {
		return quotaJSON{}, err
	}
	u, err := t.Usage(ctx, ns)
	if err != nil {
		return quotaJSON{}, err
	}
	return renderQuota(pool, ns, q, own, u), nil
}

// getQuota serves GET /quota/:namespace?pool=: the namespace's limits,
// whether they are its own or the pool's default, and its usage.
func (s *Server) getQuota(c *gin.Context) {
	pool, ns, t, ok := s.quotaTarget(c)
	if !ok {
		return
	}
	out, err := namespaceQuota(c.Request.Context(), t, pool, ns)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, out)
}

// putQuota serves PUT /quota/:namespace?pool= with {"max_jobs","max_bytes"}
// (each >= 0, 0 or absent: no limit): the namespace's own quota, which
// replaces the default ({} exempts the namespace from a default). A quota
// below the usage refuses the next publishes and removes nothing.
// Answers as GET.
func (s *Server) putQuota(c *gin.Context) {
	pool, ns, t, ok := s.quotaTarget(c)
	if !ok {
		return
	}
	var b quotaBody
	if !s.decodeAdminJSON(c, &b, errInvalidQuota) {
		return
	}
	if b.MaxJobs < 0 || b.MaxBytes < 0 {
		s.failAdmin(c, errNegativeQuota)
		return
	}
	ctx := c.Request.Context()
	if err := t.SetQuota(ctx, ns, engine.Quota{MaxJobs: b.MaxJobs, MaxBytes: b.MaxBytes}); err != nil {
		s.failAdmin(c, err)
		return
	}
	s.reqLogger(c).WithFields(logrus.Fields{"pool": pool, "max_jobs": b.MaxJobs, "max_bytes": b.MaxBytes}).Info("quota set")
	out, err := namespaceQuota(ctx, t, pool, ns)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, out)
}

// deleteQuota serves DELETE /quota/:namespace?pool=: the namespace's own
// quota is removed and the pool's default applies; 204 whether it had one
// or not.
func (s *Server) deleteQuota(c *gin.Context) {
	pool, ns, t, ok := s.quotaTarget(c)
	if !ok {
		return
	}
	if err := t.DeleteQuota(c.Request.Context(), ns); err != nil {
		s.failAdmin(c, err)
		return
	}
	s.reqLogger(c).WithField("pool", pool).Info("quota deleted")
	c.Status(http.StatusNoContent)
}

// quotaLimitsJSON is a pool's default quota on the wire.
type quotaLimitsJSON struct {
	MaxBytes int64 `json:"max_bytes"`
	MaxJobs  int64 `json:"max_jobs"`
}

// quotaListJSON is GET /quota's answer.
type quotaListJSON struct {
	// Defaults are the pools' default quotas, by pool.
	Defaults map[string]quotaLimitsJSON `json:"defaults"`
	// Namespaces are every namespace holding a job or having a quota of
	// its own, by pool then namespace.
	Namespaces []quotaJSON `json:"namespaces"`
}

// poolQuotas returns the quota and usage of every namespace of a pool that
// holds a job or has a quota of its own, sorted by namespace.
func (s *Server) poolQuotas(ctx context.Context, pool string, t engine.Tenancy) ([]quotaJSON, error) {
	usage, err := t.UsageAll(ctx)
	if err != nil {
		return nil, err
	}
	own, err := t.Quotas(ctx)
	if err != nil {
		return nil, err
	}
	def := s.defaultQuota(pool)
	names := make([]string, 0, len(usage)+len(own))
	for ns := range usage {
		names = append(names, ns)
	}
	for ns := range own {
		if _, ok := usage[ns]; !ok {
			names = append(names, ns)
		}
	}
	sort.Strings(names)
	out := make([]quotaJSON, 0, len(names))
	for _, ns := range names {
		q, set := own[ns]
		if !set {
			q = def
		}
		out = append(out, renderQuota(pool, ns, q, set, usage[ns]))
	}
	return out, nil
}

// listQuotas serves GET /quota: the quota and usage of every namespace of
// every pool (of ?pool= alone when given) that holds a job or has a quota
// of its own, and each pool's default. A pool whose engine keeps no
// quotas is left out.
func (s *Server) listQuotas(c *gin.Context) {
	pools := s.pools
	if p := c.Query("pool"); p != "" {
		if !slices.Contains(s.pools, p) {
			s.failAdmin(c, errAdminPool)
			return
		}
		pools = []string{p}
	}
	out := quotaListJSON{Defaults: map[string]quotaLimitsJSON{}, Namespaces: []quotaJSON{}}
	for _, pool := range pools {
		if len(pools) > 1 && s.tenancyPool(pool) != pool {
			continue // a migrating pool: its namespaces are its target's
		}
		t, err := s.tenancyOf(pool)
		if errors.Is(err, errNoTenancy) && len(pools) > 1 {
			continue
		}
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		list, err := s.poolQuotas(c.Request.Context(), pool, t)
		if err != nil {
			s.failAdmin(c, err)
			return
		}
		def := s.defaultQuota(pool)
		out.Defaults[pool] = quotaLimitsJSON{MaxBytes: def.MaxBytes, MaxJobs: def.MaxJobs}
		out.Namespaces = append(out.Namespaces, list...)
	}
	writeJSON(c, http.StatusOK, out)
}
