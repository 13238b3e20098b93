package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/redisretry"
	"github.com/kairos-dev/kairos/server/webhook"
)

// This file is the only place that maps errors to HTTP responses. Handlers
// return errors; failAPI and failAdmin render them.

const jsonContentType = "application/json; charset=utf-8"

// apiError is an error with its HTTP rendering: a status and a one-key JSON
// object encoded once.
type apiError struct {
	status int
	msg    string
	body   []byte
	// retryAfter, when > 0, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.msg }

// newAPIError builds {"<key>":"<msg>"} as lmstfy renders it (encoding/json,
// so HTML characters are escaped the same way).
func newAPIError(status int, key, msg string) *apiError {
	body, err := json.Marshal(map[string]string{key: msg})
	if err != nil { // cannot happen for a map of strings
		body = []byte(`{"error":"internal error"}`)
	}
	return &apiError{status: status, msg: msg, body: body}
}

func badRequest(msg string) *apiError { return newAPIError(http.StatusBadRequest, "error", msg) }

// Client-visible errors, with lmstfy's status codes and messages verbatim.
var (
	errNameTooLong      = badRequest("namespace or queue name too long")
	errNamespaceChars   = badRequest("namespace name contains forbidden characters")
	errQueueChars       = badRequest("queue name contains forbidden characters")
	errQueueNames       = badRequest("invalid queue name(s)")
	errPoolNotFound     = newAPIError(http.StatusNotFound, "error", "pool not found")
	errTokenNotFound    = newAPIError(http.StatusUnauthorized, "error", "token not found")
	errInvalidToken     = newAPIError(http.StatusUnauthorized, "error", "invalid token")
	errInternal         = newAPIError(http.StatusInternalServerError, "error", "internal error")
	errThrottler        = newAPIError(http.StatusInternalServerError, "err", "internal error")
	errNoJob            = newAPIError(http.StatusNotFound, "msg", "no job available")
	errQueueEmpty       = newAPIError(http.StatusNotFound, "error", "the queue is empty")
	errJobNotFound      = newAPIError(http.StatusNotFound, "error", "job not found")
	errAPINotFound      = newAPIError(http.StatusNotFound, "error", "api not found")
	errBodyTooLarge     = newAPIError(http.StatusRequestEntityTooLarge, "error", "body too large")
	errJobTooLarge      = newAPIError(http.StatusRequestEntityTooLarge, "error", "job too large")
	errReadBody         = badRequest("failed to read body")
	errInvalidDelay     = badRequest("invalid delay")
	errInvalidTTL       = badRequest("invalid ttl")
	errInvalidTries     = badRequest("invalid tries")
	errInvalidTTR       = badRequest("invalid ttr")
	errInvalidTimeout   = badRequest("invalid timeout")
	errInvalidCount     = badRequest("invalid count")
	errInvalidLimit     = badRequest("invalid limit")
	errTTLShorter       = badRequest("ttl is shorter than delay")
	errZeroTries        = badRequest("tries shouldn't be zero")
	errNotArray         = badRequest("request body should be an array of objects")
	errNoJobs           = badRequest("no jobs")
	errTooManyJobs      = badRequest("too many jobs")
	errTooManyAttrs     = badRequest("too many attributes, cannot exceed 16")
	errInvalidRequest   = badRequest("invalid request")
	errShuttingDown     = retryLater(newAPIError(http.StatusServiceUnavailable, "error", "server is shutting down"))
	errUnavailable      = retryLater(newAPIError(http.StatusServiceUnavailable, "error", "redis is unavailable, retry later"))
	errNotReplicated    = retryLater(newAPIError(http.StatusServiceUnavailable, "error", msgNotReplicated))
	errClientGone       = newAPIError(499, "error", "client closed request")
	errRedisFull        = newAPIError(http.StatusInsufficientStorage, "error", "redis is full")
	errInvalidDesc      = badRequest("invalid description")
	errInvalidStatus    = badRequest("invalid status")
	errInvalidInterval  = badRequest("interval should be > 0")
	errInvalidLimiter   = badRequest("invalid limiter: the body should be a JSON object {\"read\":int,\"write\":int,\"interval\":int}")
	errThrottleDisabled = badRequest("rate limiting is disabled on this server")
	errAdminPool        = badRequest(auth.ErrPoolNotFound.Error())
	errTokenExists      = badRequest(auth.ErrTokenExists.Error())
	errTokenTooShort    = badRequest(auth.ErrTokenTooShort.Error())
	errNamespaceTooLong = badRequest(auth.ErrNamespaceTooLong.Error())
)

// retryAfterSeconds is the Retry-After of every 503: Redis outages that a
// retry can outlast (a restart, a failover) take seconds.
const retryAfterSeconds = 1

// retryLater gives a 503 its Retry-After.
func retryLater(e *apiError) *apiError {
	e.retryAfter = retryAfterSeconds
	return e
}

// msgNotReplicated is the error of a publish that was written on the
// master but not confirmed by enough replicas (WaitReplicas): the job
// exists unless a failover loses it, so a blind retry may duplicate it.
const msgNotReplicated = "publish not replicated: the job may exist"

// errNotReplicatedJobs is the 503 of a publish whose write happened but
// whose replica confirmation failed: it names the jobs that may exist, so
// that a client can check for them or retry with a job key instead of
// publishing duplicates (doc/API.md). One ID renders as "job_id" (the
// single publish), several as "job_ids" (bulk).
func errNotReplicatedJobs(ids []string) *apiError {
	var body []byte
	var err error
	switch len(ids) {
	case 0:
		return errNotReplicated
	case 1:
		body, err = json.Marshal(struct {
			Error string `json:"error"`
			JobID string `json:"job_id"`
		}{msgNotReplicated, ids[0]})
	default:
		body, err = json.Marshal(struct {
			Error  string   `json:"error"`
			JobIDs []string `json:"job_ids"`
		}{"publish not replicated: the jobs may exist", ids})
	}
	if err != nil { // cannot happen for strings
		return errNotReplicated
	}
	return &apiError{status: http.StatusServiceUnavailable, msg: msgNotReplicated, body: body, retryAfter: retryAfterSeconds}
}

// publishFailure is the error a publish handler renders for err, the
// engine's error for the jobs ids: a publish not replicated names its jobs.
func publishFailure(err error, ids ...string) error {
	if errors.Is(err, engine.ErrNotReplicated) && len(ids) > 0 && ids[0] != "" {
		return errNotReplicatedJobs(ids)
	}
	return err
}

// unavailable reports whether err means that Redis (or another store) cannot
// serve the request for now: the engine's ErrUnavailable, a connection that
// cannot be made or broke, a timeout that is not the client's own, an
// exhausted or closed connection pool, or Redis refusing while it loads,
// is read-only, fails over or cannot persist, or a Redis Cluster
// that moves slots or fails over (CLUSTERDOWN, TRYAGAIN, and a MOVED or ASK
// that go-redis could not follow within its redirects: the client's slot
// map is being rebuilt; a redirect's text, which names a node, never
// reaches a client). Those are 503s: a
// retry later may succeed, and nothing is wrong with the request. ctx is the request's:
// when it is done, the client went away (499), which is not an outage.
func unavailable(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, engine.ErrUnavailable),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		return true
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsMasterDownError(err), redis.IsTryAgainError(err), redirected(err):
		return true
	case redis.HasErrorPrefix(err, "MISCONF"), redis.HasErrorPrefix(err, "NOREPLICAS"), redis.HasErrorPrefix(err, "BUSY"),
		redis.HasErrorPrefix(err, "CLUSTERDOWN"), redis.HasErrorPrefix(err, "TRYAGAIN"):
		return true
	case redisretry.Lost(err): // a connection that broke or timed out mid-command
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// errPoolFull is the 507 of a write that the pool's Redis refused for
// memory (engine.ErrPoolFull: maxmemory reached under noeviction). It is
// not the 503 of an outage: a retry of the same publish fails until
// consumers make room, and consume, ACK, delete and release keep working.
// No Retry-After: when there is room again is the tenants' doing.
func errPoolFull(pool string) *apiError {
	return newAPIError(http.StatusInsufficientStorage, "error", "pool "+pool+" is full")
}

// full returns the 507 of err when a Redis refused it for memory: the
// pool's, named by the engine, or another Redis's (the admin Redis, a
// write the engine did not name its pool for: "redis is full"); else nil.
func full(err error) *apiError {
	var pf *engine.PoolFullError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pf):
		return errPoolFull(pf.Pool)
	case redis.HasErrorPrefix(err, "OOM "):
		return errRedisFull
	}
	return nil
}

