package rdb

import "github.com/redis/go-redis/v9"

// The Lua of fair groups inside a queue (issue #32; doc/keys.md "Groups",
// doc/design.md "Fair groups"): the definitions every script that puts a
// job where a consumer takes it shares, so that a grouped job always goes
// to its group's list, and the weighted round robin of consume.
//
// A queue's group keys carry its tag and are named from its group prefix
// g/{T}ns/q/, which scripts build from the queue's job key prefix
// j/{T}ns/q/ (gpfx; the same slot, the documented exception of
// doc/keys.md, as job keys and histories):
//
//	gp..'r'      LIST  the rotation: the groups with ready jobs not at their
//	                   limit, the next to serve at the head
//	gp..'m'      HASH  group -> its state: the jobs it took in its current
//	                   turn (>= 0: it is in gp..'r', once), or -1: blocked
//	                   (in gp..'b'); no field: in neither
//	gp..'a'      ZSET  the rotation of the layout before (groups scored by
//	                   virtual time): read only to move its groups to
//	                   gp..'r' (grp_migrate; servers of that layout may
//	                   still add to it in a rolling upgrade)
//	gp..'b'      SET   the groups at group_max_in_flight (in-flight part)
//	gp..'i'      HASH  job ID -> group of the jobs in flight (in-flight part)
//	gp..'c'      HASH  group -> jobs in flight (in-flight part)
//	gp..'q:'..G  LIST  group G's ready list (packed entries, as q/)
//	gp..'p:'..G  ZSET  group G's priority set (as p/)
//
// The default group '' keeps the queue's own q/ and p/. Config field gn
// counts the entries of the other groups' ready lists and priority sets
// (stale ones included, as LLEN does), so that a queue's size costs one
// HGET more, not one per group: push_job and grp_flush add, consume
// subtracts what it pops from them. A queue is tracked
// once its config hash has grp = 1 (a grouped publish sets it): only then
// does consume go through the rotation. A grouped job's value has flag 4
// in its format byte (codec.go): byte 23 is the group's length L, bytes
// 24..23+L the group, then what an ungrouped value holds after its header.

// In-flight limits (the in-flight part): the consume script of a queue
// with a limit (mif or gmif in its config; grouped or not) records every
// job it hands out (inflight_take, written once per call by
// inflight_flush): gp..'i' maps the job's ID to its group, so the
// queue's jobs in flight are HLEN(gp..'i'), and gp..'c' counts each
// group's; a queue without limits records nothing. Every path where a
// job leaves flight (ACK, release, the pump's TTR expiry and its entries
// of gone jobs, the reclaimer's, CancelKey, re-publish's Replaces,
// Destroy) calls inflight_free, which costs a queue without records one
// HGET (HMGET for a batch of ACKs). Every record in gp..'i' is counted
// once in gp..'c': SetQueueConfig fills both for the jobs already out
// when a queue gets its first limit (recordInFlightScript) and deletes
// both when it loses its last (setLimitsScript), so a free never finds a
// count without its record.
//
// Limits, from the config hash: mif (max_in_flight of this physical
// queue: a shard's part of the queue's) and gmif (group_max_in_flight). A
// tracked queue with HLEN(gp..'i') >= mif gives nothing; a group with
// gp..'c'[G] >= gmif leaves the rotation gp..'r' for the blocked set
// gp..'b' and comes back when a slot of it frees, which wakes the
// queue's waiting consumers.

