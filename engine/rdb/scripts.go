package rdb

import "github.com/redis/go-redis/v9"

// Every Lua script of the engine. Each is one atomic step. Packed entries
// (codec.go) are decoded with string.byte/string.sub so that the scripts
// also run on miniredis, which has no struct library. Times are
// milliseconds, computed by the server from its injected clock and passed in
// ARGV; scripts never read the Redis clock.
//
// The pump script builds per-queue key names from the timer index members
// (the {ns/q} tag), as documented in doc/keys.md; every other script gets
// its fixed keys in KEYS and builds only job body keys from a prefix.

// publishScript stores the jobs of one queue and makes each ready or
// schedules it, in one step: either every job is written or none is.
//
//	KEYS[1]      ready list            q/{ns/q}
//	KEYS[2]      timer                 t/{ns/q}
//	KEYS[3]      timer index           timer_index
//	KEYS[4]      body key of a job to delete first (re-publish), used when ARGV[5] = "1"
//	KEYS[5..]    body keys of the jobs j/{ns/q}/ID, one per job
//	ARGV[1]      now (ms)
//	ARGV[2]      timer index member    ns/q
//	ARGV[3]      ready channel         n/ns/q
//	ARGV[4]      timer channel
//	ARGV[5]      "1" to delete KEYS[4], else "0"
//	ARGV[6+4k..] per job k: packed entry, payload, ttl (ms, 0 = forever), due (ms)
//
// Returns {0, made ready, new earliest due of the pool (ms) or 0} on success;
// {k} when job k's body key already exists (nothing was written).
var publishScript = redis.NewScript(`
local n = #KEYS - 4
for i = 1, n do
  if redis.call('EXISTS', KEYS[4+i]) == 1 then return {i} end
end
if ARGV[5] == '1' then redis.call('DEL', KEYS[4]) end
local now = tonumber(ARGV[1])
local ready, mindue, mindueS = 0, nil, nil
for i = 1, n do
  local b = 6 + (i - 1) * 4
  local ttl = tonumber(ARGV[b + 2])
  if ttl > 0 then
    redis.call('SET', KEYS[4+i], ARGV[b+1], 'NX', 'PX', ARGV[b+2])
  else
    redis.call('SET', KEYS[4+i], ARGV[b+1], 'NX')
  end
  local due = tonumber(ARGV[b + 3])
  if due <= now then
    redis.call('LPUSH', KEYS[1], ARGV[b])
    ready = ready + 1
  else
    redis.call('ZADD', KEYS[2], ARGV[b+3], ARGV[b])
    if not mindue or due < mindue then mindue, mindueS = due, ARGV[b+3] end
  end
end
if ready > 0 then redis.call('PUBLISH', ARGV[3], ready) end
local earliest = 0
if mindue then
  local cur = redis.call('ZSCORE', KEYS[3], ARGV[2])
  if not cur or tonumber(cur) > mindue then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    redis.call('ZADD', KEYS[3], mindueS, ARGV[2])
    if #first == 0 or tonumber(first[2]) > mindue then
      earliest = mindue
      redis.call('PUBLISH', ARGV[4], mindueS)
    end
  end
end
return {0, ready, earliest}
`)