// redirected reports whether err is a Redis Cluster redirection (MOVED or
// ASK) that reached Kairos.
func redirected(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")
}

// errForbidden is the 403 for a scoped token used outside its scope.
func errForbidden(role auth.Role, queue string) *apiError {
	return newAPIError(http.StatusForbidden, "error", fmt.Sprintf("token is not allowed to %s queue %s", role, queue))
}

// errRateLimited is lmstfy's 429 (key "msg"); action is consume or produce.
func errRateLimited(token, action string) *apiError {
	return newAPIError(http.StatusTooManyRequests, "msg",
		fmt.Sprintf("token(%s) %s reach the limit rate, please retry later", token, action))
}

// errLimitExists is lmstfy's message for a duplicate limiter, with 409.
func errLimitExists(token string) *apiError {
	return newAPIError(http.StatusConflict, "error", fmt.Sprintf("throttler token(%s) has already exists", token))
}

// mapAPIError maps an error of the public API to its rendering.
func mapAPIError(ctx context.Context, err error) *apiError {
	if ae := full(err); ae != nil {
		return ae
	}
	if ae := quotaRefusal(err); ae != nil {
		return ae
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, engine.ErrJobNotFound):
		return errJobNotFound
	case errors.Is(err, engine.ErrQueueEmpty):
		return errQueueEmpty
	case errors.Is(err, engine.ErrStaleReceipt):
		return errStaleReceipt
	case errors.Is(err, engine.ErrInvalid):
		return errInvalidRequest
	case errors.Is(err, engine.ErrClosed):
		return errShuttingDown
	case errors.Is(err, engine.ErrNotReplicated):
		return errNotReplicated
	case errors.Is(err, auth.ErrInvalidToken):
		return errInvalidToken
	case errors.Is(err, auth.ErrPoolNotFound):
		return errPoolNotFound
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return errClientGone
	case unavailable(ctx, err):
		return errUnavailable
	case errors.As(err, new(throttlerError)):
		return errThrottler
	}
	return errInternal
}

