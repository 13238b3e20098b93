package auth

import "strings"

// DefaultPool is the pool a token without a "pool:" prefix belongs to.
const DefaultPool = "default"

// MinUserTokenLength is the shortest user-chosen token Create accepts
// (lmstfy's rule, applied to the token as given, "pool:" prefix included).
const MinUserTokenLength = 20

// ParseToken splits a raw token "[pool:]secret" on the first ':'. Without a
// colon, or with an empty prefix, the pool is DefaultPool.
func ParseToken(raw string) (pool, token string) {
	if i := strings.IndexByte(raw, ':'); i >= 0 {
		return normPool(raw[:i]), raw[i+1:]
	}
	return DefaultPool, raw
}

// FormatToken is the inverse of ParseToken: the token as clients must send
// it, "pool:token" for non-default pools and the bare token for the default
// pool.
func FormatToken(pool, token string) string {
	pool = normPool(pool)
	if pool == DefaultPool {
		return token
	}
	return pool + ":" + token
}

// normPool maps "" to DefaultPool, as lmstfy does.
func normPool(pool string) string {
	if pool == "" {
		return DefaultPool
	}
	return pool
}
