// Package webhook delivers jobs to HTTP endpoints: a queue's push
// subscription makes Kairos POST each of its jobs to a URL, signed with an
// HMAC, and treat a 2xx answer as the ACK. A failed delivery is released
// with the queue's backoff policy, so tries, backoff and the dead letter
// apply exactly as to pull consumers.
//
// Subscriptions live in the admin Redis (hash "webhooks"); the Store reads
// and writes them, and the Manager runs the delivery workers of every
// subscription on this server instance, reloading the set every two
// seconds. NewManager starts nothing: call Run.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limits and defaults of a subscription.
const (
	// MaxConcurrency is the most delivery workers of one subscription on
	// one server instance.
	MaxConcurrency = 64
	// DefaultTTR is the TTR of a delivery when a subscription gives none.
	DefaultTTR = 30 * time.Second
	// DefaultTimeout is the HTTP timeout of one delivery when a
	// subscription gives none.
	DefaultTimeout = 10 * time.Second
	// MinTTR and MaxTTR bound a subscription's TTR (the delivery timeout,
	// at least 1 ms, must be shorter than the TTR).
	MinTTR = 2 * time.Millisecond
	MaxTTR = 24 * time.Hour
	// MaxURLLength and MaxSecretLength cap those fields.
	MaxURLLength    = 2048
	MaxSecretLength = 256
)

// Errors. Check them with errors.Is.
var (
	// ErrNotFound means the queue has no subscription.
	ErrNotFound = errors.New("webhook not found")
	// ErrInvalid is wrapped by every validation error of a subscription;
	// the error's text says what is wrong.
	ErrInvalid = errors.New("invalid webhook")
)

// hashKey is the admin-Redis hash of subscriptions: field
// "{pool}/{namespace}/{queue}" → JSON subscription.
const hashKey = "webhooks"

func field(pool, ns, q string) string { return pool + "/" + ns + "/" + q }

// Subscription is one queue's push subscription.
type Subscription struct {
	Pool      string `json:"-"`
	Namespace string `json:"-"`
	Queue     string `json:"-"`
	// URL receives a POST per job (http or https).
	URL string `json:"url"`
	// Secret keys the HMAC-SHA256 signature of each delivery.
	Secret string `json:"secret"`
	// Concurrency is the number of deliveries in flight at once, per
	// server instance (1..MaxConcurrency).
	Concurrency int `json:"concurrency"`
	// TTRMS is the time to run of each delivery in milliseconds: a job
	// whose delivery has not settled by then comes back.
	TTRMS int64 `json:"ttr_ms"`
	// TimeoutMS is the HTTP timeout of one delivery in milliseconds; it
	// must be shorter than the TTR.
	TimeoutMS int64 `json:"timeout_ms"`
}

// key identifies the subscription's queue.
func (s *Subscription) key() string { return field(s.Pool, s.Namespace, s.Queue) }

// TTR returns TTRMS as a duration.
func (s *Subscription) TTR() time.Duration { return time.Duration(s.TTRMS) * time.Millisecond }

// Timeout returns TimeoutMS as a duration.
func (s *Subscription) Timeout() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

// Given says which settings a request gave explicitly (for NormalizeGiven).
type Given struct{ Concurrency, TTR, Timeout bool }

// Normalize fills the defaults of zero fields (concurrency 1, TTR 30 s,
// timeout 10 s) and checks the subscription; errors wrap ErrInvalid.
// Pool, namespace and queue are the caller's to check.
func (s *Subscription) Normalize() error { return s.NormalizeGiven(Given{}) }

