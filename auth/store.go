package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/redisretry"
)

// Defaults and bounds of StoreOptions.
const (
	DefaultCacheTTL        = 500 * time.Millisecond
	DefaultMaxCacheEntries = 1 << 16
	// DefaultClusterRetry is how long a check that a cluster admin Redis
	// refuses or cannot answer (a failover) is retried: engine/rdb's
	// default for job operations.
	DefaultClusterRetry = 5 * time.Second
	// MaxGrace bounds StoreOptions.Grace: a token is never accepted on an
	// old answer for longer.
	MaxGrace = time.Minute
)

// StoreOptions tune a Store. The zero value gives the defaults.
type StoreOptions struct {
	// CacheTTL is how long a Verify answer (positive or negative) is cached
	// in-process; default DefaultCacheTTL, so a revoked token is refused by
	// every instance within 1 s. A negative value disables the cache.
	CacheTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// MaxCacheEntries bounds the verification cache (requests with random
	// tokens must not grow it without limit); default
	// DefaultMaxCacheEntries. When full, expired entries are dropped, then
	// the negative ones (unknown tokens), and if that is not enough the
	// cache starts over.
	MaxCacheEntries int
	// HashTokens stores new tokens hashed (see HashToken) instead of in
	// clear, and makes List show fingerprints. Verify accepts both forms
	// whatever this setting, so that switching it (on one instance after
	// another) keeps every token working.
	HashTokens bool
	// Grace is how long after its last successful verification a token is
	// still accepted while the admin Redis cannot say (an error of a
	// failover: redisretry.Failover, such as a refused connection,
	// CLUSTERDOWN or a timeout), with the scope it had then. Never when
	// Redis answers that the token does not exist, and never for a token
	// this instance deleted. 0 (the default) is off; at most MaxGrace.
	Grace time.Duration
	// ClusterRetry bounds, on a Redis Cluster, how long a verification that
	// fails as a failover does (redisretry.Failover) is sent again when no
	// Grace answer stands in: default DefaultClusterRetry; negative: no
	// retry beyond go-redis's own.
	ClusterRetry time.Duration
}

// Store keeps tokens in the admin Redis, lmstfy-compatible: hash
// `tk/{pool}/{ns}` token → description (exactly lmstfy's key and layout, so
// existing lmstfy tokens keep working), plus hash `tks/{tk/{pool}/{ns}}`
// token → JSON Scope for scoped tokens only, in the token hash's Redis
// Cluster slot (see scopeKey and legacyScopeKey for the earlier layout).
// With StoreOptions.HashTokens the token's hashed form takes the token's
// place in these hashes. It is safe for concurrent use.
type Store struct {
	client   redis.UniversalClient
	pools    []string
	logger   logrus.FieldLogger
	ttl      time.Duration
	now      func() time.Time
	maxCache int
	hash     bool
	// cluster: the admin Redis is a Redis Cluster, where the legacy scope
	// hash is in another slot (and no earlier server ran).
	cluster bool
	grace   time.Duration
	retry   retrier
	// graceLogged is when a grace answer was last logged (Unix ns), so
	// that a failover logs about one line a second, not one per request.
	graceLogged atomic.Int64

	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
	// gen counts Deletes; a Verify that raced with one does not cache its
	// (possibly stale) answer.
	gen uint64
	// refreshing holds the keys whose cached acceptance VerifyCached is
	// renewing in the background (refreshAhead), one read at a time.
	refreshing map[cacheKey]bool
}

// cacheKey identifies a token by its hashed form, so that the cache holds
// no secret and answers for both stored forms.
type cacheKey struct{ pool, namespace, hashed string }

type cacheEntry struct {
	scope   Scope
	ok      bool
	expires time.Time
	// graceUntil, for a positive answer with StoreOptions.Grace, is until
	// when it still stands in for Redis once expired, should Redis fail to
	// answer (see graced); the entry is kept until then.
	graceUntil time.Time
}

