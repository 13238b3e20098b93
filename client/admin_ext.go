package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The Kairos extensions of the admin API: queue settings and webhook
// subscriptions.

// QueueConfig are a queue's settings (Kairos extension).
type QueueConfig struct {
	// Backoff is the retry policy applied when a TTR expires or a job is
	// released without a delay: "none" (lmstfy's: ready again at once),
	// "fixed:30s", "exponential:1s,factor=2,max=10m,jitter=0.2" or a
	// ladder "10s,30s,1m,5m".
	Backoff string
	// DeadTTL, when positive, is how long dead jobs are kept.
	DeadTTL time.Duration
	// Paused queues hand out no jobs; publishing continues.
	Paused bool
	// Shards is how many shards the queue is spread over (hot-queue
	// shards, 1..64; 1 = unsharded; 0 from a server that predates them).
	// Ordering is per shard (doc/API.md, "Hot-queue shards").
	Shards int
	// MaxInFlight limits the queue's jobs in flight at once, across every
	// server; GroupMaxInFlight limits each group's (0 = no limit).
	MaxInFlight      int
	GroupMaxInFlight int
	// GroupWeights are the groups' weights in the round robin (1..100; a
	// group not named weighs 1); nil when none is set.
	GroupWeights map[string]int
}

// QueueConfigPatch changes some settings of a queue: nil fields keep their
// value.
type QueueConfigPatch struct {
	Backoff *string
	DeadTTL *time.Duration
	Paused  *bool
	// Shards sets the queue's number of shards, 1..64 (0 is 1).
	Shards *int
	// MaxInFlight and GroupMaxInFlight set the in-flight limits (0
	// removes one). A MaxInFlight is split over the queue's shards, so the
	// server refuses one below their number.
	MaxInFlight      *int
	GroupMaxInFlight *int
	// GroupWeights, when not nil, replaces the queue's group weights (an
	// empty map clears them).
	GroupWeights map[string]int
}

type wireQueueConfig struct {
	Backoff          string         `json:"backoff"`
	DeadTTLMS        int64          `json:"dead_ttl_ms"`
	Paused           bool           `json:"paused"`
	Shards           int            `json:"shards"`
	MaxInFlight      int            `json:"max_in_flight"`
	GroupMaxInFlight int            `json:"group_max_in_flight"`
	GroupWeights     map[string]int `json:"group_weights"`
}

func (w wireQueueConfig) config() QueueConfig {
	return QueueConfig{
		Backoff: w.Backoff, DeadTTL: time.Duration(w.DeadTTLMS) * time.Millisecond, Paused: w.Paused, Shards: w.Shards,
		MaxInFlight: w.MaxInFlight, GroupMaxInFlight: w.GroupMaxInFlight, GroupWeights: w.GroupWeights,
	}
}

// poolQuery is ?pool= when pool is not empty.
func poolQuery(pool string) url.Values {
	if pool == "" {
		return nil
	}
	return url.Values{"pool": {pool}}
}

// QueueConfig returns the settings of queue in namespace of pool ("" means
// "default").
func (a *Admin) QueueConfig(ctx context.Context, pool, namespace, queue string) (QueueConfig, error) {
	if namespace == "" || queue == "" {
		return QueueConfig{}, argError("empty namespace or queue")
	}
	var out wireQueueConfig
	if err := a.get(ctx, a.path("queue", namespace, queue, "config"), poolQuery(pool), &out); err != nil {
		return QueueConfig{}, err
	}
	return out.config(), nil
}

