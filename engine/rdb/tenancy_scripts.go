package rdb

// The Lua of tenancy (issue #31; doc/keys.md "Usage and quotas"): the
// definitions every script that creates or removes a job shares, so that
// a namespace's usage changes in the same step as its jobs, and the
// reconciler's recount.
//
// A namespace's usage is kept per slot group, in the group's usage hash
// nu/{T}: field "j:NS" the jobs NS holds in the group's queues (ready,
// delayed, in flight and dead), field "b:NS" the bytes of their values
// (header, trace context and payload: what STRLEN of the job key says, so
// that a recount finds exactly what the scripts added); "j:NS/Q" and
// "b:NS/Q" the same for each queue, so that the reconciler recounts one
// queue at a time and knows every queue that holds counted jobs. The hash
// carries the group's tag, so every script keeps touching one slot.

// tenancyLua is appended to luaLib (scripts.go): script() prepends the
// definitions a script uses.
const tenancyLua = `
-- ns_of returns the namespace of a queue key or job key prefix
-- (x/{T}ns/q…).
local function ns_of(k) return string.match(k, '}([^/]*)/') end
-- usage_add adds dj jobs and db bytes to the usage, in the group's usage
-- hash uk, of the queue of key k (a queue key or job key prefix) and of
-- its namespace.
local function usage_add(uk, k, dj, db)
  local m, ns = string.match(k, '}(([^/]*)/[^/]*)')
  if dj ~= 0 then
    redis.call('HINCRBY', uk, 'j:' .. ns, dj)
    redis.call('HINCRBY', uk, 'j:' .. m, dj)
  end
  if db ~= 0 then
    redis.call('HINCRBY', uk, 'b:' .. ns, db)
    redis.call('HINCRBY', uk, 'b:' .. m, db)
  end
end
-- usage_expired counts the jobs ids of the queue of job key prefix jp
-- gone by expiry, found by their timer entry (no script deletes a job and
-- leaves its timer entry): one job each, and the bytes the reconciler
-- recorded for it in the queue's expiry ledger (gpfx(jp)..'e', member ID,
-- score its length: reconcile_ledger.go), whose record goes with it; the
-- bytes of a job expired before it was recorded are unknown once its key
-- is gone, and left to the reconciler's recounts.
local function usage_expired(uk, jp, ids)
  if #ids == 0 then return end
  local lk, db = 'g' .. string.sub(jp, 2) .. 'e', 0
  if redis.call('EXISTS', lk) == 1 then
    for _, id in ipairs(ids) do db = db + (tonumber(redis.call('ZSCORE', lk, id)) or 0) end
    redis.call('ZREM', lk, unpack(ids))
  end
  usage_add(uk, jp, -#ids, -db)
end
-- ledger_expired says whether the job id of the queue of job key prefix
-- jp (timer tk), recorded in its expiry ledger, expired with nobody
-- counting it: its key is gone, it has no timer entry (the pump or the
-- reclaimer counts those: usage_expired) and its witness — its history
-- key, which the reconciler made outlive the job and which every script
-- that deletes a job deletes with it — is still there.
local function ledger_expired(jp, tk, id)
  local jk = jp .. id
  return redis.call('EXISTS', jk) == 0 and not redis.call('ZSCORE', tk, id) and redis.call('EXISTS', hkey(jk)) == 1
end
-- usage_of returns the jobs and bytes counted for the queue of job key
-- prefix jp in the group's usage hash uk.
local function usage_of(uk, jp)
  local m = string.match(jp, '}([^/]*/[^/]*)')
  local cur = redis.call('HMGET', uk, 'j:' .. m, 'b:' .. m)
  return {tonumber(cur[1]) or 0, tonumber(cur[2]) or 0}
end
-- usage_set corrects the queue of job key prefix jp and its namespace by
-- dj jobs and db bytes (a recount's difference), and drops their fields
-- that are at 0 then: a namespace's usage lists the namespaces holding
-- jobs.
local function usage_set(uk, jp, dj, db)
  usage_add(uk, jp, dj, db)
  local m, ns = string.match(jp, '}(([^/]*)/[^/]*)')
  for _, f in ipairs({m, ns}) do
    local v = redis.call('HMGET', uk, 'j:' .. f, 'b:' .. f)
    if (tonumber(v[1]) or 0) == 0 and (tonumber(v[2]) or 0) == 0 then redis.call('HDEL', uk, 'j:' .. f, 'b:' .. f) end
  end
end
-- del_job deletes job key jk with its attempt history (hkey, scripts.go)
-- and returns its length, 0 when it did not exist (a job value is at
-- least 22 bytes).
local function del_job(jk)
  local l = redis.call('STRLEN', jk)
  redis.call('DEL', jk, hkey(jk))
  return l
end
-- over_quota says which limit the usage in the group (uk) of the
-- namespace of queue key k would exceed with dj more jobs and db more
-- bytes, under the allowances aj and ab ('' = no limit): 'max_jobs',
-- 'max_bytes', or false.
local function over_quota(uk, k, dj, db, aj, ab)
  if aj == '' and ab == '' then return false end
  local ns = ns_of(k)
  local cur = redis.call('HMGET', uk, 'j:' .. ns, 'b:' .. ns)
  if aj ~= '' and (tonumber(cur[1]) or 0) + dj > tonumber(aj) then return 'max_jobs' end
  if ab ~= '' and (tonumber(cur[2]) or 0) + db > tonumber(ab) then return 'max_bytes' end
  return false
end
`

