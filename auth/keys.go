package auth

// Every Redis key and hash field of the package is built here.

// throttlerKey is lmstfy's hash of limits: field limitField → JSON Limit.
const throttlerKey = "__throttler_keys__"

// tokenKey is lmstfy's hash of tokens: token → description.
func tokenKey(pool, namespace string) string {
	return "tk/" + pool + "/" + namespace
}

// scopeKey is Kairos's hash of scopes: token → JSON Scope. Only scoped
// tokens have a field; a token without one may do everything. Its hash tag
// is the name of tokenKey (which has no braces: pool and namespace names
// have none), so both keys live in one Redis Cluster slot, and creating a
// token with its scope is one script on one node.
func scopeKey(pool, namespace string) string {
	return "tks/{" + tokenKey(pool, namespace) + "}"
}

// legacyScopeKey is where Kairos kept scopes before Redis Cluster support:
// a slot of its own. On a standalone or Sentinel Redis (one node, so no
// second slot to depend on) Verify still reads it beside the token, and
// Create also writes it, so that servers of the earlier version, during a
// rolling upgrade, never take a new scoped token for an unrestricted one.
// On a Redis Cluster (where no earlier version ran, but its data may have
// been imported) Verify reads it only until it has been folded into
// scopeKey (see foldedKey); Delete clears it everywhere.
func legacyScopeKey(pool, namespace string) string {
	return "tks/" + pool + "/" + namespace
}

// foldedKey marks, on a Redis Cluster, that the namespace's legacy scopes
// (legacyScopeKey, in another slot) were copied into scopeKey, so that
// verifying a token reads one slot only: the token's. It is in that slot.
func foldedKey(pool, namespace string) string {
	return scopeKey(pool, namespace) + "/folded"
}

// limitField is lmstfy's field name in throttlerKey.
func limitField(pool, namespace, token string) string {
	return pool + "/" + namespace + "/" + token
}

// bucketKey is the token bucket of one direction of one token. It is not
// lmstfy's "l/…" fixed-window counter key, so that lmstfy and Kairos servers
// sharing an admin Redis during a migration do not corrupt each other's
// state.
func bucketKey(pool, namespace, token string, write bool) string {
	dir := "r"
	if write {
		dir = "w"
	}
	return "tb/" + pool + "/" + namespace + "/" + token + "/" + dir
}

// jobsBucketKey is the token bucket of the token's published jobs
// (Limit.WriteJobs), beside its request buckets.
func jobsBucketKey(pool, namespace, token string) string {
	return "tb/" + pool + "/" + namespace + "/" + token + "/j"
}
