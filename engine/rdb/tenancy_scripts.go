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
// that a recount finds exactly what the scripts added). The hash carries
// the group's tag, so every script keeps touching one slot.

// tenancyLua is appended to luaLib (scripts.go): script() prepends the
// definitions a script uses.
const tenancyLua = `
-- ns_of returns the namespace of a queue key or job key prefix
-- (x/{T}ns/q…).
local function ns_of(k) return string.match(k, '}([^/]*)/') end
-- usage_add adds dj jobs and db bytes to namespace ns's usage in the
-- group's usage hash uk.
local function usage_add(uk, ns, dj, db)
  if dj ~= 0 then redis.call('HINCRBY', uk, 'j:' .. ns, dj) end
  if db ~= 0 then redis.call('HINCRBY', uk, 'b:' .. ns, db) end
end
-- del_job deletes job key jk and returns its length, 0 when it did not
-- exist (a job value is at least 22 bytes).
local function del_job(jk)
  local l = redis.call('STRLEN', jk)
  if l > 0 then redis.call('DEL', jk) end
  return l
end
-- over_quota says which limit ns's usage in the group (uk) would exceed
-- with dj more jobs and db more bytes, under the allowances aj and ab
-- ('' = no limit): 'max_jobs', 'max_bytes', or false.
local function over_quota(uk, ns, dj, db, aj, ab)
  if aj == '' and ab == '' then return false end
  local cur = redis.call('HMGET', uk, 'j:' .. ns, 'b:' .. ns)
  if aj ~= '' and (tonumber(cur[1]) or 0) + dj > tonumber(aj) then return 'max_jobs' end
  if ab ~= '' and (tonumber(cur[2]) or 0) + db > tonumber(ab) then return 'max_bytes' end
  return false
end
`