// recountScript recounts one queue's usage and corrects its fields and
// its namespace's in the group's usage hash by the difference: the jobs
// are the distinct IDs of its ready list, priority set, timer, dead letter
// and its groups' ready lists and priority sets (groups_scripts.go) whose
// key exists, the bytes their lengths; and a timer entry whose job
// expired is one job (with the bytes its expiry ledger recorded, else
// none) until the pump or the reclaimer meets it and takes it off
// (usage_expired) — counting it as gone here would take it off twice.
// The records of the queue's expiry ledger (reconcile_ledger.go) whose job
// is gone with no timer entry go, with their witnesses: the count is
// exact, so the sweep must not take them off again. It runs as one step,
// so no script changes the queue between the count and the correction; a
// queue holding more than ARGV[1] entries is left alone (it would hold
// Redis too long; doc/design.md says what then).
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] dead letter
//	KEYS[5] job key prefix j/{T}ns/q/   KEYS[6] the group's usage hash
//	KEYS[7] config (its gn: the entries of the queue's groups)
//	ARGV[1] most entries
//
// Returns {1 recounted or 0 too big, entries, jobs corrected, bytes
// corrected}.
var recountScript = script(`
local jp, uk, seen, jobs, bytes = KEYS[5], KEYS[6], {}, 0, 0
local gp = gpfx(jp)
local lk = gp .. 'e'
local size = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) + redis.call('LLEN', KEYS[4])
  + (tonumber(redis.call('HGET', KEYS[7], 'gn')) or 0) + redis.call('ZCARD', lk)
if size > tonumber(ARGV[1]) then return {0, size, 0, 0} end
local function count(id)
  if id ~= '' and not seen[id] then
    seen[id] = true
    local l = redis.call('STRLEN', jp .. id)
    if l > 0 then jobs, bytes = jobs + 1, bytes + l end
  end
end
-- The timer first: an entry whose job expired is still one job (with the
-- bytes its ledger record holds), which the pump or the reclaimer takes
-- off when it meets the entry (usage_expired); no script deletes a job
-- and leaves its timer entry.
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if not seen[id] then
    seen[id] = true
    local l = redis.call('STRLEN', jp .. id)
    if l == 0 then l = tonumber(redis.call('ZSCORE', lk, id)) or 0 end
    jobs, bytes = jobs + 1, bytes + l
  end
end
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do count(eid(e)) end
for _, e in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do count(eid(e)) end
for _, e in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do count(eid(e)) end
-- The groups' lists (grp_all: every group with ready jobs is in the
-- rotation or, at its limit, blocked).
for _, g in ipairs(grp_all(gp)) do
  for _, e in ipairs(redis.call('LRANGE', gp .. 'q:' .. g, 0, -1)) do count(eid(e)) end
  for _, e in ipairs(redis.call('ZRANGE', gp .. 'p:' .. g, 0, -1)) do count(eid(e)) end
end
-- The expiry ledger: this count is exact, so the records of jobs gone
-- with no timer entry (expired uncounted or deleted: either way not
-- counted above) go, with their witnesses, as the sweep's would.
local drop = {}
for _, id in ipairs(redis.call('ZRANGE', lk, 0, -1)) do
  local jk = jp .. id
  if redis.call('EXISTS', jk) == 0 and not redis.call('ZSCORE', KEYS[3], id) then
    drop[#drop + 1] = id
    redis.call('DEL', hkey(jk))
  end
end
if #drop > 0 then redis.call('ZREM', lk, unpack(drop)) end
local cur = usage_of(uk, jp)
local dj, db = jobs - cur[1], bytes - cur[2]
usage_set(uk, jp, dj, db)
return {1, size, dj, db}
`)

