package auth

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// DefaultRefresh is how often Throttler.Run reloads limits by default.
const DefaultRefresh = time.Second

// MaxLimitInterval is the longest Limit.Interval accepted, in seconds
// (about 31 years; it keeps the bucket arithmetic exact).
const MaxLimitInterval = 1_000_000_000

// Limit is one token's rate limit, lmstfy's JSON shape: Read consume
// requests and Write publish requests per Interval seconds; 0 (or less) in
// a direction means unlimited in that direction.
type Limit struct {
	Read     int64 `json:"read"`
	Write    int64 `json:"write"`
	Interval int64 `json:"interval"`
}

// Validate reports whether l can be stored: at least one direction must be
// limited and Interval must be in 1..MaxLimitInterval. Errors wrap
// ErrInvalidLimit with the reason.
func (l Limit) Validate() error {
	if l.Read <= 0 && l.Write <= 0 {
		return fmt.Errorf("%w: the read and write of limiter can't be 0 at the same time", ErrInvalidLimit)
	}
	if l.Interval <= 0 {
		return fmt.Errorf("%w: interval should be > 0", ErrInvalidLimit)
	}
	if l.Interval > MaxLimitInterval {
		return fmt.Errorf("%w: interval should be <= %d", ErrInvalidLimit, MaxLimitInterval)
	}
	return nil
}

// perInterval is the limit of one direction, <= 0 for unlimited.
func (l Limit) perInterval(write bool) int64 {
	if write {
		return l.Write
	}
	return l.Read
}

// LimitEntry is one row of the /limits listing.
type LimitEntry struct {
	Namespace string `json:"namespace"`
	Token     string `json:"token"` // "pool:token" for non-default pools
	Limiter   Limit  `json:"limiter"`
}

// ThrottlerOptions tune a Throttler. The zero value gives the defaults.
type ThrottlerOptions struct {
	// Refresh is how often Run reloads the limits from Redis; default
	// DefaultRefresh. It bounds how long a limit changed on another
	// instance takes to apply here.
	Refresh time.Duration
	// Now is the clock (passed to the bucket script); default time.Now.
	Now func() time.Time
}

// Throttler enforces per-token request rates across all server instances
// with an atomic Lua token bucket (capacity = limit, refill = limit per
// interval), per (pool, namespace, token, direction). Limits are stored
// lmstfy-compatibly in the admin Redis hash `__throttler_keys__` field
// "{pool}/{ns}/{token}" → JSON Limit, and cached in-process; each token has
// its own limit (lmstfy's aliasing bug does not exist here). It is safe for
// concurrent use.
type Throttler struct {
	client  redis.UniversalClient
	logger  logrus.FieldLogger
	refresh time.Duration
	now     func() time.Time

	mu     sync.RWMutex
	limits map[limitKey]Limit
	// gen counts local changes, so that a Reload that raced with one does
	// not overwrite it with an older snapshot.
	gen uint64
}

type limitKey struct{ pool, namespace, token string }

// NewThrottler returns a Throttler over the admin Redis client. It starts
// nothing and holds no limits until Reload or Run; a nil logger discards
// logs.
func NewThrottler(client redis.UniversalClient, logger logrus.FieldLogger, opts ThrottlerOptions) *Throttler {
	if logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		logger = l
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Throttler{
		client:  client,
		logger:  logger.WithField("component", "throttler"),
		refresh: opts.Refresh,
		now:     opts.Now,
		limits:  make(map[limitKey]Limit),
	}
}

