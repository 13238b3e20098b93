package rdb

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
//	gp..'a'      ZSET  the groups in the rotation (ready jobs, not at their
//	                   limit), score = the group's virtual time
//	gp..'b'      SET   the groups at group_max_in_flight (in-flight part)
//	gp..'i'      HASH  job ID -> group of the jobs in flight (in-flight part)
//	gp..'c'      HASH  group -> jobs in flight (in-flight part)
//	gp..'q:'..G  LIST  group G's ready list (packed entries, as q/)
//	gp..'p:'..G  ZSET  group G's priority set (as p/)
//
// The default group '' keeps the queue's own q/ and p/. A queue is tracked
// once its config hash has grp = 1 (a grouped publish sets it): only then
// does consume go through the rotation. A grouped job's value has flag 4
// in its format byte (codec.go): byte 23 is the group's length L, bytes
// 24..23+L the group, then what an ungrouped value holds after its header.

// groupsLua is appended to luaLib (scripts.go): script() prepends the
// definitions a script uses.
const groupsLua = `
-- gpfx is the group prefix g/{T}ns/q/ of the queue whose job key prefix
-- is jp (j/{T}ns/q/).
local function gpfx(jp) return 'g' .. string.sub(jp, 2) end
-- jprefix is the job key prefix of job key jk of job id.
local function jprefix(jk, id) return string.sub(jk, 1, #jk - #id) end
-- fnum formats a group's virtual time (a fraction) for ZADD.
local function fnum(x) return string.format('%.17g', x) end
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
-- grp_min is the lowest virtual time in the rotation gp..'a' (0 when it
-- is empty): a group entering the rotation starts there, with no credit
-- for the time it was away.
local function grp_min(gp)
  local m = redis.call('ZRANGE', gp .. 'a', 0, 0, 'WITHSCORES')
  if #m == 0 then return 0 end
  return tonumber(m[2])
end
-- grp_join puts group g into the rotation of gp at the lowest virtual
-- time, unless it is there already or blocked (gp..'b').
local function grp_join(gp, g)
  if redis.call('ZSCORE', gp .. 'a', g) then return end
  if redis.call('SISMEMBER', gp .. 'b', g) == 1 then return end
  redis.call('ZADD', gp .. 'a', fnum(grp_min(gp)), g)
end
-- push_job puts a job made ready at the tail of its group (g, '' = the
-- default group: the queue's ready list qk and priority set pk; else the
-- group's own under prefix gp, and the group joins the rotation).
local function push_job(qk, pk, ck, gp, g, prio, tries, id)
  if g == '' then
    push_ready(qk, pk, ck, prio, tries, id)
  else
    push_ready(gp .. 'q:' .. g, gp .. 'p:' .. g, ck, prio, tries, id)
    grp_join(gp, g)
  end
end
`
