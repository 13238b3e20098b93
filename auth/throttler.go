package auth

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine/redisretry"
)

// DefaultRefresh is how often Throttler.Run reloads limits by default.
const DefaultRefresh = time.Second

// MaxLimitInterval is the longest Limit.Interval accepted, in seconds
// (about 31 years; it keeps the bucket arithmetic exact).
const MaxLimitInterval = 1_000_000_000

// Limit is one token's rate limit, lmstfy's JSON shape: Read consume
// requests and Write publish requests per Interval seconds; 0 (or less) in
// a direction means unlimited in that direction. WriteJobs, a Kairos
// extension, limits the jobs published per Interval, a bulk publish of n
// jobs taking n (a request limit counts it as one): the limit that bounds
// what publishing costs the pool, whatever the batching. It has a bucket
// of its own, beside Write's.
type Limit struct {
	Read      int64 `json:"read"`
	Write     int64 `json:"write"`
	WriteJobs int64 `json:"write_jobs,omitempty"`
	Interval  int64 `json:"interval"`
}

// Validate reports whether l can be stored: at least one direction must be
// limited and Interval must be in 1..MaxLimitInterval. Errors wrap
// ErrInvalidLimit with the reason.
func (l Limit) Validate() error {
	if l.Read <= 0 && l.Write <= 0 && l.WriteJobs <= 0 {
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
	// DefaultRefresh. It bounds how long a limit added on another instance
	// takes to apply here; a limit changed or deleted on another instance
	// applies at once (the change is written into the token's buckets and
	// pinned there for two reload periods, see Set).
	Refresh time.Duration
	// Now is the clock (passed to the bucket script); default time.Now.
	Now func() time.Time
	// HashTokens stores new limits under the token's hashed form (see
	// HashToken) instead of the token, and makes List show fingerprints.
	// Limits stored in either form apply whatever this setting.
	HashTokens bool
	// ClusterRetry bounds, on a Redis Cluster, how long a request's bucket
	// script is sent again while the cluster refuses it before running it
	// (redisretry.Refused: a failover, a slot migration) or it could not
	// be sent (redisretry.Unsent: a master that is down), as job
	// operations are: default DefaultClusterRetry; negative: no retry
	// beyond go-redis's own.
	ClusterRetry time.Duration
}

// Throttler enforces per-token request rates across all server instances
// with an atomic Lua token bucket (capacity = limit, refill = limit per
// interval), per (pool, namespace, token, direction). The bucket keeps the
// limit it is judged by, so that a limit changed or deleted on one instance
// applies to the next request on every instance. Limits are stored
// lmstfy-compatibly in the admin Redis hash `__throttler_keys__` field
// "{pool}/{ns}/{token}" → JSON Limit, and cached in-process; each token has
// its own limit (lmstfy's aliasing bug does not exist here). With
// ThrottlerOptions.HashTokens the token's hashed form takes the token's
// place in the field and in the bucket keys. It is safe for concurrent use.
type Throttler struct {
	client  redis.UniversalClient
	logger  logrus.FieldLogger
	refresh time.Duration
	now     func() time.Time
	hash    bool
	// pin is how long a limit written by Add, Set or Delete overrides the
	// limits other instances have cached: until they have reloaded.
	pin   time.Duration
	retry retrier

	// short holds, per token (limitKey), until when (Unix ns, this
	// instance's clock) its jobs bucket is known to hold less than one job:
	// learnt from a refusal's wait (at most maxJobsHold), forgotten when an
	// admin changes the limit here. Its publishes are refused meanwhile
	// without a round trip to Redis (JobsShort).
	short sync.Map
	// anyJobs is set while a cached limit has WriteJobs: without one, the
	// jobs methods answer at once, without hashing the token (the publish
	// path of a pool where nobody uses write_jobs costs what it did).
	anyJobs atomic.Bool

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
		hash:    opts.HashTokens,
		// Other instances may reload less often than this one: at least
		// two default periods.
		pin:    2 * max(opts.Refresh, DefaultRefresh),
		retry:  newRetrier(client, opts.ClusterRetry),
		limits: make(map[limitKey]Limit),
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
			t.anyJobs.Store(hasJobs(limits))
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

// cached returns the limit of a presented token, stored under its hashed
// form or in clear, and the form it is stored under.
func (t *Throttler) cached(pool, namespace, token string) (Limit, string, bool) {
	pool = normPool(pool)
	hashed := HashToken(token)
	t.mu.RLock()
	defer t.mu.RUnlock()
	if l, ok := t.limits[limitKey{pool, namespace, hashed}]; ok {
		return l, hashed, true
	}
	l, ok := t.limits[limitKey{pool, namespace, token}]
	return l, token, ok
}

// tokenForms are the forms a token's limit may be stored under: hashed
// always, plain when the secret is known (not when the token was named by
// a fingerprint of a hashed-only entry).
type tokenForms struct{ hashed, plain string }

// write is the form a new limit is stored under.
func (f tokenForms) write(hash bool) (target, other string) {
	if hash || f.plain == "" {
		return f.hashed, f.plain
	}
	return f.plain, f.hashed
}

// all returns the known forms.
func (f tokenForms) all() []string {
	if f.plain == "" {
		return []string{f.hashed}
	}
	return []string{f.hashed, f.plain}
}

// resolve turns the token of an admin limit route into its forms. A
// fingerprint is looked up among the namespace's tokens and cached limits:
// found false when it matches none, ErrAmbiguousFingerprint when several.
func (t *Throttler) resolve(ctx context.Context, pool, namespace, token string) (tokenForms, bool, error) {
	if !IsFingerprint(token) {
		return tokenForms{hashed: HashToken(token), plain: token}, true, nil
	}
	fields, err := t.client.HKeys(ctx, tokenKey(pool, namespace)).Result()
	if err != nil {
		return tokenForms{}, false, fmt.Errorf("auth: resolve fingerprint in %s/%s: %w", pool, namespace, err)
	}
	t.mu.RLock()
	for k := range t.limits {
		if k.pool == pool && k.namespace == namespace {
			fields = append(fields, k.token)
		}
	}
	t.mu.RUnlock()
	matches, err := resolveFingerprint(fields, token)
	if err != nil || len(matches) == 0 {
		return tokenForms{}, false, err
	}
	f := tokenForms{hashed: hashedFormOf(matches[0])}
	for _, m := range matches {
		if !isHashedForm(m) {
			f.plain = m
		}
	}
	return f, true, nil
}

func (t *Throttler) setCached(k limitKey, l Limit, present bool) {
	t.short.Delete(k)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if present {
		t.limits[k] = l
	} else {
		delete(t.limits, k)
	}
	t.anyJobs.Store(hasJobs(t.limits))
}

// hasJobs reports whether a limit of limits has WriteJobs.
func hasJobs(limits map[limitKey]Limit) bool {
	for _, l := range limits {
		if l.WriteJobs > 0 {
			return true
		}
	}
	return false
}

// Allow takes one request from the bucket of the token's direction
// (write=true for publish, false for consume). It is true without a limit
// for that direction. On a Redis error it returns false and the error
// (fails closed).
func (t *Throttler) Allow(ctx context.Context, pool, namespace, token string, write bool) (bool, error) {
	l, form, ok := t.cached(pool, namespace, token)
	if !ok || l.perInterval(write) <= 0 {
		return true, nil
	}
	res, err := t.runBucket(ctx, normPool(pool), namespace, bucketKey(normPool(pool), namespace, form, write), l.perInterval(write), l.Interval, 1)
	if err != nil {
		return false, err
	}
	return res == 1, nil
}

// maxJobsHold bounds how long a refusal of the jobs limit is remembered
// (JobsShort): a refund or a raised limit on another instance is seen
// within it.
const maxJobsHold = 250 * time.Millisecond

// JobsShort reports, without I/O, whether this instance knows the token's
// jobs bucket to hold less than one job now: a refusal by AllowJobs said
// how long it would take to refill (at most maxJobsHold ago). A publish
// is then refused at once; another instance's refund meanwhile is seen
// when the hold ends.
func (t *Throttler) JobsShort(pool, namespace, token string) bool {
	if !t.anyJobs.Load() {
		return false
	}
	_, form, ok := t.cached(pool, namespace, token)
	if !ok {
		return false
	}
	until, held := t.short.Load(limitKey{normPool(pool), namespace, form})
	return held && t.now().UnixNano() < until.(int64)
}

// AllowJobs takes n published jobs from the token's WriteJobs bucket:
// false, taking nothing, when it holds fewer. It is true without such a
// limit. On a Redis error it returns false and the error (fails closed).
func (t *Throttler) AllowJobs(ctx context.Context, pool, namespace, token string, n int) (bool, error) {
	if !t.anyJobs.Load() {
		return true, nil
	}
	l, form, ok := t.cached(pool, namespace, token)
	if !ok || l.WriteJobs <= 0 || n <= 0 {
		return true, nil
	}
	res, err := t.runBucket(ctx, normPool(pool), namespace, jobsBucketKey(normPool(pool), namespace, form), l.WriteJobs, l.Interval, n)
	if err != nil || res == 1 {
		return err == nil, err
	}
	if n == 1 {
		// Short of a single job for -res ms: remember it (JobsShort).
		wait := min(time.Duration(-res)*time.Millisecond, maxJobsHold)
		t.short.Store(limitKey{normPool(pool), namespace, form}, t.now().Add(wait).UnixNano())
	}
	return false, nil
}

// ChargeJobs takes n published jobs from the token's WriteJobs bucket
// whatever it holds: the rest of a bulk publish admitted on its first job
// (AllowJobs(1)) before its body told how many it carries. The bucket may
// go into debt (below 0): the token's next publishes are refused, before
// their bodies are read, until it has refilled; over time the limit holds.
func (t *Throttler) ChargeJobs(ctx context.Context, pool, namespace, token string, n int) error {
	if !t.anyJobs.Load() {
		return nil
	}
	l, form, ok := t.cached(pool, namespace, token)
	if !ok || l.WriteJobs <= 0 || n <= 0 {
		return nil
	}
	_, err := t.runBucket(ctx, normPool(pool), namespace, jobsBucketKey(normPool(pool), namespace, form), l.WriteJobs, l.Interval, n, "1")
	return err
}

// UnlimitedJobs reports, without I/O, whether the token has no WriteJobs
// limit as far as this instance knows: AllowJobs and RefundJobs then do no
// I/O.
func (t *Throttler) UnlimitedJobs(pool, namespace, token string) bool {
	if !t.anyJobs.Load() {
		return true
	}
	l, _, ok := t.cached(pool, namespace, token)
	return !ok || l.WriteJobs <= 0
}

// RefundJobs gives back n jobs taken by AllowJobs (a publish that failed),
// never above the limit.
func (t *Throttler) RefundJobs(ctx context.Context, pool, namespace, token string, n int) error {
	if !t.anyJobs.Load() {
		return nil
	}
	l, form, ok := t.cached(pool, namespace, token)
	if !ok || l.WriteJobs <= 0 || n <= 0 {
		return nil
	}
	_, err := t.runBucket(ctx, normPool(pool), namespace, jobsBucketKey(normPool(pool), namespace, form), l.WriteJobs, l.Interval, -n)
	return err
}

// Unlimited reports, without I/O, whether the token has no limit in that
// direction as far as this instance knows: Allow then admits it and Refund
// does nothing, neither with a round trip to Redis.
func (t *Throttler) Unlimited(pool, namespace, token string, write bool) bool {
	l, _, ok := t.cached(pool, namespace, token)
	return !ok || l.perInterval(write) <= 0
}

// Refund gives back one request taken by Allow (a consume that found no
// job, a publish that failed), never above the limit.
func (t *Throttler) Refund(ctx context.Context, pool, namespace, token string, write bool) error {
	l, form, ok := t.cached(pool, namespace, token)
	if !ok || l.perInterval(write) <= 0 {
		return nil
	}
	_, err := t.runBucket(ctx, normPool(pool), namespace, bucketKey(normPool(pool), namespace, form, write), l.perInterval(write), l.Interval, -1)
	return err
}

// runBucket runs the bucket script of one request on bucket key, kept
// under capacity per interval seconds, taking cost (giving back -cost when
// negative); retried on a cluster while it did not run
// (ThrottlerOptions.ClusterRetry), and also when its connection broke
// mid-command (redisretry.Lost: a master killed with the script sent):
// run twice, it takes one more token from the bucket, the request counted
// twice against its rate once, which is better than refusing a request
// of a healthy namespace with 503 because its bucket's master failed over.
func (t *Throttler) runBucket(ctx context.Context, pool, namespace, key string, capacity, interval int64, cost int, force ...string) (int, error) {
	var res int
	err := t.retry.do(ctx, func(err error) bool {
		return redisretry.Refused(err) || redisretry.Unsent(err) || redisretry.Lost(err)
	}, func() (err error) {
		args := []any{capacity, interval * 1000, t.now().UnixMilli(), cost}
		for _, f := range force {
			args = append(args, f)
		}
		res, err = bucketScript.Run(ctx, t.client, []string{key}, args...).Int()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("auth: throttle %s/%s: %w", pool, namespace, err)
	}
	return res, nil
}

// Get returns the token's limit as stored in Redis (the admin view, fresh
// even before the next reload) and refreshes the local cache with it. The
// token may be a fingerprint (see IsFingerprint).
func (t *Throttler) Get(ctx context.Context, pool, namespace, token string) (Limit, bool, error) {
	pool = normPool(pool)
	forms, found, err := t.resolve(ctx, pool, namespace, token)
	if err != nil || !found {
		return Limit{}, false, err
	}
	fields := make([]string, 0, 2)
	for _, f := range forms.all() {
		fields = append(fields, limitField(pool, namespace, f))
	}
	vals, err := t.client.HMGet(ctx, throttlerKey, fields...).Result()
	if err != nil {
		return Limit{}, false, fmt.Errorf("auth: get limit of %s/%s: %w", pool, namespace, err)
	}
	for i, v := range vals { // the hashed form first
		form := forms.all()[i]
		raw, ok := v.(string)
		if !ok {
			t.setCached(limitKey{pool, namespace, form}, Limit{}, false)
			continue
		}
		var l Limit
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			return Limit{}, false, fmt.Errorf("auth: decode limit of %s/%s: %w", pool, namespace, err)
		}
		t.setCached(limitKey{pool, namespace, form}, l, true)
		return l, true, nil
	}
	return Limit{}, false, nil
}

// prepareLimit validates and encodes l and resolves the token (or its
// fingerprint) to the form a write stores (target) and the other form a
// limit may already be stored in (other, "" when none), for Add and Set.
func (t *Throttler) prepareLimit(ctx context.Context, pool, namespace, token string, l Limit) (normPoolName, target, other string, b []byte, err error) {
	if err := l.Validate(); err != nil {
		return "", "", "", nil, err
	}
	pool = normPool(pool)
	forms, err := t.resolveExisting(ctx, pool, namespace, token)
	if err != nil {
		return "", "", "", nil, err
	}
	if b, err = json.Marshal(l); err != nil {
		return "", "", "", nil, fmt.Errorf("auth: encode limit: %w", err)
	}
	target, other = forms.write(t.hash)
	return pool, target, other, b, nil
}

// Add sets the token's limit unless one exists (ErrLimitExists). The token
// itself is not checked, as in lmstfy; it may be a fingerprint of an
// existing token. Errors: ErrInvalidLimit, ErrLimitExists,
// ErrUnknownFingerprint, ErrAmbiguousFingerprint.
func (t *Throttler) Add(ctx context.Context, pool, namespace, token string, l Limit) error {
	pool, target, other, b, err := t.prepareLimit(ctx, pool, namespace, token, l)
	if err != nil {
		return err
	}
	if other == "" {
		other = target
	}
	ok, err := addLimitScript.Run(ctx, t.client, []string{throttlerKey},
		limitField(pool, namespace, target), limitField(pool, namespace, other), b).Int()
	if err != nil {
		return fmt.Errorf("auth: add limit of %s/%s: %w", pool, namespace, err)
	}
	if ok == 0 {
		return ErrLimitExists
	}
	t.setCached(limitKey{pool, namespace, target}, l, true)
	// The buckets may still say "no limit" after a recent Delete. (Not a
	// MULTI: the two buckets are in two Redis Cluster slots.)
	if _, err := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		t.retune(ctx, p, pool, namespace, target, l)
		return nil
	}); err != nil {
		return fmt.Errorf("auth: add limit of %s/%s: %w", pool, namespace, err)
	}
	return nil
}

