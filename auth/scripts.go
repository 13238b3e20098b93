package auth

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// createTokenScript creates a token and its scope in one atomic step, so a
// scoped token can never exist, even for a moment, without its scope (which
// would let it do everything). A token exists already when either of its
// forms (in clear or hashed) is stored.
//
// KEYS[1]: tk/{pool}/{ns}      hash token → description (lmstfy's layout)
// KEYS[2]: tks/{tk/{pool}/{ns}} hash token → JSON Scope, in KEYS[1]'s slot
// KEYS[3]: (optional, not on a Redis Cluster) tks/{pool}/{ns}, the legacy
// scope hash, written the same way for servers of the earlier version
// ARGV[1]: the field to create: the secret (without "pool:"), or its
// hashed form in hashed mode
// ARGV[2]: description
// ARGV[3]: JSON scope, or "" for an unrestricted token
// ARGV[4]: the token's other form (hashed form, or the secret), which must
// not exist either
// Returns: 1 created, 0 the token already exists (nothing changed).
var createTokenScript = redis.NewScript(`
if redis.call("HEXISTS", KEYS[1], ARGV[4]) == 1 then
	return 0
end
if redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2]) == 0 then
	return 0
end
for i = 2, #KEYS do
	if ARGV[3] ~= "" then
		redis.call("HSET", KEYS[i], ARGV[1], ARGV[3])
	else
		redis.call("HDEL", KEYS[i], ARGV[1])
	end
end
return 1
`)

// addLimitScript sets a token's limit unless it has one, in either form
// (lmstfy's HSETNX, aware of hashed tokens).
//
// KEYS[1]: __throttler_keys__  hash "{pool}/{ns}/{token}" → JSON Limit
// ARGV[1]: the field to set ("{pool}/{ns}/" + secret or hashed form)
// ARGV[2]: the field of the token's other form, which must not exist
// ARGV[3]: JSON Limit
// Returns: 1 set, 0 a limit exists already (nothing changed).
var addLimitScript = redis.NewScript(`
if redis.call("HEXISTS", KEYS[1], ARGV[2]) == 1 then
	return 0
end
return redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[3])
`)

// bucketLua holds what bucketScript and retuneScript share: a bucket's
// state is a hash of "tokens" (requests left, a float), "ts" (Unix ms of
// the last refill), "cap" and "iv" (the limit it is kept under: requests
// per iv ms), and, after an admin change, "pin" (Unix ms until which the
// stored limit overrides the limit each instance has cached, as other
// instances may not have reloaded yet) and "off" (the direction has no
// limit any more: the admin deleted it).
const bucketLua = `
-- settle refills a bucket kept under cap requests per iv ms up to now; a
-- clock behind the last refill (another instance's) refills nothing.
local function settle(tokens, ts, cap, iv, now)
	if now > ts then
		tokens = tokens + (now - ts) * cap / iv
		ts = now
	end
	if tokens > cap then
		tokens = cap
	end
	return tokens, ts
end
-- rebase carries the requests already made under a limit of cap over to a
-- limit of newcap, as lmstfy's window does: they count against the new
-- limit, so a raised limit admits the next request at once and a lowered
-- one refuses it once the new limit is used up.
local function rebase(tokens, cap, newcap)
	tokens = newcap - (cap - tokens)
	if tokens < 0 then
		tokens = 0
	end
	if tokens > newcap then
		tokens = newcap
	end
	return tokens
end
local function fmt(x)
	return string.format("%.17g", x)
end
`