// NewStore returns a Store over the admin Redis client for the configured
// pools. It starts nothing. A nil logger discards logs.
func NewStore(client redis.UniversalClient, pools []string, logger logrus.FieldLogger, opts StoreOptions) *Store {
	if logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		logger = l
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxCacheEntries <= 0 {
		opts.MaxCacheEntries = DefaultMaxCacheEntries
	}
	opts.Grace = min(max(opts.Grace, 0), MaxGrace)
	return &Store{
		client:   client,
		pools:    slices.Clone(pools),
		logger:   logger.WithField("component", "auth"),
		ttl:      opts.CacheTTL,
		now:      opts.Now,
		maxCache: opts.MaxCacheEntries,
		hash:     opts.HashTokens,
		cluster:  isCluster(client),
		grace:    opts.Grace,
		retry:    newRetrier(client, opts.ClusterRetry),
		cache:    make(map[cacheKey]cacheEntry),

		refreshing: make(map[cacheKey]bool),
	}
}

// HasPool reports whether pool is configured ("" means DefaultPool).
func (s *Store) HasPool(pool string) bool {
	return slices.Contains(s.pools, normPool(pool))
}

// ValidateNamespace checks a namespace name as lmstfy's admin API does:
// ErrNamespaceTooLong beyond engine.MaxNameLength, ErrInvalidNamespace for
// an empty name or one with characters outside [-_A-Za-z0-9].
func ValidateNamespace(namespace string) error {
	if len(namespace) > engine.MaxNameLength {
		return ErrNamespaceTooLong
	}
	if !engine.ValidName(namespace) {
		return ErrInvalidNamespace
	}
	return nil
}

// Create makes a token for namespace in pool. token "" makes a fresh ULID;
// a user token must be at least MinUserTokenLength characters and may itself
// be "pool:secret", whose prefix then names the pool (it wins over pool, as
// in lmstfy). It returns the token as clients must send it: "pool:secret"
// for non-default pools, "secret" for the default pool (with HashTokens,
// the only time the secret is shown). A non-zero scope restricts the token;
// it is stored atomically with the token.
//
// Errors: ErrTokenTooShort, ErrReservedToken, ErrNamespaceTooLong,
// ErrInvalidNamespace, ErrPoolNotFound, ErrInvalidScope, ErrTokenExists.
func (s *Store) Create(ctx context.Context, pool, namespace, description, token string, scope Scope) (string, error) {
	if token != "" {
		if len(token) < MinUserTokenLength {
			return "", ErrTokenTooShort
		}
		if p, secret, ok := cutToken(token); ok {
			pool, token = p, secret
			if token == "" {
				return "", ErrTokenTooShort
			}
		}
		if reservedToken(token) {
			return "", ErrReservedToken
		}
	}
	if err := ValidateNamespace(namespace); err != nil {
		return "", err
	}
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return "", ErrPoolNotFound
	}
	if err := scope.Validate(); err != nil {
		return "", err
	}
	if token == "" {
		token = ulid.Make().String()
	}
	scopeJSON := ""
	if !scope.IsZero() {
		b, err := json.Marshal(scope)
		if err != nil {
			return "", fmt.Errorf("auth: encode scope: %w", err)
		}
		scopeJSON = string(b)
	}
	hashed := HashToken(token)
	field, other := token, hashed
	if s.hash {
		field, other = hashed, token
	}
	keys := []string{tokenKey(pool, namespace), scopeKey(pool, namespace)}
	if !s.cluster {
		keys = append(keys, legacyScopeKey(pool, namespace))
	} else if err := s.foldOnce(ctx, pool, namespace); err != nil {
		return "", fmt.Errorf("auth: create token in %s/%s: %w", pool, namespace, err)
	}
	created, err := createTokenScript.Run(ctx, s.client, keys, field, description, scopeJSON, other).Int()
	if err != nil {
		return "", fmt.Errorf("auth: create token in %s/%s: %w", pool, namespace, err)
	}
	if created == 0 {
		return "", ErrTokenExists
	}
	k := cacheKey{pool, namespace, hashed}
	_, _, gen := s.lookup(k)
	s.storeIfCurrent(k, cacheEntry{scope: scope, ok: true}, gen)
	return FormatToken(pool, token), nil
}