// NormalizeGiven is Normalize for a request that may have set a setting to
// 0 explicitly (a JSON key present with 0): a setting given is checked as
// it is, so an explicit 0 is out of range rather than silently the
// default; only the settings not given take their defaults.
func (s *Subscription) NormalizeGiven(g Given) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if s.URL == "" {
		return bad("url is required")
	}
	if len(s.URL) > MaxURLLength {
		return bad("url is longer than %d bytes", MaxURLLength)
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return bad("url must be an absolute http or https URL without credentials")
	}
	if s.Secret == "" {
		return bad("secret is required (it keys the X-Kairos-Signature HMAC)")
	}
	if len(s.Secret) > MaxSecretLength {
		return bad("secret is longer than %d bytes", MaxSecretLength)
	}
	if s.Concurrency == 0 && !g.Concurrency {
		s.Concurrency = 1
	}
	if s.Concurrency < 1 || s.Concurrency > MaxConcurrency {
		return bad("concurrency must be 1..%d", MaxConcurrency)
	}
	if s.TTRMS == 0 && !g.TTR {
		s.TTRMS = DefaultTTR.Milliseconds()
	}
	if s.TTRMS < MinTTR.Milliseconds() || s.TTRMS > MaxTTR.Milliseconds() {
		return bad("ttr_ms must be %d..%d", MinTTR.Milliseconds(), MaxTTR.Milliseconds())
	}
	if s.TimeoutMS == 0 && !g.Timeout {
		s.TimeoutMS = min(DefaultTimeout.Milliseconds(), s.TTRMS-1)
	}
	if s.TimeoutMS < 1 || s.TimeoutMS >= s.TTRMS {
		return bad("timeout_ms must be at least 1 and shorter than ttr_ms")
	}
	return nil
}

// Sign returns the X-Kairos-Signature value of a delivery:
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func Sign(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether signature is Sign(secret, timestamp, body),
// comparing in constant time. Receivers should also refuse timestamps too
// far from their clock, against replays.
func Verify(secret, timestamp string, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, timestamp, body)), []byte(signature))
}

// Store keeps subscriptions in the admin Redis.
type Store struct {
	rdb redis.UniversalClient
}

// NewStore returns a Store on the admin Redis client.
func NewStore(client redis.UniversalClient) *Store { return &Store{rdb: client} }

// Put creates or replaces the subscription of s's queue. s must be
// normalized.
func (st *Store) Put(ctx context.Context, s Subscription) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("webhook put %s: %w", s.key(), err)
	}
	if err := st.rdb.HSet(ctx, hashKey, s.key(), b).Err(); err != nil {
		return fmt.Errorf("webhook put %s: %w", s.key(), err)
	}
	return nil
}

// Get returns the subscription of a queue, or ErrNotFound.
func (st *Store) Get(ctx context.Context, pool, ns, q string) (Subscription, error) {
	f := field(pool, ns, q)
	v, err := st.rdb.HGet(ctx, hashKey, f).Result()
	if errors.Is(err, redis.Nil) {
		return Subscription{}, fmt.Errorf("webhook %s: %w", f, ErrNotFound)
	}
	if err != nil {
		return Subscription{}, fmt.Errorf("webhook get %s: %w", f, err)
	}
	return decode(f, v)
}

// Delete removes the subscription of a queue, or answers ErrNotFound.
func (st *Store) Delete(ctx context.Context, pool, ns, q string) error {
	f := field(pool, ns, q)
	n, err := st.rdb.HDel(ctx, hashKey, f).Result()
	if err != nil {
		return fmt.Errorf("webhook delete %s: %w", f, err)
	}
	if n == 0 {
		return fmt.Errorf("webhook %s: %w", f, ErrNotFound)
	}
	return nil
}

// List returns every subscription, sorted by pool, namespace and queue.
// Entries that cannot be decoded are skipped and reported in the error
// joined to the result (the result is still usable).
func (st *Store) List(ctx context.Context) ([]Subscription, error) {
	all, err := st.rdb.HGetAll(ctx, hashKey).Result()
	if err != nil {
		return nil, fmt.Errorf("webhook list: %w", err)
	}
	out := make([]Subscription, 0, len(all))
	var errs []error
	for f, v := range all {
		s, err := decode(f, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Subscription) int { return strings.Compare(a.key(), b.key()) })
	return out, errors.Join(errs...)
}

// decode reads a stored subscription; the field names its queue (the pool
// is everything before the last two slashes: namespaces and queues have
// none).
func decode(f, v string) (Subscription, error) {
	var s Subscription
	i := strings.LastIndexByte(f, '/')
	if i <= 0 {
		return s, fmt.Errorf("webhook %q: malformed field", f)
	}
	j := strings.LastIndexByte(f[:i], '/')
	if j < 0 {
		return s, fmt.Errorf("webhook %q: malformed field", f)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("webhook %q: %w", f, err)
	}
	s.Pool, s.Namespace, s.Queue = f[:j], f[j+1:i], f[i+1:]
	return s, nil
}