// consumeScript takes up to count live jobs from the ready lists in priority
// order, skipping (and dropping) stale entries whose body is gone, and for
// each job registers the in-flight timer entry at due with one try less.
//
//	KEYS[1..n]      ready lists, highest priority first    q/{ns/q}
//	KEYS[n+1..2n]   the same queues' timers                t/{ns/q}
//	KEYS[2n+1]      timer index                            timer_index
//	ARGV[1]         due time of the in-flight entries: now + TTR (ms)
//	ARGV[2]         count: most jobs to take
//	ARGV[3]         most entries to pop in all (bounds work on stale entries)
//	ARGV[4]         timer channel
//	ARGV[5..4+n]    job key prefixes                       j/{ns/q}/
//	ARGV[5+n..4+2n] timer index members                    ns/q
//
// Returns {more, earliest, then per job: queue position (1-based), ID,
// tries left, payload, PTTL (ms, -1 = no expiry)}. more = 1 when the pop
// budget ran out before count jobs were found; earliest = the pool's new
// earliest due time (ms) when this call moved it earlier, else 0.
var consumeScript = redis.NewScript(`
local n = (#KEYS - 1) / 2
local idx = KEYS[2 * n + 1]
local due = ARGV[1]
local dueN = tonumber(due)
local want = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local out = {0, 0}
local got = 0
local touched = {}
for i = 1, n do
  local hit = false
  while got < want do
    if budget <= 0 then out[1] = 1 break end
    local e = redis.call('RPOP', KEYS[i])
    if not e then break end
    budget = budget - 1
    local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
    local id = string.sub(e, 5, 4 + idlen)
    local jk = ARGV[4 + i] .. id
    local v = redis.call('GET', jk)
    if v then
      local left = string.byte(e, 1) + string.byte(e, 2) * 256 - 1
      if left < 0 then left = 0 end
      redis.call('ZADD', KEYS[n + i], due, string.char(left % 256, math.floor(left / 256)) .. string.sub(e, 3))
      hit = true
      got = got + 1
      local pttl = redis.call('PTTL', jk)
      out[#out + 1] = i
      out[#out + 1] = id
      out[#out + 1] = left
      out[#out + 1] = v
      out[#out + 1] = pttl
    end
  end
  if hit then touched[#touched + 1] = i end
  if got >= want or budget <= 0 then break end
end
local first = nil
for _, i in ipairs(touched) do
  local m = ARGV[4 + n + i]
  local cur = redis.call('ZSCORE', idx, m)
  if not cur or tonumber(cur) > dueN then
    if not first then first = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES') end
    redis.call('ZADD', idx, due, m)
    if out[2] == 0 and (#first == 0 or tonumber(first[2]) > dueN) then
      out[2] = dueN
      redis.call('PUBLISH', ARGV[4], due)
    end
  end
end
return out
`)

// pumpScript moves due timer entries of the whole pool, at most ARGV[2] of
// them: entries with tries left go to the tail of their ready list, entries
// with none go to the dead letter (the body loses its TTL), entries whose
// body is gone are dropped. Queues are taken from the timer index in due
// order, and the index is kept up to date.
//
//	KEYS[1]  timer index   timer_index
//	ARGV[1]  now (ms)
//	ARGV[2]  most entries to move
//
// Returns {entries handled, the pool's next due time (ms) or -1}.
var pumpScript = redis.NewScript(`
local now = ARGV[1]
local budget = tonumber(ARGV[2])
local handled = 0
local queues = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, budget)
for _, m in ipairs(queues) do
  if budget <= 0 then break end
  local tag = '{' .. m .. '}'
  local tk, qk, dk, jp = 't/' .. tag, 'q/' .. tag, 'd/' .. tag, 'j/' .. tag .. '/'
  local entries = redis.call('ZRANGEBYSCORE', tk, '-inf', now, 'LIMIT', 0, budget)
  local ready = {}
  for _, e in ipairs(entries) do
    local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
    local jk = jp .. string.sub(e, 5, 4 + idlen)
    if redis.call('EXISTS', jk) == 1 then
      if string.byte(e, 1) + string.byte(e, 2) == 0 then
        redis.call('PERSIST', jk)
        redis.call('LPUSH', dk, string.char(1, 0) .. string.sub(e, 3))
      else
        ready[#ready + 1] = e
        if #ready == 256 then
          redis.call('LPUSH', qk, unpack(ready))
          redis.call('PUBLISH', 'n/' .. m, #ready)
          ready = {}
        end
      end
    end
  end
  if #ready > 0 then
    redis.call('LPUSH', qk, unpack(ready))
    redis.call('PUBLISH', 'n/' .. m, #ready)
  end
  if #entries > 0 then redis.call('ZREMRANGEBYRANK', tk, 0, #entries - 1) end
  handled = handled + #entries
  budget = budget - #entries
  local first = redis.call('ZRANGE', tk, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', KEYS[1], m)
  else
    redis.call('ZADD', KEYS[1], first[2], m)
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {handled, -1} end
return {handled, tonumber(nxt[2])}
`)

