package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/auth"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/server/webhook"
)

// The Kairos extensions of the admin API: queue settings (backoff policy,
// dead TTL, pause) and webhook subscriptions.

// Webhooks is what the admin API needs from the webhook manager
// (webhook.Manager).
type Webhooks interface {
	// Put validates, stores and returns a subscription (webhook.ErrInvalid).
	Put(ctx context.Context, s webhook.Subscription) (webhook.Subscription, error)
	// Get returns a queue's subscription (webhook.ErrNotFound).
	Get(ctx context.Context, pool, namespace, queue string) (webhook.Subscription, error)
	// Delete removes a queue's subscription (webhook.ErrNotFound).
	Delete(ctx context.Context, pool, namespace, queue string) error
	// List returns every subscription.
	List(ctx context.Context) ([]webhook.Subscription, error)
}

var (
	errWebhookNotFound  = newAPIError(http.StatusNotFound, "error", "webhook not found")
	errWebhooksDisabled = newAPIError(http.StatusNotImplemented, "error", "webhooks are not enabled on this server")
	errInvalidQueueConf = badRequest(`invalid queue config: the body should be a JSON object {"backoff":string,"dead_ttl_ms":int,"paused":bool}`)
	errInvalidDeadTTL   = badRequest("invalid dead_ttl_ms")
	errInvalidWebhookJS = badRequest(`invalid webhook: the body should be a JSON object {"url":string,"secret":string,"concurrency":int,"ttr_ms":int,"timeout_ms":int}`)
)

// redactedSecret replaces webhook secrets in responses.
const redactedSecret = "REDACTED"

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

// queueConfigJSON is a queue's settings on the wire.
type queueConfigJSON struct {
	Backoff   string `json:"backoff"`
	DeadTTLMS int64  `json:"dead_ttl_ms"`
	Paused    bool   `json:"paused"`
}

// queueConfigPatch is a PUT body: absent fields keep their value.
type queueConfigPatch struct {
	Backoff   *string `json:"backoff"`
	DeadTTLMS *int64  `json:"dead_ttl_ms"`
	Paused    *bool   `json:"paused"`
}

func renderQueueConfig(cfg engine.QueueConfig) queueConfigJSON {
	return queueConfigJSON{Backoff: tidyDurations(cfg.Backoff.String()), DeadTTLMS: cfg.DeadTTL.Milliseconds(), Paused: cfg.Paused}
}

// tidyDurations drops the zero units Go prints in durations ("1m0s" →
// "1m", "1h0m0s" → "1h"), so that a policy reads back as an operator
// writes it; ParseBackoff reads both forms alike.
func tidyDurations(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "m0s", "m"), "h0m", "h")
}

// getQueueConfig serves GET /queue/:namespace/:queue/config?pool=.
func (s *Server) getQueueConfig(c *gin.Context) {
	_, ns, q, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	cfg, err := x.QueueConfig(c.Request.Context(), ns, q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, renderQueueConfig(cfg))
}