// List returns token → description for namespace in pool. With prefixPool
// the keys are "pool:token" (lmstfy does that whenever the admin API's
// `pool` query parameter is non-empty, even "default"). Tokens stored
// hashed, and with HashTokens every token, are listed by their Fingerprint.
func (s *Store) List(ctx context.Context, pool, namespace string, prefixPool bool) (map[string]string, error) {
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return nil, ErrPoolNotFound
	}
	all, err := s.client.HGetAll(ctx, tokenKey(pool, namespace)).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens of %s/%s: %w", pool, namespace, err)
	}
	out := make(map[string]string, len(all))
	for field, desc := range all {
		tok := displayToken(field, s.hash)
		if prefixPool {
			tok = pool + ":" + tok
		}
		out[tok] = desc
	}
	return out, nil
}

// Scopes returns the scope of every scoped token of namespace in pool,
// keyed as List shows the token (unprefixed): a token absent from the map
// may do everything in the namespace. As Verify, a scope in the current
// hash wins over one an earlier version kept (legacyScopeKey). A scope
// that cannot be decoded is an error (Verify refuses its token).
func (s *Store) Scopes(ctx context.Context, pool, namespace string) (map[string]Scope, error) {
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return nil, ErrPoolNotFound
	}
	cur, err := s.client.HGetAll(ctx, scopeKey(pool, namespace)).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list scopes of %s/%s: %w", pool, namespace, err)
	}
	// The legacy hash is another slot on a cluster: read on its own.
	legacy, err := s.client.HGetAll(ctx, legacyScopeKey(pool, namespace)).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list scopes of %s/%s: %w", pool, namespace, err)
	}
	out := make(map[string]Scope, len(cur)+len(legacy))
	for _, hash := range []map[string]string{legacy, cur} { // current last: it wins
		for field, raw := range hash {
			var sc Scope
			if err := json.Unmarshal([]byte(raw), &sc); err != nil {
				return nil, fmt.Errorf("auth: decode scope of a token of %s/%s: %w", pool, namespace, err)
			}
			out[displayToken(field, s.hash)] = sc
		}
	}
	return out, nil
}

// Delete removes a token and its scope, in whichever form it is stored.
// token may be "pool:secret"; its prefix wins over pool. It may also be a
// fingerprint (see IsFingerprint), as List shows: ErrAmbiguousFingerprint
// when it matches several tokens. An unknown token is not an error. This
// instance's cache forgets the token at once; other instances refuse it
// once their cached answer expires (CacheTTL).
func (s *Store) Delete(ctx context.Context, pool, namespace, token string) error {
	if p, secret, ok := cutToken(token); ok {
		pool, token = p, secret
	}
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return ErrPoolNotFound
	}
	fields := []string{token, HashToken(token)}
	if IsFingerprint(token) {
		all, err := s.client.HKeys(ctx, tokenKey(pool, namespace)).Result()
		if err != nil {
			return fmt.Errorf("auth: delete token of %s/%s: %w", pool, namespace, err)
		}
		if fields, err = resolveFingerprint(all, token); err != nil {
			return err
		}
		if len(fields) == 0 {
			return nil
		}
	}
	_, err := txPipelined(ctx, s.client, func(p redis.Pipeliner) error {
		p.HDel(ctx, tokenKey(pool, namespace), fields...)
		p.HDel(ctx, scopeKey(pool, namespace), fields...)
		return nil
	})
	if err == nil {
		// The token is gone; its scope in the legacy hash (another slot
		// on a cluster) goes next. Were this to fail, the scope left
		// behind would only restrict a token re-created under the same
		// secret.
		err = s.client.HDel(ctx, legacyScopeKey(pool, namespace), fields...).Err()
	}
	for _, f := range fields {
		s.forget(cacheKey{pool, namespace, hashedFormOf(f)})
	}
	if err != nil {
		return fmt.Errorf("auth: delete token of %s/%s: %w", pool, namespace, err)
	}
	return nil
}

// resolveFingerprint returns the stored fields (one token, in one or both
// forms) that fp names among fields: none when it names no token,
// ErrAmbiguousFingerprint when it names several.
func resolveFingerprint(fields []string, fp string) ([]string, error) {
	matches := matchFingerprint(fields, fp)
	for _, m := range matches[min(1, len(matches)):] {
		if hashedFormOf(m) != hashedFormOf(matches[0]) {
			return nil, ErrAmbiguousFingerprint
		}
	}
	return matches, nil
}

