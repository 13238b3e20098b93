package auth

// Every Redis key and hash field of the package is built here.

// throttlerKey is lmstfy's hash of limits: field limitField → JSON Limit.
const throttlerKey = "__throttler_keys__"

// tokenKey is lmstfy's hash of tokens: token → description.
func tokenKey(pool, namespace string) string {
	return "tk/" + pool + "/" + namespace
}

// scopeKey is Kairos's hash of scopes: token → JSON Scope. Only scoped
// tokens have a field; a token without one may do everything.
func scopeKey(pool, namespace string) string {
	return "tks/" + pool + "/" + namespace
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
