package server

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/server/webhook"
)

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

// redactedSecret replaces webhook secrets in responses.
const redactedSecret = "REDACTED"

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