// Verify checks token (the secret, without "pool:") for namespace in pool
// and returns its scope: ErrPoolNotFound for an unknown pool,
// ErrInvalidToken when the token does not exist. The token may be stored
// hashed or in clear, whatever HashTokens says; a token starting with
// HashedPrefix is always refused, so that a stored hashed form is never
// accepted as a token. No secret is compared in process: the token is
// hashed and the hash looked up (in the cache, and in Redis with the
// secret). Answers, positive and negative, are cached for CacheTTL; Redis
// errors are not cached.
//
// The answer depends on keys of one Redis Cluster slot, the token hash's
// (once a namespace's legacy scopes are folded, see foldedKey). When the
// admin Redis fails as in a failover, a token verified within Grace gets
// its last answer; without one, a cluster admin Redis is asked again
// within ClusterRetry.
func (s *Store) Verify(ctx context.Context, pool, namespace, token string) (Scope, error) {
	pool = normPool(pool)
	key, gen, scope, err := s.verifyLocal(pool, namespace, token)
	if !errors.Is(err, ErrNotCached) {
		return scope, err
	}
	err = s.retry.do(ctx, func(err error) bool {
		if !redisretry.Failover(err) {
			return false
		}
		_, graced := s.graced(key)
		return !graced
	}, func() error {
		scope, err = s.read(ctx, pool, namespace, token, key.hashed)
		return err
	})
	switch {
	case err == nil:
		s.storeIfCurrent(key, cacheEntry{scope: scope, ok: true}, gen)
		return scope, nil
	case errors.Is(err, ErrInvalidToken):
		s.storeIfCurrent(key, cacheEntry{}, gen)
		return Scope{}, ErrInvalidToken
	case redisretry.Failover(err):
		if scope, ok := s.graced(key); ok {
			s.logGrace(pool, namespace, err)
			return scope, nil
		}
	}
	return Scope{}, fmt.Errorf("auth: verify token of %s/%s: %w", pool, namespace, err)
}

// read asks the admin Redis for a token's scope: ErrInvalidToken when the
// token does not exist, a Redis error as it came.
func (s *Store) read(ctx context.Context, pool, namespace, token, hashed string) (Scope, error) {
	var descs, scopes, legacy *redis.SliceCmd
	var folded *redis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		descs = p.HMGet(ctx, tokenKey(pool, namespace), hashed, token)
		scopes = p.HMGet(ctx, scopeKey(pool, namespace), hashed, token)
		if s.cluster {
			folded = p.Exists(ctx, foldedKey(pool, namespace))
		} else {
			legacy = p.HMGet(ctx, legacyScopeKey(pool, namespace), hashed, token)
		}
		return nil
	})
	if err != nil {
		return Scope{}, err
	}
	// The hashed form wins should both exist (Create never makes both).
	form := -1
	for i, v := range descs.Val() {
		if v != nil {
			form = i
			break
		}
	}
	if form < 0 || len(scopes.Val()) <= form || legacy != nil && len(legacy.Val()) <= form {
		return Scope{}, ErrInvalidToken
	}
	// A scope in the current hash wins; one only in the legacy hash is a
	// token's scope all the same (made by an earlier version).
	raw := scopes.Val()[form]
	switch {
	case raw != nil:
	case legacy != nil:
		raw = legacy.Val()[form]
	case folded.Val() == 0:
		field := hashed
		if form == 1 {
			field = token
		}
		if raw, err = s.fold(ctx, pool, namespace, field); err != nil {
			return Scope{}, err
		}
	}
	var scope Scope
	switch raw := raw.(type) {
	case nil:
	case string:
		if err := json.Unmarshal([]byte(raw), &scope); err != nil {
			// Fail closed: a scope we cannot read must not become "everything".
			return Scope{}, fmt.Errorf("auth: decode scope of a token of %s/%s: %w", pool, namespace, err)
		}
	default:
		return Scope{}, fmt.Errorf("auth: read scope of a token of %s/%s: unexpected %T", pool, namespace, raw)
	}
	return scope, nil
}

