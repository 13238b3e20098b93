package auth

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// testPools are the pools every test Store is configured with.
var testPools = []string{DefaultPool, "b"}

// TestMain stops the Redis Cluster the tests share (redistest.SharedCluster).
func TestMain(m *testing.M) { redistest.Main(m) }

// forEachRedis runs fn once on miniredis, once on a real redis-server,
// each a fresh, empty instance, and once on the test binary's shared
// 6-node Redis Cluster (flushed first), where every script, MULTI and
// multi-key command must touch a single slot. Top-level tests run one at a
// time, so that the cluster subtests of two tests never share the cluster.
func forEachRedis(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		fn(t, newMiniredisClient(t))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, redistest.Start(t).Client())
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.SharedCluster(t)
		c.Flush(t)
		fn(t, c.Client(t))
	})
}

func newMiniredisClient(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestStore(tb testing.TB, c redis.UniversalClient, clock *fakeClock) *Store {
	tb.Helper()
	opts := StoreOptions{}
	if clock != nil {
		opts.Now = clock.Now
	}
	return NewStore(c, testPools, quietLogger(), opts)
}

// seedToken writes a token the way lmstfy (or another instance) does.
func seedToken(tb testing.TB, c redis.UniversalClient, pool, ns, token, desc string) {
	tb.Helper()
	if err := c.HSet(context.Background(), tokenKey(pool, ns), token, desc).Err(); err != nil {
		tb.Fatalf("seed token: %v", err)
	}
}

// getTokenDesc reads a token's description straight from Redis.
func getTokenDesc(tb testing.TB, c redis.UniversalClient, pool, ns, token string) (string, bool) {
	tb.Helper()
	v, err := c.HGet(context.Background(), tokenKey(pool, ns), token).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		tb.Fatalf("get token: %v", err)
	}
	return v, true
}

func mustCreate(tb testing.TB, s *Store, pool, ns, desc, token string, scope Scope) string {
	tb.Helper()
	tok, err := s.Create(context.Background(), pool, ns, desc, token, scope)
	if err != nil {
		tb.Fatalf("Create(%q, %q, %q): %v", pool, ns, token, err)
	}
	return tok
}