// retune queues, on p, the writing of limit l (Limit{} for none) into the
// token's buckets (both directions, and the jobs'), pinned for t.pin: every instance
// judges the token's next request by l, even one that has not reloaded
// yet (see retuneScript).
func (t *Throttler) retune(ctx context.Context, p redis.Pipeliner, pool, namespace, token string, l Limit) {
	now := t.now().UnixMilli()
	for _, write := range []bool{false, true} {
		// Eval, not Run: a pipeline cannot fall back from EVALSHA.
		retuneScript.Eval(ctx, p, []string{bucketKey(pool, namespace, token, write)},
			max(l.perInterval(write), 0), l.Interval*1000, now, t.pin.Milliseconds())
	}
	retuneScript.Eval(ctx, p, []string{jobsBucketKey(pool, namespace, token)},
		max(l.WriteJobs, 0), l.Interval*1000, now, t.pin.Milliseconds())
}

// Set creates or replaces the token's limit (stored in the form HashTokens
// asks for; a limit stored in the other form moves). The next request of
// the token, on any instance, is judged by the new limit, as in lmstfy: the
// requests already made in the interval count against it, so a raised
// limit admits at once and a lowered one refuses once it is used up. The
// token may be a fingerprint of an existing token. Errors: ErrInvalidLimit,
// ErrUnknownFingerprint, ErrAmbiguousFingerprint.
func (t *Throttler) Set(ctx context.Context, pool, namespace, token string, l Limit) error {
	pool, target, other, b, err := t.prepareLimit(ctx, pool, namespace, token, l)
	if err != nil {
		return err
	}
	// One pipeline, not a MULTI: the limits hash and the buckets are in
	// several Redis Cluster slots. Each write stands alone (a request in
	// between is judged as before the change), and Set may be repeated.
	_, err = t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, throttlerKey, limitField(pool, namespace, target), b)
		t.retune(ctx, p, pool, namespace, target, l)
		if other != "" {
			// The limit moves between forms (HashTokens was switched):
			// the secret leaves Redis at once, and instances that have not
			// reloaded yet judge by the old limit, on a fresh bucket, for
			// at most Refresh.
			p.HDel(ctx, throttlerKey, limitField(pool, namespace, other))
			p.Del(ctx, bucketKey(pool, namespace, other, false))
			p.Del(ctx, bucketKey(pool, namespace, other, true))
			p.Del(ctx, jobsBucketKey(pool, namespace, other))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("auth: set limit of %s/%s: %w", pool, namespace, err)
	}
	t.setCached(limitKey{pool, namespace, target}, l, true)
	if other != "" {
		t.setCached(limitKey{pool, namespace, other}, Limit{}, false)
	}
	return nil
}