// putQueueConfig serves PUT /queue/:namespace/:queue/config?pool= with a
// JSON body {"backoff","dead_ttl_ms","paused"}; absent fields keep their
// value. Answers the whole new config.
func (s *Server) putQueueConfig(c *gin.Context) {
	_, ns, q, x, ok := s.adminQueue(c)
	if !ok {
		return
	}
	var patch queueConfigPatch
	if !s.decodeAdminJSON(c, &patch, errInvalidQueueConf) {
		return
	}
	var backoff *engine.Backoff
	if patch.Backoff != nil {
		var err error
		if backoff, err = engine.ParseBackoff(*patch.Backoff); err != nil {
			s.failAdmin(c, badRequest(strings.TrimSuffix(err.Error(), ": "+engine.ErrInvalid.Error())))
			return
		}
	}
	if patch.DeadTTLMS != nil && (*patch.DeadTTLMS < 0 || *patch.DeadTTLMS > maxParamMS) {
		s.failAdmin(c, errInvalidDeadTTL)
		return
	}
	ctx := c.Request.Context()
	cfg, err := x.QueueConfig(ctx, ns, q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	if patch.Backoff != nil {
		cfg.Backoff = backoff
	}
	if patch.DeadTTLMS != nil {
		cfg.DeadTTL = time.Duration(*patch.DeadTTLMS) * time.Millisecond
	}
	if patch.Paused != nil {
		cfg.Paused = *patch.Paused
	}
	if err := x.SetQueueConfig(ctx, ns, q, cfg); err != nil {
		s.failAdmin(c, err)
		return
	}
	out := renderQueueConfig(cfg)
	s.reqLogger(c).WithFields(logrus.Fields{"backoff": out.Backoff, "dead_ttl_ms": out.DeadTTLMS, "paused": out.Paused}).Info("queue config set")
	writeJSON(c, http.StatusOK, out)
}

// webhookJSON is a subscription on the wire (keys in alphabetical order;
// the secret is never shown).
type webhookJSON struct {
	Concurrency int    `json:"concurrency"`
	Namespace   string `json:"namespace"`
	Pool        string `json:"pool"`
	Queue       string `json:"queue"`
	Secret      string `json:"secret"`
	TimeoutMS   int64  `json:"timeout_ms"`
	TTRMS       int64  `json:"ttr_ms"`
	URL         string `json:"url"`
}

func renderWebhook(w webhook.Subscription) webhookJSON {
	return webhookJSON{
		Concurrency: w.Concurrency, Namespace: w.Namespace, Pool: w.Pool, Queue: w.Queue,
		Secret: redactedSecret, TimeoutMS: w.TimeoutMS, TTRMS: w.TTRMS, URL: w.URL,
	}
}

// webhookBody is a PUT /webhook body. The settings are pointers so that
// an explicit 0 (out of range) is told apart from an absent key (the
// default).
type webhookBody struct {
	URL         string `json:"url"`
	Secret      string `json:"secret"`
	Concurrency *int   `json:"concurrency"`
	TTRMS       *int64 `json:"ttr_ms"`
	TimeoutMS   *int64 `json:"timeout_ms"`
}

// subscription is the subscription b asks for, normalized: errors wrap
// webhook.ErrInvalid.
func (b webhookBody) subscription(pool, ns, q string) (webhook.Subscription, error) {
	sub := webhook.Subscription{Pool: pool, Namespace: ns, Queue: q, URL: b.URL, Secret: b.Secret}
	g := webhook.Given{Concurrency: b.Concurrency != nil, TTR: b.TTRMS != nil, Timeout: b.TimeoutMS != nil}
	if g.Concurrency {
		sub.Concurrency = *b.Concurrency
	}
	if g.TTR {
		sub.TTRMS = *b.TTRMS
	}
	if g.Timeout {
		sub.TimeoutMS = *b.TimeoutMS
	}
	return sub, sub.NormalizeGiven(g)
}

// webhookTarget checks a webhook route's queue and that webhooks are on.
func (s *Server) webhookTarget(c *gin.Context) (pool, ns, q string, ok bool) {
	if s.webhooks == nil {
		s.failAdmin(c, errWebhooksDisabled)
		return "", "", "", false
	}
	pool, ns, q, _, ok = s.adminQueue(c)
	return pool, ns, q, ok
}

// putWebhook serves PUT /webhook/:namespace/:queue?pool=: creates or
// replaces the queue's push subscription.
func (s *Server) putWebhook(c *gin.Context) {
	pool, ns, q, ok := s.webhookTarget(c)
	if !ok {
		return
	}
	var b webhookBody
	if !s.decodeAdminJSON(c, &b, errInvalidWebhookJS) {
		return
	}
	sub, err := b.subscription(pool, ns, q)
	if err == nil {
		sub, err = s.webhooks.Put(c.Request.Context(), sub)
	}
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	s.reqLogger(c).WithFields(logrus.Fields{"pool": pool, "url": sub.URL, "concurrency": sub.Concurrency}).Info("webhook set")
	writeJSON(c, http.StatusOK, renderWebhook(sub))
}

// getWebhook serves GET /webhook/:namespace/:queue?pool=.
func (s *Server) getWebhook(c *gin.Context) {
	pool, ns, q, ok := s.webhookTarget(c)
	if !ok {
		return
	}
	sub, err := s.webhooks.Get(c.Request.Context(), pool, ns, q)
	if err != nil {
		s.failAdmin(c, err)
		return
	}
	writeJSON(c, http.StatusOK, renderWebhook(sub))
}

// deleteWebhook serves DELETE /webhook/:namespace/:queue?pool=: 204, or
// 404 when the queue has no subscription.
func (s *Server) deleteWebhook(c *gin.Context) {
	pool, ns, q, ok := s.webhookTarget(c)
	if !ok {
		return
	}
	if err := s.webhooks.Delete(c.Request.Context(), pool, ns, q); err != nil {
		s.failAdmin(c, err)
		return
	}
	s.reqLogger(c).WithField("pool", pool).Info("webhook deleted")
	c.Status(http.StatusNoContent)
}

// listWebhooks serves GET /webhooks: every subscription of every pool.
func (s *Server) listWebhooks(c *gin.Context) {
	if s.webhooks == nil {
		s.failAdmin(c, errWebhooksDisabled)
		return
	}
	subs, err := s.webhooks.List(c.Request.Context())
	if err != nil && subs == nil {
		s.failAdmin(c, err)
		return
	}
	if err != nil {
		s.reqLogger(c).WithError(err).Warn("some webhook subscriptions cannot be read")
	}
	out := make([]webhookJSON, len(subs))
	for i, w := range subs {
		out[i] = renderWebhook(w)
	}
	writeJSON(c, http.StatusOK, out)
}
