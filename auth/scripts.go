package auth

import "github.com/redis/go-redis/v9"

// createTokenScript creates a token and its scope in one atomic step, so a
// scoped token can never exist, even for a moment, without its scope (which
// would let it do everything). A token exists already when either of its
// forms (in clear or hashed) is stored.
//
// KEYS[1]: tk/{pool}/{ns}   hash token → description (lmstfy's layout)
// KEYS[2]: tks/{pool}/{ns}  hash token → JSON Scope
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
if ARGV[3] ~= "" then
	redis.call("HSET", KEYS[2], ARGV[1], ARGV[3])
else
	redis.call("HDEL", KEYS[2], ARGV[1])
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

// bucketScript takes one request from, or gives one back to, a token bucket
// of capacity ARGV[1] requests refilled at ARGV[1] requests per ARGV[2] ms
// (so a full bucket allows a burst of the whole limit, then the limit per
// interval). The state is refilled lazily from the elapsed time; `now` comes
// from the caller's clock (no TIME call, so the script is deterministic and
// runs unchanged on Redis 5-7 and on miniredis). A clock that goes backwards
// (another instance's) refills nothing. The key expires after 2×interval
// idle, by which time the bucket is full anyway.
//
// KEYS[1]: tb/{pool}/{ns}/{token}/{r|w}, a hash: "tokens" (requests left,
// a float) and "ts" (Unix ms of the last refill)
// ARGV[1]: capacity, requests per interval (integer > 0)
// ARGV[2]: interval in milliseconds (integer > 0)
// ARGV[3]: now, Unix milliseconds
// ARGV[4]: 1 to take a request, -1 to refund one (never above capacity; a
// refund to a missing bucket, which is full, does nothing)
// ARGV[5]: idle expiry of the key in milliseconds (2×interval)
// Returns: 1 allowed (or refunded), 0 refused.
var bucketScript = redis.NewScript(`
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local state = redis.call("HMGET", KEYS[1], "tokens", "ts")
local tokens, ts
if state[1] and state[2] then
	tokens = tonumber(state[1])
	ts = tonumber(state[2])
end
if tokens == nil or ts == nil then
	if cost < 0 then
		return 1
	end
	tokens = capacity
	ts = now
elseif now > ts then
	tokens = tokens + (now - ts) * capacity / interval
	ts = now
end
if tokens > capacity then
	tokens = capacity
end
local allowed = 1
if cost < 0 then
	tokens = tokens + 1
	if tokens > capacity then
		tokens = capacity
	end
elseif tokens >= 1 - 1e-9 then
	tokens = tokens - 1
	if tokens < 0 then
		tokens = 0
	end
else
	allowed = 0
end
redis.call("HSET", KEYS[1], "tokens", string.format("%.17g", tokens), "ts", string.format("%.17g", ts))
redis.call("PEXPIRE", KEYS[1], ARGV[5])
return allowed
`)