// mapAdminError maps an error of the admin API to its rendering.
func mapAdminError(ctx context.Context, err error) *apiError {
	if ae := full(err); ae != nil {
		return ae
	}
	if ae := quotaRefusal(err); ae != nil {
		return ae
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, auth.ErrPoolNotFound):
		return errAdminPool
	case errors.Is(err, engine.ErrJobNotFound):
		return errJobNotFound
	case errors.Is(err, auth.ErrTokenExists):
		return errTokenExists
	case errors.Is(err, auth.ErrTokenTooShort):
		return errTokenTooShort
	case errors.Is(err, auth.ErrNamespaceTooLong):
		return errNamespaceTooLong
	case errors.Is(err, auth.ErrInvalidNamespace):
		return errNamespaceChars
	case errors.Is(err, auth.ErrInvalidScope), errors.Is(err, auth.ErrInvalidLimit),
		errors.Is(err, auth.ErrReservedToken), errors.Is(err, auth.ErrAmbiguousFingerprint),
		errors.Is(err, auth.ErrUnknownFingerprint):
		return badRequest(err.Error())
	case errors.Is(err, webhook.ErrNotFound):
		return errWebhookNotFound
	case errors.Is(err, webhook.ErrInvalid):
		return badRequest(err.Error())
	case errors.Is(err, engine.ErrInvalid):
		return errInvalidRequest
	case errors.Is(err, engine.ErrClosed):
		return errShuttingDown
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return errClientGone
	case unavailable(ctx, err):
		return errUnavailable
	}
	return errInternal
}

// failAPI renders err for the public API and aborts the handler chain.
// Server-side failures are logged with the request's fields.
func (s *Server) failAPI(c *gin.Context, err error) {
	st := state(c)
	s.countRefused(st.pool, st.nsLabel, err)
	s.render(c, err, mapAPIError(c.Request.Context(), err))
}

// failAdmin renders err for the admin API and aborts the handler chain.
func (s *Server) failAdmin(c *gin.Context, err error) {
	s.render(c, err, mapAdminError(c.Request.Context(), err))
}

// serverFault reports whether an answer of status is the server's or its
// store's failure, logged as an error with the request: a 5xx but the
// 507 of a full pool, which is the tenants' doing (one line per refused
// publish would flood the log while a pool fills; /readyz and the
// status-code metrics say it).
func serverFault(status int) bool {
	return status >= http.StatusInternalServerError && status != http.StatusInsufficientStorage
}

func (s *Server) render(c *gin.Context, err error, ae *apiError) {
	if serverFault(ae.status) {
		s.reqLogger(c).WithError(err).Error("request failed")
	} else if ae == errClientGone {
		s.reqLogger(c).WithError(err).Debug("client went away")
	}
	if ae.retryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	c.Data(ae.status, jsonContentType, ae.body)
	c.Abort()
}

// writeJSON renders v with encoding/json, as gin's c.JSON does (lmstfy).
func writeJSON(c *gin.Context, status int, v any) {
	c.JSON(status, v)
}

// reqLogger is the logger of one request: req_id, namespace, queue, job_id.
func (s *Server) reqLogger(c *gin.Context) logrus.FieldLogger {
	f := logrus.Fields{"req_id": state(c).reqID}
	for _, p := range c.Params {
		switch p.Key {
		case "namespace", "queue", "job_id":
			f[p.Key] = p.Value
		}
	}
	return s.log.WithFields(f)
}
