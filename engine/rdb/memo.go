package rdb

import (
	"strings"
	"sync"
)

// maxMemo bounds a memo; reaching it empties the memo, whose values are
// then built again as they are used.
const maxMemo = 1 << 16

// memo keeps values that the hot paths would otherwise build for every
// call from up to three names (a queue's key names; a metric series of a
// pool, namespace and queue), built once per key by build.
type memo[V any] struct {
	build func(k [3]string) V

	mu sync.RWMutex
	m  map[[3]string]V
}

func newMemo[V any](build func(k [3]string) V) *memo[V] {
	return &memo[V]{build: build}
}

func (c *memo[V]) get(k [3]string) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = c.build(k)
	for i := range k {
		k[i] = strings.Clone(k[i]) // not a slice of a request's strings
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxMemo {
		c.m = make(map[[3]string]V)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}