// groupsLua is appended to luaLib (scripts.go): script() prepends the
// definitions a script uses.
const groupsLua = `
-- gpfx is the group prefix g/{T}ns/q/ of the queue whose job key prefix
-- is jp (j/{T}ns/q/).
local function gpfx(jp) return 'g' .. string.sub(jp, 2) end
-- jprefix is the job key prefix of job key jk of job id.
local function jprefix(jk, id) return string.sub(jk, 1, #jk - #id) end
-- val_group is the group of job value v ('' = the default group): format
-- flag 4 (formats 5 and 6) says the group follows the header.
local function val_group(v)
  if string.byte(v, 1) < 4 then return '' end
  return string.sub(v, 24, 23 + string.byte(v, 23))
end
-- job_group is the group of the job at key jk whose header (at least its
-- first byte) is h: one GETRANGE more for a grouped job, none otherwise.
local function job_group(jk, h)
  if string.byte(h, 1) < 4 then return '' end
  local s = redis.call('GETRANGE', jk, 22, 86)
  return string.sub(s, 2, 1 + string.byte(s, 1))
end
-- The rotation (doc/design.md "Fair groups") is the list gp..'r' of the
-- groups to serve, the next at the head: consume moves the head to the
-- tail (O(1), whatever the number of groups: rot_next) and pops a job of
-- that group; a group of weight w (> 1) goes back to the head until it
-- took w jobs in its turn (counted in gp..'m'). gp..'m' says whether a
-- group is in the rotation (>= 0) or blocked (-1), so that a group is in
-- the list at most once.
--
-- grp_join puts group g at the tail of the rotation of gp, unless it is
-- there already or blocked: the groups that become non-empty are served
-- in the order they did, each within one round of the groups already
-- waiting, and a group that was idle gets no credit for it.
local function grp_join(gp, g)
  if redis.call('HSETNX', gp .. 'm', g, 0) == 1 then redis.call('RPUSH', gp .. 'r', g) end
end
-- grp_unblock puts group g, just taken out of the blocked set gp..'b',
-- back into the rotation (at its tail, as grp_join), unless it is in it
-- already (a server of the layout before blocked it without taking it
-- out: grp_migrate).
local function grp_unblock(gp, g)
  local st = redis.call('HGET', gp .. 'm', g)
  if st and st ~= '-1' then return end
  redis.call('HSET', gp .. 'm', g, 0)
  redis.call('RPUSH', gp .. 'r', g)
end
-- rot_new is the rotation rk as one consume call that may take room
-- jobs moves it. A call of up to rotDirect jobs moves the list with one
-- command a step (LMOVE, RPOP), as cheap for it as anything else. A
-- larger call reads the head of the list as it needs it (LRANGE, chunk
-- groups at a time: the jobs it may take, and one more), moves the
-- groups in Lua, and rot_save writes the result with one LTRIM and one
-- RPUSH (one LMOVE when it moved one group), where an LMOVE a step would
-- leave the same list (scripts are atomic; nothing else writes rk while
-- the call moves it). The stored list's first pos entries left its head
-- (buf holds its first read entries; eof once it was read to its end);
-- tail[th..] went to its tail, in order; front (a stack, its last entry
-- the head) went back to its head.
local rotDirect = 3
local function rot_new(rk, room)
  return {rk = rk, direct = room <= rotDirect, chunk = math.max(room, 1) + 1, buf = {}, read = 0, pos = 0, eof = false,
    tail = {}, th = 1, front = {}}
end
-- rot_next moves the head group of rotation r to its tail and returns it
-- (LMOVE rk rk LEFT RIGHT), or nil when the rotation is empty.
local function rot_next(r)
  if r.direct then
    local g = redis.call('LMOVE', r.rk, r.rk, 'LEFT', 'RIGHT')
    if not g then return nil end
    return g
  end
  local g
  local f = r.front
  if #f > 0 then
    g = f[#f]
    f[#f] = nil
  else
    if r.pos == r.read and not r.eof then
      local more = redis.call('LRANGE', r.rk, r.read, r.read + r.chunk - 1)
      for i = 1, #more do r.buf[r.read + i] = more[i] end
      r.read = r.read + #more
      if #more < r.chunk then r.eof = true end
    end
    if r.pos < r.read then
      r.pos = r.pos + 1
      g = r.buf[r.pos]
    elseif r.th <= #r.tail then
      -- Read to its end: the groups moved to the tail come round again.
      g = r.tail[r.th]
      r.th = r.th + 1
    else
      return nil
    end
  end
  r.tail[#r.tail + 1] = g
  return g
end
-- rot_drop takes out of rotation r the group rot_next just moved to its
-- tail (RPOP rk).
local function rot_drop(r)
  if r.direct then
    redis.call('RPOP', r.rk)
  else
    r.tail[#r.tail] = nil
  end
end
-- rot_back moves the group rot_next just moved to the tail of rotation r
-- back to its head (LMOVE rk rk RIGHT LEFT): it is the next again.
local function rot_back(r)
  if r.direct then
    redis.call('LMOVE', r.rk, r.rk, 'RIGHT', 'LEFT')
    return
  end
  r.front[#r.front + 1] = r.tail[#r.tail]
  r.tail[#r.tail] = nil
end
-- rot_save writes what the call did to rotation r: its first pos groups
-- off the head, tail[th..] onto the tail, front back onto the head.
local function rot_save(r)
  if r.direct then return end
  local n = #r.tail - r.th + 1
  if r.pos == 1 and n == 1 and #r.front == 0 and r.tail[r.th] == r.buf[1] then
    redis.call('LMOVE', r.rk, r.rk, 'LEFT', 'RIGHT')
    return
  end
  if r.pos > 0 then redis.call('LTRIM', r.rk, r.pos, -1) end
  for i = r.th, #r.tail, 512 do redis.call('RPUSH', r.rk, unpack(r.tail, i, math.min(i + 511, #r.tail))) end
  for i = 1, #r.front, 512 do redis.call('LPUSH', r.rk, unpack(r.front, i, math.min(i + 511, #r.front))) end
end
-- grp_leave takes group g, which consume just moved to the tail of the
-- rotation r (rot_new), out of it: its lists are empty (blocked false)
-- or it is at its group_max_in_flight (blocked true: into gp..'b').
local function grp_leave(gp, r, g, blocked)
  rot_drop(r)
  if blocked then
    redis.call('HSET', gp .. 'm', g, -1)
    redis.call('SADD', gp .. 'b', g)
  else
    redis.call('HDEL', gp .. 'm', g)
  end
end
-- grp_migrate moves up to 100 groups of the rotation of the layout before
-- (the sorted set gp..'a', lowest virtual time first) to the tail of the
-- rotation gp..'r', when gp..'a' exists: servers of that layout join
-- groups there until the last of them is gone (a rolling upgrade). A
-- group in gp..'r' already stays where it is; one blocked (-1) stays
-- blocked unless a server of the layout before unblocked it (no longer in
-- gp..'b').
local function grp_migrate(gp)
  if redis.call('EXISTS', gp .. 'a') == 0 then return end
  local p = redis.call('ZPOPMIN', gp .. 'a', 100)
  for i = 1, #p, 2 do
    local g = p[i]
    local st = redis.call('HGET', gp .. 'm', g)
    if not st or (st == '-1' and redis.call('SISMEMBER', gp .. 'b', g) == 0) then
      redis.call('HSET', gp .. 'm', g, 0)
      redis.call('RPUSH', gp .. 'r', g)
    end
  end
end
-- grp_all returns the groups of the queue of group prefix gp whose lists
-- may hold ready jobs, each once, the default group '' left out (its lists
-- are the queue's own): every group with ready jobs is in the rotation
-- gp..'r', in the rotation of the layout before gp..'a' (until
-- grp_migrate moved it) or blocked in gp..'b'. The whole of them: for a
-- queue read whole (recountScript).
local function grp_all(gp)
  local out, seen = {}, {[''] = true}
  local function add(g)
    if not seen[g] then
      seen[g] = true
      out[#out + 1] = g
    end
  end
  for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, -1)) do add(g) end
  for _, g in ipairs(redis.call('ZRANGE', gp .. 'a', 0, -1)) do add(g) end
  for _, g in ipairs(redis.call('SMEMBERS', gp .. 'b')) do add(g) end
  return out
end
-- push_job puts a job made ready at the tail of its group (g, '' = the
-- default group: the queue's ready list qk and priority set pk; else the
-- group's own under prefix gp, and the group joins the rotation).
local function push_job(qk, pk, ck, gp, g, prio, tries, id)
  if g == '' then
    push_ready(qk, pk, ck, prio, tries, id)
  else
    push_ready(gp .. 'q:' .. g, gp .. 'p:' .. g, ck, prio, tries, id)
    redis.call('HINCRBY', ck, 'gn', 1)
    grp_join(gp, g)
  end
end
-- grp_collect adds ready entry e of group g (priority 0) to the batch gs
-- that grp_flush pushes: one LPUSH and one grp_join per group of a
-- publish rather than per job.
local function grp_collect(gs, g, e)
  local l = gs[g]
  if not l then
    l = {}
    gs[g] = l
    gs[#gs + 1] = g
  end
  l[#l + 1] = e
end
-- grp_flush pushes the entries grp_collect gathered to their groups'
-- ready lists under prefix gp, in order, and puts the groups into the
-- rotation.
local function grp_flush(gp, ck, gs)
  local n = 0
  for _, g in ipairs(gs) do
    local l = gs[g]
    for i = 1, #l, 256 do redis.call('LPUSH', gp .. 'q:' .. g, unpack(l, i, math.min(i + 255, #l))) end
    n = n + #l
    grp_join(gp, g)
  end
  if n > 0 then redis.call('HINCRBY', ck, 'gn', n) end
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
-- inflight_new is the in-flight record of one consume call on a queue
-- with a limit (group key prefix gp, group_max_in_flight gmif, 0 =
-- none): inflight_reserve and inflight_take gather what the call takes,
-- inflight_flush writes it, so that a call of n jobs over k groups costs
-- one HSET of the in-flight hash, and for the counts one HMGET and one
-- HSET (one HINCRBY for one group) rather than n and k commands. base
-- holds the counts read (group -> its count before the call), pend the
-- call's change of each count, app the part of it already written
-- (inflight_reserve's HINCRBY), gs the groups changed, in order.
local function inflight_new(gp, gmif)
  return {gp = gp, gmif = gmif, base = {}, pend = {}, app = {}, gs = {}, rec = {}}
end
-- inflight_pend adds d to group g's count change.
local function inflight_pend(t, g, d)
  local p = t.pend[g]
  if not p then t.gs[#t.gs + 1] = g p = 0 end
  t.pend[g] = p + d
end
-- inflight_read reads the counts of groups gs (a table, at most 512)
-- into t.base with one HMGET.
local function inflight_read(t, gs)
  local vs = redis.call('HMGET', t.gp .. 'c', unpack(gs))
  for i = 1, #gs do t.base[gs[i]] = tonumber(vs[i]) or 0 end
end
-- inflight_reserve counts one more job of group g in flight, under the
-- group_max_in_flight t.gmif (> 0), before consume pops it: the group's
-- count after, or false (count unchanged) when the group is at its limit
-- (a limit lowered since its last job). A group's count is read once per
-- call, at its first reserve: with one HMGET of the counts of the groups
-- the call read from rotation r (rot_new) and has not served yet (those
-- it is about to serve, at most 511 more), or, when there are none, with
-- the HINCRBY that reserves its slot. The call counts its other changes
-- in t until inflight_flush. inflight_unreserve undoes one when the pop
-- gives no job.
local function inflight_reserve(t, g, r)
  if t.base[g] == nil then
    if r.read > r.pos then
      local gs = {g}
      for i = r.pos + 1, r.read do
        local h = r.buf[i]
        if #gs >= 512 then break end
        if t.base[h] == nil and h ~= g then gs[#gs + 1] = h end
      end
      inflight_read(t, gs)
    else
      local c = redis.call('HINCRBY', t.gp .. 'c', g, 1)
      t.base[g] = c - 1
      t.app[g] = 1
      if not t.pend[g] then t.gs[#t.gs + 1] = g t.pend[g] = 0 end
    end
  end
  local c = t.base[g] + (t.pend[g] or 0)
  if c >= t.gmif then return false end
  inflight_pend(t, g, 1)
  return c + 1
end
local function inflight_unreserve(t, g) inflight_pend(t, g, -1) end
-- inflight_take records job id of group g in flight (gp..'i'; its
-- group's count too when the queue has no group_max_in_flight, else
-- inflight_reserve counted it).
local function inflight_take(t, id, g)
  t.rec[#t.rec + 1] = id
  t.rec[#t.rec + 1] = g
  if t.gmif <= 0 then inflight_pend(t, g, 1) end
end
-- inflight_flush writes what inflight_take and inflight_reserve
-- gathered: one HSET of the jobs; for the counts, one HINCRBY when one
-- group's changed, else one HMGET of those the call did not read, one
-- HSET of the new counts and one HDEL of those back at 0 (the same as
-- one HINCRBY each: the script is atomic).
local function inflight_flush(t)
  for i = 1, #t.rec, 512 do redis.call('HSET', t.gp .. 'i', unpack(t.rec, i, math.min(i + 511, #t.rec))) end
  local ch, need = {}, {}
  for _, g in ipairs(t.gs) do
    if t.pend[g] ~= (t.app[g] or 0) then
      ch[#ch + 1] = g
      if t.base[g] == nil then need[#need + 1] = g end
    end
  end
  if #ch == 0 then return end
  if #ch == 1 then
    local g = ch[1]
    if redis.call('HINCRBY', t.gp .. 'c', g, t.pend[g] - (t.app[g] or 0)) <= 0 then redis.call('HDEL', t.gp .. 'c', g) end
    return
  end
  for i = 1, #need, 512 do inflight_read(t, {unpack(need, i, math.min(i + 511, #need))}) end
  local set, zero = {}, {}
  for _, g in ipairs(ch) do
    local v = t.base[g] + t.pend[g]
    if v > 0 then
      set[#set + 1] = g
      set[#set + 1] = v
    else
      zero[#zero + 1] = g
    end
  end
  for i = 1, #set, 512 do redis.call('HSET', t.gp .. 'c', unpack(set, i, math.min(i + 511, #set))) end
  for i = 1, #zero, 512 do redis.call('HDEL', t.gp .. 'c', unpack(zero, i, math.min(i + 511, #zero))) end
end
-- inflight_block takes group g, which consume just moved to the tail of
-- the rotation r, out of it while it is at its group_max_in_flight:
-- inflight_free puts it back.
local function inflight_block(gp, r, g) grp_leave(gp, r, g, true) end
-- inflight_cfg reads, once per script, what freeing slots needs of config
-- hash ck: mif (max_in_flight, 0 = none), gmif (group_max_in_flight, 0 =
-- none), unb (set while SetQueueConfig's unblockScript has not yet
-- emptied the blocked set after a limit change) and grp (the queue
-- serves through the rotation: a group that leaves the blocked set joins
-- it; a queue without groups only blocks its default group).
local function inflight_cfg(ck)
  local c = redis.call('HMGET', ck, 'mif', 'gmif', 'unb', 'grp')
  return {mif = tonumber(c[1]) or 0, gmif = tonumber(c[2]) or 0, unb = c[3] == '1', grp = c[4] == '1'}
end
-- inflight_unblocked is 1 when freeing k slots of group g, whose count
-- is c after them, in the queue of group key prefix gp and limits cfg
-- (inflight_cfg), took the group out of the blocked set (a waiter may get
-- its job; the group is back in the rotation), else 0. A group is
-- blocked only at its limit (consume) and takes no job while blocked, so
-- only a free whose count was at least gmif can take it below its limit:
-- the others skip the SREM (all of them when there is no group limit:
-- nothing is blocked), unless the group limit changed since (cfg.unb: the
-- set may hold groups blocked under the old one until unblockScript
-- empties it).
local function inflight_unblocked(gp, cfg, g, c, k)
  if not cfg.unb and (cfg.gmif <= 0 or c + k < cfg.gmif) then return 0 end
  if redis.call('SREM', gp .. 'b', g) == 1 then
    if cfg.grp then grp_unblock(gp, g) end
    return 1
  end
  return 0
end
-- inflight_drop frees k slots of group g in the queue of group key
-- prefix gp and limits cfg, whose jobs the caller removed from gp..'i',
-- adds g to zero when its count came back to 0 (the caller deletes
-- those), and returns inflight_unblocked's answer.
local function inflight_drop(gp, cfg, g, k, zero)
  local c = redis.call('HINCRBY', gp .. 'c', g, -k)
  if c <= 0 then zero[#zero + 1] = g end
  return inflight_unblocked(gp, cfg, g, c, k)
end
-- inflight_room_freed is how many of a queue's max_in_flight slots the
-- n slots just freed made available (one HLEN after them all): waiters
-- to wake. 0 when the queue has no max_in_flight or is still at or above
-- it (a limit lowered since).
local function inflight_room_freed(gp, cfg, n)
  if cfg.mif <= 0 or n == 0 then return 0 end
  local l = redis.call('HLEN', gp .. 'i')
  local r = math.max(cfg.mif - l, 0) - math.max(cfg.mif - l - n, 0)
  if r < 0 then return 0 end
  return r
end
-- inflight_free frees the slot of job id of the queue whose group key
-- prefix is gp and config hash ck, if the job was in flight there (for
-- a queue without limits: one HGET, nothing else). It returns how many
-- consumers waiting on the queue may now get a job (the job's group was
-- blocked at its limit, or the queue was at its max_in_flight): the
-- caller publishes on the queue's ready channel (inflight_wake).
local function inflight_free(gp, ck, id)
  local g = redis.call('HGET', gp .. 'i', id)
  if not g then return 0 end
  local cfg = inflight_cfg(ck)
  redis.call('HDEL', gp .. 'i', id)
  local zero = {}
  local wake = inflight_drop(gp, cfg, g, 1, zero)
  if #zero > 0 then redis.call('HDEL', gp .. 'c', g) end
  return wake + inflight_room_freed(gp, cfg, 1)
end
-- inflight_free_many is inflight_free for the jobs ids (a table) of one
-- queue: one HMGET for them all (a queue without limits' whole cost),
-- then one HDEL of the records; for the counts, one HINCRBY when the
-- jobs are of one group, else one HMGET of the groups' counts, one HSET
-- of those still above 0 (the same as one HINCRBY each: the script is
-- atomic); one HDEL of the counts back to 0, one read of the config and
-- one HLEN for the batch, and the number of waiters to wake.
local function inflight_free_many(gp, ck, ids)
  local gs = redis.call('HMGET', gp .. 'i', unpack(ids))
  local del, per, order = {}, {}, {}
  for i = 1, #ids do
    local g = gs[i]
    if g then
      del[#del + 1] = ids[i]
      if not per[g] then
        per[g] = 0
        order[#order + 1] = g
      end
      per[g] = per[g] + 1
    end
  end
  if #del == 0 then return 0 end
  local cfg = inflight_cfg(ck)
  redis.call('HDEL', gp .. 'i', unpack(del))
  local wake, zero = 0, {}
  if #order == 1 then
    wake = inflight_drop(gp, cfg, order[1], per[order[1]], zero)
  else
    local cs = redis.call('HMGET', gp .. 'c', unpack(order))
    local set = {}
    for i, g in ipairs(order) do
      local k = per[g]
      local c = (tonumber(cs[i]) or 0) - k
      if c > 0 then
        set[#set + 1] = g
        set[#set + 1] = c
      else
        zero[#zero + 1] = g
      end
      wake = wake + inflight_unblocked(gp, cfg, g, c, k)
    end
    if #set > 0 then redis.call('HSET', gp .. 'c', unpack(set)) end
  end
  if #zero > 0 then redis.call('HDEL', gp .. 'c', unpack(zero)) end
  return wake + inflight_room_freed(gp, cfg, #del)
end
-- inflight_wake wakes n waiters of a queue (command pub on its ready
-- channel chan) after slots freed.
local function inflight_wake(n, pub, chan)
  if n > 0 then redis.call(pub, chan, n) end
end
`

