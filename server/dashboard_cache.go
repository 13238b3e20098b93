package server

import (
	"context"
	"sync"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// The dashboard's caches of whole-namespace reads (doc/dashboard.md, "What
// a refresh costs"). A namespace's sizes (4 commands per queue) and its
// activity (a script per queue: paused, oldest ready, recent counts) are
// read for every queue at once, so that the table sorts over all of them
// and the overview finds the queues that need attention. Each read is kept
// for a time that grows with the number of queues read, so that however
// many queues, browsers and refreshes, a read costs the pool's Redis at
// most one queue per perQueue of wall time (after a floor for small
// namespaces): with 10,000 queues the sizes are read every 40 s, not at
// every 5-second refresh of every open tab.

// Cache lifetimes: the floor, and the time each queue of a read adds.
const (
	sizesCacheTTL       = 2 * time.Second
	sizesPerQueue       = 4 * time.Millisecond // ≤ 250 queues a second: ≤ 1,000 commands a second
	activityCacheTTL    = 2 * time.Second
	activityPerQueue    = 15 * time.Millisecond // ≤ 67 queue scripts (about 1,000 commands) a second
	nsCacheMaxNamespace = 1024                  // namespaces kept at most (per cache)
)

// nsCache keeps one read of every queue of a namespace per pool and
// namespace. Concurrent gets of one namespace wait for a single read.
type nsCache[T any] struct {
	floor, perQueue time.Duration
	now             func() time.Time // time.Now; tests move it

	mu sync.Mutex
	m  map[string]*nsEntry[T]
}

type nsEntry[T any] struct {
	mu   sync.Mutex // held while the namespace is read
	at   time.Time
	read bool
	val  []T
}

func newNSCache[T any](floor, perQueue time.Duration) *nsCache[T] {
	return &nsCache[T]{floor: floor, perQueue: perQueue, now: time.Now, m: make(map[string]*nsEntry[T])}
}

// ttl is how long a read of n queues is kept.
func (c *nsCache[T]) ttl(n int) time.Duration {
	return max(c.floor, time.Duration(n)*c.perQueue)
}

// get returns the namespace's read, at most max(ttl, atLeast) old (callers
// reading many namespaces in a row pass the ttl of their total), reading
// it with read when older, and when it was read.
func (c *nsCache[T]) get(ctx context.Context, pool, ns string, atLeast time.Duration, read func(context.Context) ([]T, error)) ([]T, time.Time, error) {
	k := pool + "\x00" + ns
	c.mu.Lock()
	en := c.m[k]
	if en == nil {
		if len(c.m) >= nsCacheMaxNamespace { // namespaces browsed: drop the stale ones
			now := c.now()
			for key, old := range c.m {
				if old.mu.TryLock() {
					if now.Sub(old.at) > max(c.ttl(len(old.val)), time.Minute) {
						delete(c.m, key)
					}
					old.mu.Unlock()
				}
			}
		}
		en = &nsEntry[T]{}
		c.m[k] = en
	}
	c.mu.Unlock()
	en.mu.Lock()
	defer en.mu.Unlock()
	if en.read && c.now().Sub(en.at) < max(c.ttl(len(en.val)), atLeast) {
		return en.val, en.at, nil
	}
	val, err := read(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	en.val, en.at, en.read = val, c.now(), true
	return val, en.at, nil
}

// namespaceSizes returns the sizes of every queue of ns (sorted by name)
// through the sizes cache, and when they were read.
func (s *Server) namespaceSizes(ctx context.Context, pool, ns string, d engine.Dashboard, atLeast time.Duration) ([]engine.QueueStats, time.Time, error) {
	return s.sizes.get(ctx, pool, ns, atLeast, func(ctx context.Context) ([]engine.QueueStats, error) {
		return d.NamespaceQueues(ctx, ns)
	})
}

// namespaceActivity returns the activity of every queue of ns (in the
// order of its sizes) through the activity cache, and when it was read.
func (s *Server) namespaceActivity(ctx context.Context, pool, ns string, d engine.Dashboard, atLeast time.Duration) ([]engine.QueueDetail, time.Time, error) {
	return s.activity.get(ctx, pool, ns, atLeast, func(ctx context.Context) ([]engine.QueueDetail, error) {
		stats, _, err := s.namespaceSizes(ctx, pool, ns, d, atLeast)
		if err != nil {
			return nil, err
		}
		names := make([]string, len(stats))
		for i := range stats {
			names[i] = stats[i].Queue
		}
		return d.QueueActivity(ctx, ns, names)
	})
}