// recountPartScript reads one chunk of a queue too big for recountScript:
// at most ARGV[3] entries of one of its structures from offset ARGV[2]
// (a list's index from the left, a sorted set's rank), and counts the
// live jobs it finds there, each once over the structures by the
// structure its state puts it in — a timer entry (whose job exists, or
// expired: one job until the pump meets it, as in recountScript), a dead
// letter entry whose job is dead ('x'), a ready or priority entry whose
// job exists, is not dead and has no timer entry (a delayed job made ready
// by the pump keeps its 'd'), a record of the expiry ledger whose job
// expired unseen by a script (as in recountScript) — which is
// recountScript's count for every state the scripts leave (each live job
// has one such entry). It writes nothing. The reconciler
// (reconcile_big.go) adds the chunks up under a WATCH of the structures
// and applies the sum with recountApplyScript: the reply's lengths and
// counts let it give up early when the queue changed.
//
// Structure 6 is the groups' ready lists gp..'q:'..G and priority sets
// gp..'p:'..G (groups_scripts.go), read as the queue's own, group after
// group in the order of the rotation gp..'r' (by index) and then of the
// blocked set gp..'b' (sorted; the groups of gp..'b' also in the rotation
// left out), from group ARGV[4] (0-based), its list (ARGV[5] = 1) or set
// (2), at offset ARGV[2]. The pass WATCHes the rotation, the blocked set,
// the memberships and the config, where every script that pushes to or
// pops from a group's lists counts it (gn): so while the pass holds, the
// groups and their lists are those its first chunk saw. A queue with the
// rotation of the layout before (gp..'a', a rolling upgrade), or more
// than 1,000 blocked groups, is not recounted in chunks (the reply's
// field 11 says so).
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] dead letter
//	KEYS[5] job key prefix j/{T}ns/q/   KEYS[6] the group's usage hash
//	KEYS[7] config   KEYS[8] the expiry ledger
//	ARGV[1] structure (1..6, as KEYS; 5 the ledger, 6 the groups')
//	ARGV[2] offset   ARGV[3] most entries
//	ARGV[4] (6) the group   ARGV[5] (6) its structure: 1 list, 2 priority set
//
// Returns {entries read (6: an empty list or set counts as one), jobs,
// bytes, the five structures' lengths, the queue's counted jobs and bytes,
// 1 when it has gp..'a' or more than 1,000 blocked groups else 0, the config's gn, the rotation's and the
// blocked set's lengths, then (6) the next group, its structure, the
// offset, and 1 when every group was read}.
var recountPartScript = script(`
local s, off, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local jp, tk, lk = KEYS[5], KEYS[3], KEYS[8]
local gp = gpfx(jp)
local jobs, bytes, seen, read = 0, 0, {}, 0
-- ready counts the entries es of a ready list or priority set.
local function ready(es)
  for _, e in ipairs(es) do
    local id = eid(e)
    if id ~= '' and not seen[id] then
      seen[id] = true
      local jk = jp .. id
      -- '' when the job is gone; only a 'd' job may have a timer entry.
      local st = redis.call('GETRANGE', jk, 1, 1)
      if st ~= '' and st ~= 'x' and not (st == 'd' and redis.call('ZSCORE', tk, id)) then
        jobs, bytes = jobs + 1, bytes + redis.call('STRLEN', jk)
      end
    end
  end
end
local gi, sub, gdone = 0, 0, 0
if s == 6 then
  gi, sub = tonumber(ARGV[4]), tonumber(ARGV[5])
  local rn = redis.call('LLEN', gp .. 'r')
  local bl = nil
  -- name is the group at index i of the order (nil past the end).
  local function name(i)
    if i < rn then return redis.call('LINDEX', gp .. 'r', i) end
    if not bl then
      bl = {}
      for _, g in ipairs(redis.call('SMEMBERS', gp .. 'b')) do
        local st = redis.call('HGET', gp .. 'm', g)
        if not st or st == '-1' then bl[#bl + 1] = g end
      end
      table.sort(bl)
    end
    return bl[i - rn + 1]
  end
  local left = n
  while left > 0 do
    local g = name(gi)
    if not g then gdone = 1 break end
    local es, want = {}, left
    if g ~= '' then
      if sub == 1 then
        es = redis.call('LRANGE', gp .. 'q:' .. g, off, off + want - 1)
      else
        es = redis.call('ZRANGE', gp .. 'p:' .. g, off, off + want - 1)
      end
    end
    ready(es)
    left = left - math.max(#es, 1)
    if #es < want then
      -- Read to its end: the group's set next, or the next group.
      if sub == 1 then sub, off = 2, 0 else gi, sub, off = gi + 1, 1, 0 end
    else
      off = off + #es
    end
  end
  read = n - left
else
  local es
  if s == 1 or s == 4 then
    es = redis.call('LRANGE', KEYS[s], off, off + n - 1)
  elseif s == 5 then
    es = redis.call('ZRANGE', lk, off, off + n - 1, 'WITHSCORES')
  else
    es = redis.call('ZRANGE', KEYS[s], off, off + n - 1)
  end
  read = #es
  if s == 5 then
    read = #es / 2
    for i = 1, #es, 2 do
      if ledger_expired(jp, tk, es[i]) then jobs, bytes = jobs + 1, bytes + tonumber(es[i + 1]) end
    end
  elseif s == 3 then
    for _, id in ipairs(es) do
      if not seen[id] then
        seen[id] = true
        -- as recountScript's timer
        local l = redis.call('STRLEN', jp .. id)
        if l == 0 then l = tonumber(redis.call('ZSCORE', lk, id)) or 0 end
        jobs, bytes = jobs + 1, bytes + l
      end
    end
  elseif s == 4 then
    for _, e in ipairs(es) do
      local id = eid(e)
      if id ~= '' and not seen[id] then
        seen[id] = true
        local jk = jp .. id
        if redis.call('GETRANGE', jk, 1, 1) == 'x' then jobs, bytes = jobs + 1, bytes + redis.call('STRLEN', jk) end
      end
    end
  else
    ready(es)
  end
end
local cur = usage_of(KEYS[6], jp)
-- The blocked set is read whole (and sorted) by each chunk that reads its
-- groups: a queue with more than 1,000 blocked groups is not recounted in
-- chunks, as one with gp..'a'.
local old = redis.call('EXISTS', gp .. 'a')
if redis.call('SCARD', gp .. 'b') > 1000 then old = 1 end
return {read, jobs, bytes, redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('LLEN', KEYS[4]), redis.call('ZCARD', lk), cur[1], cur[2], old,
  tonumber(redis.call('HGET', KEYS[7], 'gn')) or 0, redis.call('LLEN', gp .. 'r'), redis.call('SCARD', gp .. 'b'),
  gi, sub, off, gdone}
`)