// fold copies, on a Redis Cluster, the namespace's legacy scopes (another
// slot) into its scope hash, where a scope already there wins, and marks
// the namespace folded (foldedKey), after which Verify reads the token's
// slot only. It returns the legacy scope of field (nil when none). A fold
// that cannot be written is logged and tried again by the next Verify;
// the answer stands. A fold racing with a Delete may copy the deleted
// token's scope back: it would only restrict a token re-created under the
// same secret, and Create overwrites it anyway.
func (s *Store) fold(ctx context.Context, pool, namespace, field string) (interface{}, error) {
	var all map[string]string
	err := s.retry.do(ctx, redisretry.Failover, func() (err error) {
		all, err = s.client.HGetAll(ctx, legacyScopeKey(pool, namespace)).Result()
		return err
	})
	if err != nil {
		return nil, err // unwrapped: Verify tells a failover by it
	}
	_, err = txPipelined(ctx, s.client, func(p redis.Pipeliner) error {
		for f, v := range all {
			p.HSetNX(ctx, scopeKey(pool, namespace), f, v)
		}
		p.Set(ctx, foldedKey(pool, namespace), "1", 0)
		return nil
	})
	if err != nil {
		s.logger.WithError(err).WithFields(logrus.Fields{"pool": pool, "namespace": namespace}).Warn("could not fold the legacy token scopes into the token hash's slot; trying again at the next verification")
	} else if len(all) > 0 {
		s.logger.WithFields(logrus.Fields{"pool": pool, "namespace": namespace, "scopes": len(all)}).Info("folded legacy token scopes into the token hash's slot")
	}
	if v, ok := all[field]; ok {
		return v, nil
	}
	return nil, nil
}

// foldOnce folds the namespace's legacy scopes (fold) unless that was
// done, so that the tokens Create makes on a cluster are verified from
// their slot alone from their first check on.
func (s *Store) foldOnce(ctx context.Context, pool, namespace string) error {
	n, err := s.client.Exists(ctx, foldedKey(pool, namespace)).Result()
	if err != nil || n > 0 {
		return err
	}
	_, err = s.fold(ctx, pool, namespace, "")
	return err
}

// logGrace logs, about once a second, that a token was accepted on its
// last answer because the admin Redis failed.
func (s *Store) logGrace(pool, namespace string, err error) {
	now := s.now().UnixNano()
	last := s.graceLogged.Load()
	if now-last < int64(time.Second) || !s.graceLogged.CompareAndSwap(last, now) {
		return
	}
	s.logger.WithError(err).WithFields(logrus.Fields{"pool": pool, "namespace": namespace, "grace": s.grace}).
		Warn("admin Redis failing over: accepting tokens verified within the grace period on their last answer")
}

// VerifyCached is Verify without I/O, for callers that must not wait (the
// server's event loops): it answers what Verify would answer when that
// needs no round trip (an unknown pool, an empty or reserved token, a
// cached answer), and ErrNotCached otherwise.
//
// A cached acceptance in the second half of its CacheTTL is renewed in the
// background (one admin Redis read per token at a time), so that a token
// in steady use never misses the cache on the loops: at each expiry every
// request that came meanwhile went off the loop to its own Verify (three
// HMGETs), twice a second for each busy token. The answer stays as fresh
// as CacheTTL says: a renewal reads Redis after the cached answer was
// read, and one that fails leaves the entry to expire as before.
func (s *Store) VerifyCached(pool, namespace, token string) (Scope, error) {
	pool = normPool(pool)
	key, _, scope, err := s.verifyLocal(pool, namespace, token)
	if err == nil {
		if gen, due := s.refreshDue(key); due {
			go s.refreshAhead(pool, namespace, token, key, gen)
		}
	}
	return scope, err
}

// refreshDue reports whether k's cached acceptance is in the second half
// of its CacheTTL with no renewal under way, and marks one under way
// (with the delete generation to store its answer under).
func (s *Store) refreshDue(k cacheKey) (uint64, bool) {
	if s.ttl <= 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[k]
	if !ok || !e.ok || s.refreshing[k] || s.now().Before(e.expires.Add(-s.ttl/2)) {
		return 0, false
	}
	s.refreshing[k] = true
	return s.gen, true
}