// SetQueueConfig changes the settings of a queue and returns them all.
func (a *Admin) SetQueueConfig(ctx context.Context, pool, namespace, queue string, patch QueueConfigPatch) (QueueConfig, error) {
	if namespace == "" || queue == "" {
		return QueueConfig{}, argError("empty namespace or queue")
	}
	body := map[string]any{}
	if patch.Backoff != nil {
		body["backoff"] = *patch.Backoff
	}
	if patch.DeadTTL != nil {
		if *patch.DeadTTL < 0 {
			return QueueConfig{}, argError("dead TTL must not be negative")
		}
		body["dead_ttl_ms"] = patch.DeadTTL.Milliseconds()
	}
	if patch.Paused != nil {
		body["paused"] = *patch.Paused
	}
	if patch.Shards != nil {
		if *patch.Shards < 0 || *patch.Shards > 64 {
			return QueueConfig{}, argError("shards must be 1..64")
		}
		body["shards"] = *patch.Shards
	}
	if patch.MaxInFlight != nil {
		if *patch.MaxInFlight < 0 {
			return QueueConfig{}, argError("max in flight must not be negative")
		}
		body["max_in_flight"] = *patch.MaxInFlight
	}
	if patch.GroupMaxInFlight != nil {
		if *patch.GroupMaxInFlight < 0 {
			return QueueConfig{}, argError("group max in flight must not be negative")
		}
		body["group_max_in_flight"] = *patch.GroupMaxInFlight
	}
	if patch.GroupWeights != nil {
		for g, w := range patch.GroupWeights {
			if !validGroup(g) {
				return QueueConfig{}, argError("group weights: %q is not a valid group name", g)
			}
			if w < 1 || w > MaxGroupWeight {
				return QueueConfig{}, argError("group weights: the weight of %q must be 1..%d (got %d)", g, MaxGroupWeight, w)
			}
		}
		body["group_weights"] = patch.GroupWeights
	}
	data, err := json.Marshal(body)
	if err != nil {
		return QueueConfig{}, err
	}
	resp, err := a.t.do(ctx, request{
		method: http.MethodPut, path: a.path("queue", namespace, queue, "config"), query: poolQuery(pool),
		body: data, header: http.Header{"Content-Type": {"application/json"}}, idempotent: true,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return QueueConfig{}, err
	}
	var out wireQueueConfig
	if err := decode(resp, &out); err != nil {
		return QueueConfig{}, err
	}
	return out.config(), nil
}

// MaxGroupWeight is the largest weight of a group.
const MaxGroupWeight = 100

// GroupStats is one group of a queue (QueueGroups).
type GroupStats struct {
	// Group is the group's name, "" for the default group.
	Group string `json:"group"`
	// Ready and InFlight count the group's jobs ready now (priority ones
	// included) and in flight.
	Ready    int64 `json:"ready"`
	InFlight int64 `json:"in_flight"`
	// Weight is the group's weight in the round robin.
	Weight int `json:"weight"`
	// Limited is true while the group is at the queue's GroupMaxInFlight.
	Limited bool `json:"limited"`
}

// QueueGroups are a queue's groups, biggest first, and its limits.
type QueueGroups struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	// InFlight counts the queue's jobs in flight now.
	InFlight int64 `json:"in_flight"`
	// MaxInFlight and GroupMaxInFlight are the queue's limits (0 = none).
	MaxInFlight      int `json:"max_in_flight"`
	GroupMaxInFlight int `json:"group_max_in_flight"`
	// Groups are the biggest groups (ready + in flight), at most the limit
	// asked for; Total counts every group with a ready or in-flight job,
	// and Truncated says Groups holds fewer.
	Groups    []GroupStats `json:"groups"`
	Total     int          `json:"total"`
	Truncated bool         `json:"truncated"`
}

// QueueGroups returns up to limit groups of queue (0: the server's default,
// 20; at most 500), biggest first, with the queue's in-flight count and
// limits (Kairos extension; the dashboard's groups panel).
func (a *Admin) QueueGroups(ctx context.Context, pool, namespace, queue string, limit int) (QueueGroups, error) {
	if namespace == "" || queue == "" {
		return QueueGroups{}, argError("empty namespace or queue")
	}
	if limit < 0 {
		return QueueGroups{}, argError("limit must not be negative")
	}
	q := poolQuery(pool)
	if limit > 0 {
		if q == nil {
			q = url.Values{}
		}
		q.Set("limit", strconv.Itoa(limit))
	}
	var out QueueGroups
	if err := a.get(ctx, a.path("queue", namespace, queue, "groups"), q, &out); err != nil {
		return QueueGroups{}, err
	}
	return out, nil
}

