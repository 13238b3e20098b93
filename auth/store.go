package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine"
)

// Defaults of StoreOptions.
const (
	DefaultCacheTTL        = 500 * time.Millisecond
	DefaultMaxCacheEntries = 1 << 16
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
	// DefaultMaxCacheEntries. When full, expired entries are dropped, and
	// if that is not enough the cache starts over.
	MaxCacheEntries int
}

// Store keeps tokens in the admin Redis, lmstfy-compatible: hash
// `tk/{pool}/{ns}` token → description (exactly lmstfy's key and layout, so
// existing lmstfy tokens keep working), plus hash `tks/{pool}/{ns}` token →
// JSON Scope for scoped tokens only. It is safe for concurrent use.
type Store struct {
	client   redis.UniversalClient
	pools    []string
	logger   logrus.FieldLogger
	ttl      time.Duration
	now      func() time.Time
	maxCache int

	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
	// gen counts Deletes; a Verify that raced with one does not cache its
	// (possibly stale) answer.
	gen uint64
}

type cacheKey struct{ pool, namespace, token string }

type cacheEntry struct {
	scope   Scope
	ok      bool
	expires time.Time
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
	return &Store{
		client:   client,
		pools:    slices.Clone(pools),
		logger:   logger.WithField("component", "auth"),
		ttl:      opts.CacheTTL,
		now:      opts.Now,
		maxCache: opts.MaxCacheEntries,
		cache:    make(map[cacheKey]cacheEntry),
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
// for non-default pools, "secret" for the default pool. A non-zero scope
// restricts the token; it is stored atomically with the token.
//
// Errors: ErrTokenTooShort, ErrNamespaceTooLong, ErrInvalidNamespace,
// ErrPoolNotFound, ErrInvalidScope, ErrTokenExists.
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
	created, err := createTokenScript.Run(ctx, s.client,
		[]string{tokenKey(pool, namespace), scopeKey(pool, namespace)},
		token, description, scopeJSON).Int()
	if err != nil {
		return "", fmt.Errorf("auth: create token in %s/%s: %w", pool, namespace, err)
	}
	if created == 0 {
		return "", ErrTokenExists
	}
	k := cacheKey{pool, namespace, token}
	_, _, gen := s.lookup(k)
	s.storeIfCurrent(k, cacheEntry{scope: scope, ok: true}, gen)
	return FormatToken(pool, token), nil
}

// List returns token → description for namespace in pool. With prefixPool
// the keys are "pool:token" (lmstfy does that whenever the admin API's
// `pool` query parameter is non-empty, even "default").
func (s *Store) List(ctx context.Context, pool, namespace string, prefixPool bool) (map[string]string, error) {
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return nil, ErrPoolNotFound
	}
	all, err := s.client.HGetAll(ctx, tokenKey(pool, namespace)).Result()
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens of %s/%s: %w", pool, namespace, err)
	}
	if !prefixPool {
		return all, nil
	}
	out := make(map[string]string, len(all))
	for tok, desc := range all {
		out[pool+":"+tok] = desc
	}
	return out, nil
}

// Delete removes a token and its scope. token may be "pool:secret"; its
// prefix wins over pool. An unknown token is not an error. This instance's
// cache forgets the token at once; other instances refuse it once their
// cached answer expires (CacheTTL).
func (s *Store) Delete(ctx context.Context, pool, namespace, token string) error {
	if p, secret, ok := cutToken(token); ok {
		pool, token = p, secret
	}
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return ErrPoolNotFound
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, tokenKey(pool, namespace), token)
		p.HDel(ctx, scopeKey(pool, namespace), token)
		return nil
	})
	s.forget(cacheKey{pool, namespace, token})
	if err != nil {
		return fmt.Errorf("auth: delete token of %s/%s: %w", pool, namespace, err)
	}
	return nil
}

// Verify checks token (the secret, without "pool:") for namespace in pool
// and returns its scope: ErrPoolNotFound for an unknown pool,
// ErrInvalidToken when the token does not exist. Answers, positive and
// negative, are cached for CacheTTL; Redis errors are not cached.
func (s *Store) Verify(ctx context.Context, pool, namespace, token string) (Scope, error) {
	pool = normPool(pool)
	if !s.HasPool(pool) {
		return Scope{}, ErrPoolNotFound
	}
	if token == "" || namespace == "" {
		return Scope{}, ErrInvalidToken
	}
	key := cacheKey{pool, namespace, token}
	e, ok, gen := s.lookup(key)
	if ok {
		if !e.ok {
			return Scope{}, ErrInvalidToken
		}
		return e.scope, nil
	}
	var exists *redis.BoolCmd
	var scopeCmd *redis.StringCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.HExists(ctx, tokenKey(pool, namespace), token)
		scopeCmd = p.HGet(ctx, scopeKey(pool, namespace), token)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Scope{}, fmt.Errorf("auth: verify token of %s/%s: %w", pool, namespace, err)
	}
	if err := exists.Err(); err != nil {
		return Scope{}, fmt.Errorf("auth: verify token of %s/%s: %w", pool, namespace, err)
	}
	if !exists.Val() {
		s.storeIfCurrent(key, cacheEntry{}, gen)
		return Scope{}, ErrInvalidToken
	}
	var scope Scope
	raw, err := scopeCmd.Result()
	switch {
	case err == nil:
		if err := json.Unmarshal([]byte(raw), &scope); err != nil {
			// Fail closed: a scope we cannot read must not become "everything".
			return Scope{}, fmt.Errorf("auth: decode scope of a token of %s/%s: %w", pool, namespace, err)
		}
	case !errors.Is(err, redis.Nil):
		return Scope{}, fmt.Errorf("auth: read scope of a token of %s/%s: %w", pool, namespace, err)
	}
	s.storeIfCurrent(key, cacheEntry{scope: scope, ok: true}, gen)
	return scope, nil
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
// storeIfCurrent.
func (s *Store) lookup(k cacheKey) (cacheEntry, bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[k]
	if !ok {
		return cacheEntry{}, false, s.gen
	}
	if !s.now().Before(e.expires) {
		delete(s.cache, k)
		return cacheEntry{}, false, s.gen
	}
	return e, true, s.gen
}

// storeIfCurrent caches e unless a Delete happened since gen was read.
func (s *Store) storeIfCurrent(k cacheKey, e cacheEntry, gen uint64) {
	if s.ttl < 0 {
		return
	}
	now := s.now()
	e.expires = now.Add(s.ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	if _, ok := s.cache[k]; !ok && len(s.cache) >= s.maxCache {
		for ck, ce := range s.cache {
			if !now.Before(ce.expires) {
				delete(s.cache, ck)
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