// recountApplyScript ends a chunked recount: when the queue's counted
// jobs and bytes are still those the first chunk read (ARGV[1], ARGV[2]),
// it corrects the queue's fields and its namespace's by the difference
// with the jobs and bytes the chunks found (ARGV[3], ARGV[4]), as
// recountScript does; otherwise a script changed the count meanwhile (a
// delete that leaves an entry behind changes no structure) and it writes
// nothing. It runs in the MULTI/EXEC of the recount's WATCH, so that it
// also writes nothing when a structure changed.
//
//	KEYS[1] job key prefix j/{T}ns/q/   KEYS[2] the group's usage hash
//	ARGV[1..2] jobs and bytes counted at the start   ARGV[3..4] found
//
// Returns {1 applied or 0 the count moved, jobs corrected, bytes corrected}.
var recountApplyScript = script(`
local cur = usage_of(KEYS[2], KEYS[1])
if cur[1] ~= tonumber(ARGV[1]) or cur[2] ~= tonumber(ARGV[2]) then return {0, 0, 0} end
local dj, db = tonumber(ARGV[3]) - cur[1], tonumber(ARGV[4]) - cur[2]
usage_set(KEYS[2], KEYS[1], dj, db)
return {1, dj, db}
`)

// resumScript sets every namespace's fields of a usage hash to the sum of
// its queues' fields there (which every script changes together with
// them: they differ only when someone wrote the hash by hand, or after
// recountScript corrected a queue), and drops the fields at 0.
//
//	KEYS[1] a group's usage hash
//
// Returns the number of fields corrected.
var resumScript = script(`
local kv = redis.call('HGETALL', KEYS[1])
local own, sum = {}, {}
for i = 1, #kv, 2 do
  local f, v = kv[i], tonumber(kv[i + 1]) or 0
  local kind, ns = string.match(f, '^(%a):([^/]*)/')
  if kind then
    local k = kind .. ':' .. ns
    sum[k] = (sum[k] or 0) + v
  else
    own[f] = v
  end
end
local fixed = 0
for f, v in pairs(own) do
  local s = sum[f] or 0
  if s ~= v then fixed = fixed + 1 end
  if s == 0 then redis.call('HDEL', KEYS[1], f) elseif s ~= v then redis.call('HSET', KEYS[1], f, s) end
end
for f, s in pairs(sum) do
  if own[f] == nil and s ~= 0 then
    redis.call('HSET', KEYS[1], f, s)
    fixed = fixed + 1
  end
end
return fixed
`)