// Run loads the limits, then reloads them every Refresh until ctx is done
// (it returns nil then). Reload errors are logged, and the last good limits
// stay in force.
func (t *Throttler) Run(ctx context.Context) error {
	ticker := time.NewTicker(t.refresh)
	defer ticker.Stop()
	for {
		if err := t.Reload(ctx); err != nil && ctx.Err() == nil {
			t.logger.WithError(err).Warn("reload throttler limits")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Reload replaces the cached limits with those in Redis. Entries that do
// not parse are skipped with a warning.
func (t *Throttler) Reload(ctx context.Context) error {
	const attempts = 3
	for range attempts {
		t.mu.RLock()
		gen := t.gen
		t.mu.RUnlock()
		all, err := t.client.HGetAll(ctx, throttlerKey).Result()
		if err != nil {
			return fmt.Errorf("auth: load throttler limits: %w", err)
		}
		limits := make(map[limitKey]Limit, len(all))
		for field, raw := range all {
			k, ok := parseLimitField(field)
			if !ok {
				t.logger.WithField("field", field).Warn("skipping throttler limit with a malformed name")
				continue
			}
			var l Limit // a fresh value per entry: no aliasing
			if err := json.Unmarshal([]byte(raw), &l); err != nil {
				t.logger.WithField("field", field).WithError(err).Warn("skipping throttler limit that does not decode")
				continue
			}
			if err := l.Validate(); err != nil {
				t.logger.WithField("field", field).WithError(err).Warn("skipping invalid throttler limit")
				continue
			}
			limits[k] = l
		}
		t.mu.Lock()
		if t.gen == gen {
			t.limits = limits
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
	}
	// Local changes kept racing with the load; they are in Redis too, so
	// the next reload picks everything up.
	return nil
}

func parseLimitField(field string) (limitKey, bool) {
	parts := strings.SplitN(field, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return limitKey{}, false
	}
	return limitKey{parts[0], parts[1], parts[2]}, true
}

func (t *Throttler) cached(pool, namespace, token string) (Limit, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	l, ok := t.limits[limitKey{normPool(pool), namespace, token}]
	return l, ok
}

func (t *Throttler) setCached(k limitKey, l Limit, present bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if present {
		t.limits[k] = l
	} else {
		delete(t.limits, k)
	}
}

// Allow takes one request from the bucket of the token's direction
// (write=true for publish, false for consume). It is true without a limit
// for that direction. On a Redis error it returns false and the error
// (fails closed).
func (t *Throttler) Allow(ctx context.Context, pool, namespace, token string, write bool) (bool, error) {
	l, ok := t.cached(pool, namespace, token)
	if !ok || l.perInterval(write) <= 0 {
		return true, nil
	}
	allowed, err := t.runBucket(ctx, normPool(pool), namespace, token, write, l, 1)
	if err != nil {
		return false, err
	}
	return allowed, nil
}

// Refund gives back one request taken by Allow (a consume that found no
// job, a publish that failed), never above the limit.
func (t *Throttler) Refund(ctx context.Context, pool, namespace, token string, write bool) error {
	l, ok := t.cached(pool, namespace, token)
	if !ok || l.perInterval(write) <= 0 {
		return nil
	}
	_, err := t.runBucket(ctx, normPool(pool), namespace, token, write, l, -1)
	return err
}

func (t *Throttler) runBucket(ctx context.Context, pool, namespace, token string, write bool, l Limit, cost int) (bool, error) {
	intervalMs := l.Interval * 1000
	res, err := bucketScript.Run(ctx, t.client,
		[]string{bucketKey(pool, namespace, token, write)},
		l.perInterval(write), intervalMs, t.now().UnixMilli(), cost, 2*intervalMs).Int()
	if err != nil {
		return false, fmt.Errorf("auth: throttle %s/%s: %w", pool, namespace, err)
	}
	return res == 1, nil
}

// Get returns the token's limit as stored in Redis (the admin view, fresh
// even before the next reload) and refreshes the local cache with it.
func (t *Throttler) Get(ctx context.Context, pool, namespace, token string) (Limit, bool, error) {
	pool = normPool(pool)
	raw, err := t.client.HGet(ctx, throttlerKey, limitField(pool, namespace, token)).Result()
	if errors.Is(err, redis.Nil) {
		t.setCached(limitKey{pool, namespace, token}, Limit{}, false)
		return Limit{}, false, nil
	}
	if err != nil {
		return Limit{}, false, fmt.Errorf("auth: get limit of %s/%s: %w", pool, namespace, err)
	}
	var l Limit
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		return Limit{}, false, fmt.Errorf("auth: decode limit of %s/%s: %w", pool, namespace, err)
	}
	t.setCached(limitKey{pool, namespace, token}, l, true)
	return l, true, nil
}

// Add sets the token's limit unless one exists (ErrLimitExists). The token
// itself is not checked, as in lmstfy. Errors: ErrInvalidLimit,
// ErrLimitExists.
func (t *Throttler) Add(ctx context.Context, pool, namespace, token string, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	pool = normPool(pool)
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("auth: encode limit: %w", err)
	}
	ok, err := t.client.HSetNX(ctx, throttlerKey, limitField(pool, namespace, token), b).Result()
	if err != nil {
		return fmt.Errorf("auth: add limit of %s/%s: %w", pool, namespace, err)
	}
	if !ok {
		return ErrLimitExists
	}
	t.setCached(limitKey{pool, namespace, token}, l, true)
	return nil
}

// Set creates or replaces the token's limit. The token's buckets keep their
// state, clamped to the new limit. Errors: ErrInvalidLimit.
func (t *Throttler) Set(ctx context.Context, pool, namespace, token string, l Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	pool = normPool(pool)
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("auth: encode limit: %w", err)
	}
	if err := t.client.HSet(ctx, throttlerKey, limitField(pool, namespace, token), b).Err(); err != nil {
		return fmt.Errorf("auth: set limit of %s/%s: %w", pool, namespace, err)
	}
	t.setCached(limitKey{pool, namespace, token}, l, true)
	return nil
}

// Delete removes the token's limit and its buckets. A token without a limit
// is not an error.
func (t *Throttler) Delete(ctx context.Context, pool, namespace, token string) error {
	pool = normPool(pool)
	_, err := t.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, throttlerKey, limitField(pool, namespace, token))
		p.Del(ctx, bucketKey(pool, namespace, token, false), bucketKey(pool, namespace, token, true))
		return nil
	})
	t.setCached(limitKey{pool, namespace, token}, Limit{}, false)
	if err != nil {
		return fmt.Errorf("auth: delete limit of %s/%s: %w", pool, namespace, err)
	}
	return nil
}

// List returns every limit from the cache, sorted by namespace then token;
// forceUpdate reloads from Redis first.
func (t *Throttler) List(ctx context.Context, forceUpdate bool) ([]LimitEntry, error) {
	if forceUpdate {
		if err := t.Reload(ctx); err != nil {
			return nil, err
		}
	}
	t.mu.RLock()
	out := make([]LimitEntry, 0, len(t.limits))
	for k, l := range t.limits {
		out = append(out, LimitEntry{Namespace: k.namespace, Token: FormatToken(k.pool, k.token), Limiter: l})
	}
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b LimitEntry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Token, b.Token))
	})
	return out, nil
}