// bucketScript takes one request from, or gives one back to, a token bucket
// of capacity cap requests refilled at cap requests per iv ms (so a full
// bucket allows a burst of the whole limit, then the limit per interval).
// The limit is the caller's cached one (ARGV[1], ARGV[2]), except while an
// admin change pins the bucket (see bucketLua): then the bucket's own.
// A bucket kept under another limit than the one that applies is rebased
// onto it (the requests made still count). The state is refilled lazily
// from the elapsed time; `now` comes from the caller's clock (no TIME
// call, so the script is deterministic and runs unchanged on Redis 5-7 and
// on miniredis). The key expires after 2×interval idle (by which time the
// bucket is full anyway), or when the pin ends if that is later.
//
// KEYS[1]: tb/{pool}/{ns}/{token}/{r|w}, the bucket hash (see bucketLua)
// ARGV[1]: capacity, requests per interval (integer > 0), as cached
// ARGV[2]: interval in milliseconds (integer > 0), as cached
// ARGV[3]: now, Unix milliseconds
// ARGV[4]: n > 0 to take n (a request, or jobs: refused unless the bucket
// holds n), -n to give n back (never above capacity; a refund to a missing
// bucket, which is full, does nothing)
// ARGV[5]: optional, "1" to take n whatever the bucket holds (never
// refused): the rest of a bulk admitted on its first job, which may leave
// the bucket in debt (below 0) until it refills
// Returns: 1 allowed (or refunded, or no limit any more); refused: minus
// the milliseconds until the bucket would hold the cost (≤ -1).
var bucketScript = redis.NewScript(bucketLua + `
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local s = redis.call("HMGET", KEYS[1], "tokens", "ts", "cap", "iv", "pin", "off")
local tokens, ts, cap, iv, pin = tonumber(s[1]), tonumber(s[2]), tonumber(s[3]), tonumber(s[4]), tonumber(s[5])
local pinned = pin ~= nil and now < pin
if pinned and s[6] then
	return 1
end
local wantCap, wantIv = tonumber(ARGV[1]), tonumber(ARGV[2])
if pinned and cap ~= nil and iv ~= nil then
	wantCap, wantIv = cap, iv
end
if tokens == nil or ts == nil then
	if cost < 0 then
		return 1
	end
	tokens = wantCap
	ts = now
else
	if cap == nil or iv == nil then
		cap, iv = wantCap, wantIv
	end
	tokens, ts = settle(tokens, ts, cap, iv, now)
	if cap ~= wantCap then
		tokens = rebase(tokens, cap, wantCap)
	end
end
cap, iv = wantCap, wantIv
if tokens > cap then
	tokens = cap
end
local allowed = 1
if cost < 0 then
	tokens = tokens - cost
	if tokens > cap then
		tokens = cap
	end
elseif ARGV[5] == "1" then
	tokens = tokens - cost
elseif tokens >= cost - 1e-9 then
	tokens = tokens - cost
	if tokens < 0 then
		tokens = 0
	end
else
	-- Refused: minus the milliseconds until the bucket holds cost (at
	-- least 1), were nothing given back meanwhile.
	allowed = -math.max(1, math.ceil((cost - tokens) * iv / cap))
end
redis.call("HSET", KEYS[1], "tokens", fmt(tokens), "ts", fmt(ts), "cap", fmt(cap), "iv", fmt(iv))
local ttl = 2 * iv
if pinned then
	if pin - now > ttl then
		ttl = pin - now
	end
elseif s[5] or s[6] then
	redis.call("HDEL", KEYS[1], "pin", "off")
end
redis.call("PEXPIRE", KEYS[1], math.ceil(ttl))
return allowed
`)

// retuneScript puts a bucket under a limit an admin just set, added or
// deleted, and pins it there (see bucketLua) for as long as other
// instances may still hold the old limit in their cache: the next request,
// on any instance, is judged by the new limit. The requests already made
// under the old limit count against the new one (rebase). A direction
// without a limit any more leaves a marker ("off") that lets every request
// through until the pin ends.
//
// KEYS[1]: tb/{pool}/{ns}/{token}/{r|w}, the bucket hash (see bucketLua)
// ARGV[1]: the new capacity, requests per interval; 0 = no limit
// ARGV[2]: the new interval in milliseconds (integer > 0 when ARGV[1] > 0)
// ARGV[3]: now, Unix milliseconds
// ARGV[4]: how long the pin lasts, milliseconds (> 0)
// Returns: 1.
var retuneScript = redis.NewScript(bucketLua + `
local newCap, newIv = tonumber(ARGV[1]), tonumber(ARGV[2])
local now, pinMs = tonumber(ARGV[3]), tonumber(ARGV[4])
local s = redis.call("HMGET", KEYS[1], "tokens", "ts", "cap", "iv", "off")
redis.call("DEL", KEYS[1])
if newCap <= 0 then
	redis.call("HSET", KEYS[1], "off", "1", "pin", fmt(now + pinMs))
	redis.call("PEXPIRE", KEYS[1], pinMs)
	return 1
end
local tokens, ts, cap, iv = tonumber(s[1]), tonumber(s[2]), tonumber(s[3]), tonumber(s[4])
if tokens == nil or ts == nil or s[5] then
	tokens, ts = newCap, now
elseif cap == nil or iv == nil then
	if tokens > newCap then
		tokens = newCap
	end
else
	tokens, ts = settle(tokens, ts, cap, iv, now)
	tokens = rebase(tokens, cap, newCap)
end
redis.call("HSET", KEYS[1], "tokens", fmt(tokens), "ts", fmt(ts), "cap", fmt(newCap), "iv", fmt(newIv), "pin", fmt(now + pinMs))
local ttl = 2 * newIv
if pinMs > ttl then
	ttl = pinMs
end
redis.call("PEXPIRE", KEYS[1], ttl)
return 1
`)

// evalshaScripts are the scripts the package runs with EVALSHA (Run);
// retuneScript goes by EVAL in pipelines.
var evalshaScripts = []*redis.Script{createTokenScript, addLimitScript, bucketScript}

// LoadScripts loads the scripts the token store and the throttler run into
// the admin Redis (on a Redis Cluster, into every master), so that their
// first runs meet no NOSCRIPT (which Run would answer with an EVAL, but the
// command metrics would count as a failed EVALSHA).
func LoadScripts(ctx context.Context, client redis.UniversalClient) error {
	for _, s := range evalshaScripts {
		if err := s.Load(ctx, client).Err(); err != nil {
			return fmt.Errorf("auth: load scripts: %w", err)
		}
	}
	return nil
}
