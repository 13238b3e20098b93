package rdb

import "github.com/redis/go-redis/v9"

// The Lua of fair groups and in-flight limits (issue #32; design in
// doc/design.md "Groups and in-flight limits", keys in doc/keys.md).
//
// A queue is tracked once its config hash c/ has grp = '1' (set by its
// first grouped publish, or by SetQueueConfig with a limit or weights;
// cleared only by Destroy). The consume script of a tracked queue records
// every job it hands out in the queue's group keys (prefix gp =
// g/{T}ns/q/, in KEYS): gp..'i' maps the job's ID to its group ('' = the
// default group), so the queue's jobs in flight are HLEN(gp..'i'), and
// gp..'c' counts each group's. Every path where a job leaves flight (ACK,
// release, the pump's TTR expiry and its entries of gone jobs, the
// reclaimer's, CancelKey, re-publish's Replaces, Destroy) calls
// inflight_free, which costs an untracked queue one HGET (HMGET for a
// batch of ACKs): its jobs are never in gp..'i'.
//
// Limits, from the config hash: mif (max_in_flight of this physical
// queue: a shard's part of the queue's) and gmif (group_max_in_flight). A
// tracked queue with HLEN(gp..'i') >= mif gives nothing; a group with
// gp..'c'[G] >= gmif leaves the active groups gp..'a' for the blocked set
// gp..'b' and comes back when a slot of it frees.

// groupsLua is appended to luaLib (scripts.go): script() prepends the
// definitions a script uses.
const groupsLua = `
-- group_enter puts group g into the rotation of the queue whose group key
-- prefix is gp (the active set gp..'a') at the current minimum score, so
-- that a group coming back gets no credit for the time it was away.
local function group_enter(gp, g)
  local first = redis.call('ZRANGE', gp .. 'a', 0, 0, 'WITHSCORES')
  local score = '0'
  if #first > 0 then score = first[2] end
  redis.call('ZADD', gp .. 'a', 'NX', score, g)
end
-- inflight_room is how many more jobs a tracked queue (group key prefix
-- gp) may hand out now under its max_in_flight mif (config text, nil or
-- '' = none), at most want.
local function inflight_room(gp, mif, want)
  local m = tonumber(mif)
  if not m or m <= 0 then return want end
  local room = m - redis.call('HLEN', gp .. 'i')
  if room < want then return room end
  return want
end
-- inflight_take records job id of group g in flight (gp..'i', gp..'c')
-- and returns the group's jobs in flight.
local function inflight_take(gp, id, g)
  redis.call('HSET', gp .. 'i', id, g)
  return redis.call('HINCRBY', gp .. 'c', g, 1)
end
-- inflight_block takes group g out of the rotation while it is at its
-- group_max_in_flight: inflight_free puts it back.
local function inflight_block(gp, g)
  redis.call('ZREM', gp .. 'a', g)
  redis.call('SADD', gp .. 'b', g)
end
-- inflight_drop frees the slot of job id of group g, in flight in the
-- queue of group key prefix gp and config hash ck (inflight_free).
local function inflight_drop(gp, ck, id, g)
  redis.call('HDEL', gp .. 'i', id)
  if redis.call('HINCRBY', gp .. 'c', g, -1) <= 0 then redis.call('HDEL', gp .. 'c', g) end
  local wake = 0
  if redis.call('SREM', gp .. 'b', g) == 1 then
    group_enter(gp, g)
    wake = 1
  end
  local mif = tonumber(redis.call('HGET', ck, 'mif'))
  if mif and mif > 0 and redis.call('HLEN', gp .. 'i') == mif - 1 then wake = 1 end
  return wake
end
-- inflight_free frees the slot of job id of the queue whose group key
-- prefix is gp and config hash ck, if the job was in flight there (for
-- an untracked queue: one HGET, nothing else). It returns 1 when a
-- consumer waiting on the queue may now get a job (the job's group was
-- blocked at its limit, or the queue was at its max_in_flight), else 0:
-- the caller publishes on the queue's ready channel (inflight_wake).
local function inflight_free(gp, ck, id)
  local g = redis.call('HGET', gp .. 'i', id)
  if not g then return 0 end
  return inflight_drop(gp, ck, id, g)
end
-- inflight_free_many is inflight_free for the jobs ids (a table) of one
-- queue: one HMGET for them all (an untracked queue's whole cost), and
-- the number of waiters to wake.
local function inflight_free_many(gp, ck, ids)
  local gs = redis.call('HMGET', gp .. 'i', unpack(ids))
  local wake = 0
  for i = 1, #ids do
    if gs[i] then wake = wake + inflight_drop(gp, ck, ids[i], gs[i]) end
  end
  return wake
end
-- inflight_wake wakes n waiters of a queue (command pub on its ready
-- channel chan) after slots freed.
local function inflight_wake(n, pub, chan)
  if n > 0 then redis.call(pub, chan, n) end
end
`

// setLimitsScript writes a physical queue's limits and group weights to
// its config hash in one step, the weights replacing the ones it had, and
// marks the queue tracked when it has any (grp is never cleared here: the
// queue may hold grouped jobs).
//
//	KEYS[1] config c/{T}ns/q
//	ARGV[1] mif (this physical queue's part of max_in_flight; 0 = none)
//	ARGV[2] mifq (the logical queue's max_in_flight, as set; 0 = none)
//	ARGV[3] gmif (group_max_in_flight; 0 = none)
//	ARGV[4…] pairs group, weight
//
// Returns 1.
var setLimitsScript = redis.NewScript(`
local ck = KEYS[1]
local old = {}
for _, f in ipairs(redis.call('HKEYS', ck)) do
  if string.sub(f, 1, 2) == 'w:' then old[#old + 1] = f end
end
if #old > 0 then redis.call('HDEL', ck, unpack(old)) end
local names = {'mif', 'mifq', 'gmif'}
local any = false
for i = 1, 3 do
  if ARGV[i] ~= '0' then
    redis.call('HSET', ck, names[i], ARGV[i])
    any = true
  else
    redis.call('HDEL', ck, names[i])
  end
end
for i = 4, #ARGV - 1, 2 do
  redis.call('HSET', ck, 'w:' .. ARGV[i], ARGV[i + 1])
  any = true
end
if any then redis.call('HSET', ck, 'grp', '1') end
return 1
`)