// setLimitsScript writes a physical queue's limits and group weights to
// its config hash in one step, the weights replacing the ones it had. A
// queue with a limit (mif or gmif) records its jobs in flight; one whose
// last limit this removes stops, and its records (gp..'i', gp..'c') go at
// once, in the same step: no consume records a job from then on, and a
// free then finds none to free, so no count can go below 0. The weights
// do not mark the queue tracked (grp): they matter only to a queue whose
// grouped publishes do.
//
//	KEYS[1] config c/{T}ns/q   KEYS[2] gp..'i'   KEYS[3] gp..'c'
//	ARGV[1] mif (this physical queue's part of max_in_flight; 0 = none)
//	ARGV[2] mifq (the logical queue's max_in_flight, as set; 0 = none)
//	ARGV[3] gmif (group_max_in_flight; 0 = none)
//	ARGV[4…] pairs group, weight
//
// Returns 2 when this gave the queue its first limit (the caller records
// the jobs already in flight: recordInFlight), else 1.
var setLimitsScript = redis.NewScript(`
local ck = KEYS[1]
local old = {}
for _, f in ipairs(redis.call('HKEYS', ck)) do
  if string.sub(f, 1, 2) == 'w:' then old[#old + 1] = f end
end
if #old > 0 then redis.call('HDEL', ck, unpack(old)) end
local was = redis.call('HMGET', ck, 'mif', 'gmif')
local had = (tonumber(was[1]) or 0) > 0 or (tonumber(was[2]) or 0) > 0
-- unb: the blocked set may hold groups blocked under another
-- group_max_in_flight until unblockScript empties it (inflight_drop then
-- looks at the set on every free).
if (was[2] or '0') ~= ARGV[3] then redis.call('HSET', ck, 'unb', '1') end
local names = {'mif', 'mifq', 'gmif'}
for i = 1, 3 do
  if ARGV[i] ~= '0' then
    redis.call('HSET', ck, names[i], ARGV[i])
  else
    redis.call('HDEL', ck, names[i])
  end
end
for i = 4, #ARGV - 1, 2 do
  redis.call('HSET', ck, 'w:' .. ARGV[i], ARGV[i + 1])
end
-- ws: the queue has weights (consume reads them only then).
if #ARGV >= 5 then redis.call('HSET', ck, 'ws', '1') else redis.call('HDEL', ck, 'ws') end
if ARGV[1] ~= '0' or ARGV[3] ~= '0' then
  if not had then return 2 end
elseif had then
  redis.call('DEL', KEYS[2], KEYS[3])
end
return 1
`)