// refreshAhead reads k's answer from the admin Redis and caches it (an
// acceptance renewed, or the refusal of a token deleted meanwhile by
// another instance); an error caches nothing.
func (s *Store) refreshAhead(pool, namespace, token string, k cacheKey, gen uint64) {
	defer func() {
		s.mu.Lock()
		delete(s.refreshing, k)
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), max(s.ttl, time.Second))
	defer cancel()
	scope, err := s.read(ctx, pool, namespace, token, k.hashed)
	switch {
	case err == nil:
		s.storeIfCurrent(k, cacheEntry{scope: scope, ok: true}, gen)
	case errors.Is(err, ErrInvalidToken):
		s.storeIfCurrent(k, cacheEntry{}, gen)
	}
}

// verifyLocal is the part of Verify that needs no I/O: ErrNotCached when
// Redis must be asked, with the cache key and the delete generation to
// store the answer under.
func (s *Store) verifyLocal(pool, namespace, token string) (cacheKey, uint64, Scope, error) {
	if !s.HasPool(pool) {
		return cacheKey{}, 0, Scope{}, ErrPoolNotFound
	}
	if token == "" || namespace == "" || reservedToken(token) {
		return cacheKey{}, 0, Scope{}, ErrInvalidToken
	}
	key := cacheKey{pool, namespace, HashToken(token)}
	e, ok, gen := s.lookup(key)
	switch {
	case !ok:
		return key, gen, Scope{}, ErrNotCached
	case !e.ok:
		return key, gen, Scope{}, ErrInvalidToken
	}
	return key, gen, e.scope, nil
}

// cutToken splits "pool:secret"; ok is false without a colon.
func cutToken(raw string) (pool, secret string, ok bool) {
	for i := 0; i < len(raw); i++ {
		if raw[i] == ':' {
			return normPool(raw[:i]), raw[i+1:], true
		}
	}
	return "", raw, false
}

// lookup returns a live cache entry, and the delete generation to pass to
// storeIfCurrent. An expired entry is dropped, unless it is a positive
// answer still within its grace period (see graced).
func (s *Store) lookup(k cacheKey) (cacheEntry, bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[k]
	if !ok {
		return cacheEntry{}, false, s.gen
	}
	if now := s.now(); !now.Before(e.expires) {
		if !now.Before(e.graceUntil) {
			delete(s.cache, k)
		}
		return cacheEntry{}, false, s.gen
	}
	return e, true, s.gen
}

// graced returns the scope of the last positive answer for k when it is
// within its grace period (StoreOptions.Grace).
func (s *Store) graced(k cacheKey) (Scope, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[k]
	if !ok || !e.ok || !s.now().Before(e.graceUntil) {
		return Scope{}, false
	}
	return e.scope, true
}

// storeIfCurrent caches e unless a Delete happened since gen was read.
// A positive answer is kept for its grace period beyond CacheTTL.
func (s *Store) storeIfCurrent(k cacheKey, e cacheEntry, gen uint64) {
	if s.ttl < 0 && (s.grace <= 0 || !e.ok) {
		return
	}
	now := s.now()
	e.expires = now.Add(max(s.ttl, 0))
	if e.ok && s.grace > 0 {
		e.graceUntil = now.Add(s.grace)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	if _, ok := s.cache[k]; !ok && len(s.cache) >= s.maxCache {
		for ck, ce := range s.cache {
			if !now.Before(ce.expires) && !now.Before(ce.graceUntil) {
				delete(s.cache, ck)
			}
		}
		if len(s.cache) >= s.maxCache {
			// A flood of unknown tokens must not evict the known ones:
			// the negative answers go first, then the expired answers
			// kept only for their grace period.
			for ck, ce := range s.cache {
				if !ce.ok || !now.Before(ce.expires) {
					delete(s.cache, ck)
				}
			}
		}
		if len(s.cache) >= s.maxCache {
			s.logger.WithField("entries", len(s.cache)).Warn("token cache full of live entries; starting over")
			clear(s.cache)
		}
	}
	s.cache[k] = e
}

// forget drops a cache entry and makes in-flight Verify answers uncacheable.
func (s *Store) forget(k cacheKey) {
	s.mu.Lock()
	s.gen++
	delete(s.cache, k)
	s.mu.Unlock()
}