// resolveExisting is resolve for routes that write: an unknown fingerprint
// is an error.
func (t *Throttler) resolveExisting(ctx context.Context, pool, namespace, token string) (tokenForms, error) {
	forms, found, err := t.resolve(ctx, pool, namespace, token)
	if err != nil {
		return tokenForms{}, err
	}
	if !found {
		return tokenForms{}, ErrUnknownFingerprint
	}
	return forms, nil
}

// Delete removes the token's limit, in either form, and marks the buckets
// of the form it was stored in so that every instance lets the token's
// next requests through, even one that has not reloaded yet (the marks
// expire after two reload periods, at least 2 s). The token may be a fingerprint. A token without
// a limit is not an error.
func (t *Throttler) Delete(ctx context.Context, pool, namespace, token string) error {
	pool = normPool(pool)
	forms, found, err := t.resolve(ctx, pool, namespace, token)
	if err != nil || !found {
		return err
	}
	deleted := make([]*redis.IntCmd, 0, 2)
	_, err = txPipelined(ctx, t.client, func(p redis.Pipeliner) error {
		for _, f := range forms.all() {
			deleted = append(deleted, p.HDel(ctx, throttlerKey, limitField(pool, namespace, f)))
		}
		return nil
	})
	for _, f := range forms.all() {
		t.setCached(limitKey{pool, namespace, f}, Limit{}, false)
	}
	if err != nil {
		return fmt.Errorf("auth: delete limit of %s/%s: %w", pool, namespace, err)
	}
	// Only a form that held a limit can be in another instance's cache
	// (and only then may its bucket name hold the secret). The buckets
	// are in several Redis Cluster slots: a pipeline, not a MULTI.
	_, err = t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, f := range forms.all() {
			if deleted[i].Val() > 0 {
				t.retune(ctx, p, pool, namespace, f, Limit{})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("auth: delete limit of %s/%s: %w", pool, namespace, err)
	}
	return nil
}

// List returns every limit from the cache, sorted by namespace then token;
// forceUpdate reloads from Redis first. Limits stored under a hashed form,
// and with HashTokens every limit, show the token's Fingerprint.
func (t *Throttler) List(ctx context.Context, forceUpdate bool) ([]LimitEntry, error) {
	if forceUpdate {
		if err := t.Reload(ctx); err != nil {
			return nil, err
		}
	}
	t.mu.RLock()
	out := make([]LimitEntry, 0, len(t.limits))
	for k, l := range t.limits {
		out = append(out, LimitEntry{Namespace: k.namespace, Token: FormatToken(k.pool, displayToken(k.token, t.hash)), Limiter: l})
	}
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b LimitEntry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Token, b.Token))
	})
	return out, nil
}
