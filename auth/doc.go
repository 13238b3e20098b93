// Package auth holds Kairos's tokens, their scopes and the per-token rate
// limiter (throttler).
//
// Both live in the admin Redis with lmstfy's layout, so tokens and limits
// created by lmstfy keep working and lmstfy's admin tooling keeps reading
// what Kairos writes:
//
//	tk/{pool}/{ns}        hash  token → description               (lmstfy)
//	tks/{tk/{pool}/{ns}}  hash  token → JSON Scope (scoped tokens)  (Kairos)
//	__throttler_keys__    hash  "{pool}/{ns}/{token}" → JSON Limit  (lmstfy)
//	tb/{pool}/{ns}/{token}/{r|w}  hash  token bucket state          (Kairos)
//
// (Here {pool} stands for the pool's name; in tks/{tk/...} the braces are
// literal: a Redis Cluster hash tag that puts the scopes in the slot of
// the token hash.) The admin Redis may be a Redis Cluster: every script
// and MULTI touches one slot (a token and its scope; one bucket), and the
// writes that span slots (a limit and its buckets) are plain pipelines.
// Scopes made before cluster support, in tks/{pool}/{ns}, are still read
// (see legacyScopeKey); on a cluster they are folded into the token's slot
// once per namespace (foldedKey), so that a token check reads one slot.
//
// A token check rides out a failover of the admin Redis: a positive answer
// stands in for Redis for StoreOptions.Grace when Redis fails as in a
// failover, and on a cluster the check, and a rate-limit bucket script,
// are retried within ClusterRetry (engine/redisretry, shared with the
// job engine).
//
// With HashTokens (StoreOptions, ThrottlerOptions) a token's hashed form,
// "sha256-" + hex SHA-256 of the secret, takes the token's place in every
// key and field above, so that a dump of the admin Redis holds no usable
// token; listings show fingerprints (see HashToken, Fingerprint). Tokens
// and limits stored in clear keep working, so the switch is a live
// migration.
//
// Kairos fixes three lmstfy weaknesses here: a revoked token is refused by
// every server instance within CacheTTL (lmstfy caches positive answers
// forever), each token keeps its own limit after a reload (lmstfy aliases all
// of them to one), and the limiter is one atomic Lua token bucket that holds
// under concurrency across instances.
package auth