// unblockScript puts up to ARGV[1] of a queue's blocked groups (gp..'b')
// back into its rotation (gp..'r'), after its group_max_in_flight changed:
// the consume script blocks again, before giving it a job, each group
// still at the new limit (consumeScript), and a group under it would
// otherwise wait for one of its jobs to leave flight. The call that
// finds the set empty clears the config's unb (setLimitsScript): every
// group blocked from then on was blocked under the limit in force.
//
//	KEYS[1] gp..'r'   KEYS[2] gp..'b'   KEYS[3] config
//	ARGV[1] most groups to move
//
// Returns how many it moved (fewer than ARGV[1] when the set is empty).
// A queue without groups (no grp) only leaves its default group's block:
// it has no rotation.
var unblockScript = script(`
local gp = string.sub(KEYS[1], 1, -2)
local gs = redis.call('SPOP', KEYS[2], tonumber(ARGV[1]))
if redis.call('HGET', KEYS[3], 'grp') == '1' then
  for _, g in ipairs(gs) do grp_unblock(gp, g) end
end
if #gs < tonumber(ARGV[1]) then redis.call('HDEL', KEYS[3], 'unb') end
return #gs
`)

// recordInFlightScript records the jobs in flight of a queue that has
// just become tracked (setLimitsScript returned 2), delivered before it
// was: a window of its timer, ordered by (score, member) from the cursor
// (score, member) the previous call returned, so that entries removed or
// added meanwhile move no other entry past the cursor. A job already
// recorded (by a consume since the queue became tracked) is left as it
// is, so a window looked at twice counts nothing twice.
//
//	KEYS[1] timer t/{T}ns/q   KEYS[2] job key prefix j/{T}ns/q/
//	ARGV[1] cursor score ('-inf' to start)   ARGV[2] cursor member ('' to start)
//	ARGV[3] most entries
//
// Returns {recorded, next score, next member}, an empty score once the
// timer was read to its end.
var recordInFlightScript = script(`
local tk, jp, lim = KEYS[1], KEYS[2], tonumber(ARGV[3])
local gp = gpfx(jp)
local ids, last, lastm = {}, ARGV[1], ARGV[2]
local sc = last
if last ~= '-inf' then
  -- The rest of the cursor's score, then the scores above it.
  local same = redis.call('ZRANGEBYSCORE', tk, last, last)
  for _, m in ipairs(same) do
    if m > lastm and #ids < lim then ids[#ids + 1] = m end
  end
end
if #ids < lim then
  local lo = '-inf'
  if last ~= '-inf' then lo = '(' .. last end
  local rest = redis.call('ZRANGEBYSCORE', tk, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, lim - #ids)
  for i = 1, #rest, 2 do
    ids[#ids + 1] = rest[i]
    sc = rest[i + 1]
  end
end
local n = 0
for _, id in ipairs(ids) do
  local jk = jp .. id
  local h = redis.call('GETRANGE', jk, 0, 21)
  if #h == 22 and string.sub(h, 2, 2) == 'f' then
    local g = job_group(jk, h)
    if redis.call('HSETNX', gp .. 'i', id, g) == 1 then
      redis.call('HINCRBY', gp .. 'c', g, 1)
      n = n + 1
    end
  end
end
if #ids < lim then return {n, '', ''} end
return {n, sc, ids[#ids]}
`)