// Webhook is a queue's push subscription (Kairos extension): the server
// consumes the queue and POSTs each job to URL, signed with Secret; a 2xx
// answer ACKs the job.
type Webhook struct {
	Pool, Namespace, Queue string
	URL                    string
	// Secret signs the requests (HMAC); the server never shows it back
	// (it reads "REDACTED").
	Secret string
	// Concurrency is how many requests are in flight at once.
	Concurrency int
	// TTR is each job's time to run; Timeout bounds each request.
	TTR, Timeout time.Duration
}

type wireWebhook struct {
	Concurrency int    `json:"concurrency"`
	Namespace   string `json:"namespace"`
	Pool        string `json:"pool"`
	Queue       string `json:"queue"`
	Secret      string `json:"secret"`
	TimeoutMS   int64  `json:"timeout_ms"`
	TTRMS       int64  `json:"ttr_ms"`
	URL         string `json:"url"`
}

// ceilMillis is d in milliseconds, rounded up, so that a positive
// duration under 1 ms is not sent as 0.
func ceilMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

func (w wireWebhook) webhook() Webhook {
	return Webhook{
		Pool: w.Pool, Namespace: w.Namespace, Queue: w.Queue, URL: w.URL, Secret: w.Secret,
		Concurrency: w.Concurrency, TTR: time.Duration(w.TTRMS) * time.Millisecond,
		Timeout: time.Duration(w.TimeoutMS) * time.Millisecond,
	}
}

// SetWebhook creates or replaces the push subscription of w's queue and
// returns it as stored. Zero fields are not sent, so they take the
// server's defaults (concurrency 1, TTR 30 s, timeout 10 s or just under
// the TTR); durations are sent in milliseconds, rounded up.
func (a *Admin) SetWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	if w.Namespace == "" || w.Queue == "" {
		return Webhook{}, argError("empty namespace or queue")
	}
	fields := map[string]any{"url": w.URL, "secret": w.Secret}
	if w.Concurrency != 0 {
		fields["concurrency"] = w.Concurrency
	}
	if w.TTR != 0 {
		fields["ttr_ms"] = ceilMillis(w.TTR)
	}
	if w.Timeout != 0 {
		fields["timeout_ms"] = ceilMillis(w.Timeout)
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return Webhook{}, err
	}
	resp, err := a.t.do(ctx, request{
		method: http.MethodPut, path: a.path("webhook", w.Namespace, w.Queue), query: poolQuery(w.Pool),
		body: body, header: http.Header{"Content-Type": {"application/json"}}, idempotent: true,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return Webhook{}, err
	}
	var out wireWebhook
	if err := decode(resp, &out); err != nil {
		return Webhook{}, err
	}
	return out.webhook(), nil
}

// GetWebhook returns the push subscription of a queue; ErrNotFound when it
// has none.
func (a *Admin) GetWebhook(ctx context.Context, pool, namespace, queue string) (Webhook, error) {
	if namespace == "" || queue == "" {
		return Webhook{}, argError("empty namespace or queue")
	}
	var out wireWebhook
	if err := a.get(ctx, a.path("webhook", namespace, queue), poolQuery(pool), &out); err != nil {
		return Webhook{}, err
	}
	return out.webhook(), nil
}

// DeleteWebhook removes the push subscription of a queue; ErrNotFound
// when it has none.
func (a *Admin) DeleteWebhook(ctx context.Context, pool, namespace, queue string) error {
	if namespace == "" || queue == "" {
		return argError("empty namespace or queue")
	}
	_, err := a.t.do(ctx, request{
		method: http.MethodDelete, path: a.path("webhook", namespace, queue), query: poolQuery(pool),
		want: []int{http.StatusNoContent},
	})
	return err
}

// Webhooks returns every push subscription of every pool.
func (a *Admin) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out []wireWebhook
	if err := a.get(ctx, a.path("webhooks"), nil, &out); err != nil {
		return nil, err
	}
	hooks := make([]Webhook, len(out))
	for i, w := range out {
		hooks[i] = w.webhook()
	}
	return hooks, nil
}