// peekQueueScript returns the next live job of a ready list without
// consuming it, looking past stale entries.
//
//	KEYS[1]  ready list      q/{ns/q}
//	ARGV[1]  job key prefix  j/{ns/q}/
//	ARGV[2]  most entries to look at
//
// Returns {ID, tries, payload, PTTL (ms)} or nil.
var peekQueueScript = redis.NewScript(`
local max = tonumber(ARGV[2])
local batch = 100
local stop = -1
local seen = 0
while seen < max do
  local es = redis.call('LRANGE', KEYS[1], stop - batch + 1, stop)
  for j = #es, 1, -1 do
    local e = es[j]
    local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
    local id = string.sub(e, 5, 4 + idlen)
    local v = redis.call('GET', ARGV[1] .. id)
    if v then
      return {id, string.byte(e, 1) + string.byte(e, 2) * 256, v, redis.call('PTTL', ARGV[1] .. id)}
    end
  end
  if #es < batch then return false end
  seen = seen + #es
  stop = stop - batch
end
return false
`)

// peekJobScript reads a job body and its TTL in one step.
//
//	KEYS[1]  body key  j/{ns/q}/ID
//
// Returns {payload, PTTL (ms)} or nil.
var peekJobScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
`)

// respawnScript moves the oldest dead jobs to the tail of the ready list
// with one try, setting their TTL; dead entries whose body is gone are
// dropped without counting.
//
//	KEYS[1]  dead letter     d/{ns/q}
//	KEYS[2]  ready list      q/{ns/q}
//	ARGV[1]  most jobs to respawn
//	ARGV[2]  ttl (ms; 0 = keep without expiry)
//	ARGV[3]  job key prefix  j/{ns/q}/
//	ARGV[4]  ready channel   n/ns/q
//	ARGV[5]  most entries to pop
//
// Returns {respawned, 1 when the dead letter is now empty else 0}.
var respawnScript = redis.NewScript(`
local want, ttl, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local n, empty = 0, 0
while n < want and budget > 0 do
  local e = redis.call('RPOP', KEYS[1])
  if not e then empty = 1 break end
  budget = budget - 1
  local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
  local jk = ARGV[3] .. string.sub(e, 5, 4 + idlen)
  if redis.call('EXISTS', jk) == 1 then
    redis.call('LPUSH', KEYS[2], string.char(1, 0) .. string.sub(e, 3))
    if ttl > 0 then redis.call('PEXPIRE', jk, ARGV[2]) end
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', ARGV[4], n) end
return {n, empty}
`)

// deleteDeadScript deletes the oldest dead jobs.
//
//	KEYS[1]  dead letter     d/{ns/q}
//	ARGV[1]  most entries to delete
//	ARGV[2]  job key prefix  j/{ns/q}/
//
// Returns the number of entries deleted.
var deleteDeadScript = redis.NewScript(`
local n = 0
for i = 1, tonumber(ARGV[1]) do
  local e = redis.call('RPOP', KEYS[1])
  if not e then break end
  local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
  redis.call('DEL', ARGV[2] .. string.sub(e, 5, 4 + idlen))
  n = n + 1
end
return n
`)

// destroyScript deletes a batch of a queue's ready, delayed and in-flight
// jobs (bodies and entries); when both are empty it drops the queue from the
// timer index. The dead letter is left alone.
//
//	KEYS[1]  ready list      q/{ns/q}
//	KEYS[2]  timer           t/{ns/q}
//	KEYS[3]  timer index     timer_index
//	ARGV[1]  most entries to delete
//	ARGV[2]  job key prefix  j/{ns/q}/
//	ARGV[3]  timer index member ns/q
//
// Returns the number of entries deleted (less than ARGV[1] when done).
var destroyScript = redis.NewScript(`
local batch = tonumber(ARGV[1])
local n = 0
while n < batch do
  local e = redis.call('RPOP', KEYS[1])
  if not e then break end
  local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
  redis.call('DEL', ARGV[2] .. string.sub(e, 5, 4 + idlen))
  n = n + 1
end
if n < batch then
  local es = redis.call('ZRANGE', KEYS[2], 0, batch - n - 1)
  for _, e in ipairs(es) do
    local idlen = string.byte(e, 3) + string.byte(e, 4) * 256
    redis.call('DEL', ARGV[2] .. string.sub(e, 5, 4 + idlen))
  end
  if #es > 0 then redis.call('ZREMRANGEBYRANK', KEYS[2], 0, #es - 1) end
  n = n + #es
end
if n < batch then redis.call('ZREM', KEYS[3], ARGV[3]) end
return n
`)

// allScripts are loaded by New so that a broken script fails at start and
// pipelined calls never meet NOSCRIPT.
var allScripts = []*redis.Script{
	publishScript, consumeScript, pumpScript, peekQueueScript, peekJobScript,
	respawnScript, deleteDeadScript, destroyScript,
}
