package rdb

import (
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every Lua script of the engine. Each is one atomic step. Times are
// milliseconds, computed by the server from its injected clock and passed in
// ARGV; scripts never read the Redis clock.
//
// Job values start with a 22-byte header (doc/keys.md) that records where
// the job is; the payload follows:
//
//	1      format: 1 the payload follows, 2 a trace context then the
//	       payload (codec.go); 5 and 6 the same with flag 4, the job's
//	       group first (its length, then its name: groups_scripts.go);
//	       set at publish, never rewritten (scripts write the rest of the
//	       header at offset 1)
//	2      state: r ready, d delayed, f in flight, x dead
//	3-4    tries left, uint16 little endian
//	5-6    deliveries so far, uint16
//	7      priority 0..255
//	8      dead reason: 0, 1 TTR expired, 2 nacked, 3 webhook failed
//	9-14   time (ms, uint48): due time (delayed, in flight) or death time
//	15-22  nonce of the current delivery (in flight): the receipt; bytes
//	       19-22 hold the delivery's start (ms mod 2^32, consumeScript)
//
// Ready lists hold lmstfy's packed entries (tries:u16, len:u16, id); timers
// hold job IDs, so that an ACK removes a job's timer entry at once. Packed
// values are decoded with string.byte/string.sub, so that every script also
// runs on miniredis, which has no struct library.
//
// Every key a script touches comes in KEYS, built in keys.go, and all the
// keys of one call share a slot group's hash tag, so that on Redis Cluster
// every call touches one slot. The only names a script completes are job
// body keys: a queue's prefix j/{T}ns/q/ (in KEYS) and an ID read from
// one of that queue's structures, and their attempt histories (hkey: the
// job key with 'a' for 'j', in the same slot; doc/keys.md). Pub/Sub messages go out with the command
// the caller names (PUBLISH, or SPUBLISH on a cluster, so that they stay
// on the slot's node), on channels of the same tag.

// luaLib holds the definitions scripts share; script prepends to each the
// ones it uses.
const luaLib = `
local function u16(n) return string.char(n % 256, math.floor(n / 256) % 256) end
local function r16(s, i) return string.byte(s, i) + string.byte(s, i + 1) * 256 end
local function u32(n) return u16(n % 65536) .. u16(math.floor(n / 65536) % 65536) end
local function r32(s, i) return r16(s, i) + r16(s, i + 2) * 65536 end
local function u48(n)
  local t = {}
  for i = 1, 6 do t[i] = n % 256; n = math.floor(n / 256) end
  return string.char(t[1], t[2], t[3], t[4], t[5], t[6])
end
local function r48(s, i)
  local n = 0
  for k = i + 5, i, -1 do n = n * 256 + string.byte(s, k) end
  return n
end
local NONCE0 = '\0\0\0\0\0\0\0\0'
-- hdr is the header from byte 2 on: scripts write it at offset 1, so that
-- the format byte (1: payload, 2: trace context then payload) stays.
local function hdr(state, tries, deliv, prio, reason, t, nonce)
  return state .. u16(tries) .. u16(deliv) .. string.char(prio, reason) .. u48(t) .. nonce
end
-- entry packs a ready list entry: tries and the ID's length (u16 each),
-- then the ID; in one string.char, as the pump makes one per job.
local function entry(tries, id)
  local n = #id
  return string.char(tries % 256, (tries - tries % 256) / 256 % 256, n % 256, (n - n % 256) / 256 % 256) .. id
end
local function eid(e) return string.sub(e, 5, 4 + r16(e, 3)) end
local function num(n) return string.format('%.0f', n) end
-- ready_heads returns the IDs of the live jobs at the consume ends of a
-- queue: the first of the last 16 entries of the ready list qk (the RPOP
-- end) and of the first 16 members of the priority set pk whose body
-- under prefix jp exists ('' when none does). Entries of gone jobs and
-- tombstones wait there for the reclaimer; looking at 16 bounds the cost.
local function ready_heads(qk, pk, jp)
  local oldest, first = '', ''
  local es = redis.call('LRANGE', qk, -16, -1)
  for j = #es, 1, -1 do
    local id = eid(es[j])
    if #id > 0 and redis.call('EXISTS', jp .. id) == 1 then oldest = id break end
  end
  local ps = redis.call('ZRANGE', pk, 0, 15)
  for _, e in ipairs(ps) do
    local id = eid(e)
    if #id > 0 and redis.call('EXISTS', jp .. id) == 1 then first = id break end
  end
  return oldest, first
end
-- push_ready puts a job at the tail of its queue: the ready list, or the
-- priority set when its priority is above 0 (FIFO among equals by a
-- per-queue sequence).
local function push_ready(qk, pk, ck, prio, tries, id)
  if prio > 0 then
    local seq = redis.call('HINCRBY', ck, 'seq', 1) % 1099511627776
    redis.call('ZADD', pk, num((255 - prio) * 1099511627776 + seq), entry(tries, id))
  else
    redis.call('LPUSH', qk, entry(tries, id))
  end
end
-- backoff is the delay (ms) before the retry after delivery n under a policy
-- in its Lua form: f:MS, l:MS,MS,… or e:BASE:FACTOR:MAX:JITTER.
local function backoff(spec, n, rnd)
  if not spec or spec == '' then return 0 end
  local kind = string.sub(spec, 1, 1)
  if kind == 'f' then return tonumber(string.sub(spec, 3)) end
  if kind == 'l' then
    local i, last = 0, 0
    for v in string.gmatch(string.sub(spec, 3), '%d+') do
      i = i + 1
      last = tonumber(v)
      if i >= n then return last end
    end
    return last
  end
  if kind == 'e' then
    local base, factor, cap, jit = string.match(spec, '^e:(%d+):([%d%.]+):(%d+):([%d%.]+)$')
    if not base then return 0 end
    local d = tonumber(base) * tonumber(factor) ^ (n - 1)
    if d > tonumber(cap) then d = tonumber(cap) end
    return math.floor(d * (1 - tonumber(jit) * rnd))
  end
  return 0
end
-- lower_index records that queue member has a timer entry due at due in
-- its group's timer index idx; when that makes the group's earliest due
-- time earlier, it wakes the pumps (command pub, PUBLISH or SPUBLISH, on
-- the group's wake-up channel chan) and returns due.
local function lower_index(idx, member, due, chan, pub)
  local cur = redis.call('ZSCORE', idx, member)
  if not cur or tonumber(cur) > due then
    local first = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
    redis.call('ZADD', idx, num(due), member)
    if #first == 0 or tonumber(first[2]) > due then
      redis.call(pub, chan, num(due))
      return due
    end
  end
  return 0
end
-- hkey is the attempt history key of the job whose key is jk: the job key
-- with 'a' for 'j' (a/{T}ns/q/ID), in the job's slot group.
local function hkey(jk) return 'a' .. string.sub(jk, 2) end
-- hist_open records the start of delivery deliv (at now, ms text, to
-- worker) at the head of the job's history, keeps its last 16 entries and
-- gives it the job's TTL pttl (ms; none when the job has none) when this
-- entry created it. An entry is outcome|delivery|start|end|worker|error
-- (doc/keys.md). A history that was there already keeps its TTL: the
-- job's, set with the job's by every script that sets either, or longer
-- when it is the witness of a job in its queue's expiry ledger
-- (reconcile_ledger.go), which must outlive the job.
local function hist_open(jk, deliv, now, worker, pttl)
  local hk = hkey(jk)
  -- pcall: a full Redis (OOM) refuses the entry, not the consume.
  local n = redis.pcall('LPUSH', hk, 'f|' .. deliv .. '|' .. now .. '|0|' .. worker .. '|')
  if type(n) ~= 'number' then return end
  if n > 16 then redis.call('LTRIM', hk, 0, 15) end
  if n == 1 and pttl > 0 then redis.call('PEXPIRE', hk, pttl) end
end
-- The history is best effort where Redis is full: its writes go through
-- pcall, so that a full pool (OOM) loses an entry, never the consume,
-- release or TTR expiry that writes it (TestFullPoolDrains).
-- hist_close ends the delivery of the in-flight job whose key is jk and
-- header h in its history with outcome (one letter: r released, n nacked,
-- t TTR expired, w webhook failed) at t (ms) and the error text err. A
-- named worker's delivery has an open entry, rewritten; any other gets
-- its entry now, its start read from the receipt (consumeScript's comment):
-- the latest time before t (a minute of clock skew allowed) whose low 32
-- bits the receipt holds.
local function hist_close(jk, h, outcome, t, err)
  local hk = hkey(jk)
  local deliv = r16(h, 5)
  local pre = 'f|' .. deliv .. '|'
  local top = redis.call('LINDEX', hk, 0)
  if top and string.sub(top, 1, #pre) == pre then
    local start, worker = string.match(top, '^f|%d+|(%d+)|%d+|([^|]*)|')
    redis.pcall('LSET', hk, 0, outcome .. '|' .. deliv .. '|' .. (start or '0') .. '|' .. num(t) .. '|' .. (worker or '') .. '|' .. err)
  else
    -- A minute of slack for another server's clock ahead of this one.
    local start = math.min(t, t + 60000 - (t + 60000 - r32(h, 19)) % 4294967296)
    local n = redis.pcall('LPUSH', hk, outcome .. '|' .. deliv .. '|' .. num(start) .. '|' .. num(t) .. '||' .. err)
    if type(n) ~= 'number' then return end
    if n > 16 then redis.call('LTRIM', hk, 0, 15) end
    -- As hist_open: a history there already keeps its TTL (a witness).
    if n == 1 then
      local pttl = redis.call('PTTL', jk)
      if pttl > 0 then redis.call('PEXPIRE', hk, pttl) end
    end
  end
end
-- last_error is the error text of the newest entry of the job's history
-- that has one, or ''.
local function last_error(jk)
  for _, a in ipairs(redis.call('LRANGE', hkey(jk), 0, 15)) do
    local e = string.match(a, '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$')
    if e and #e > 0 then return e end
  end
  return ''
end
-- LEDGER_GRACE is how long (ms) a witness outlives its job: ledgerGrace
-- (reconcile_ledger.go).
local LEDGER_GRACE = 600000
-- job_ttl gives the job of key jk and ID id, and its history, the TTL ttl
-- (ms; 0 or less, or nil: none), as a death and a respawn do. A job in
-- its queue's expiry ledger (g/{T}ns/q/e: reconcile_ledger.go) keeps a
-- witness: its history outlives it by LEDGER_GRACE, so that the sweep
-- can tell its expiry from a delete. One ZSCORE a job.
local function job_ttl(jk, id, ttl)
  local hk = hkey(jk)
  if ttl and ttl > 0 then
    redis.call('PEXPIRE', jk, num(ttl))
    if redis.call('ZSCORE', 'g' .. string.sub(jk, 2, #jk - #id) .. 'e', id) then ttl = ttl + LEDGER_GRACE end
    redis.call('PEXPIRE', hk, num(ttl))
  else
    redis.call('PERSIST', jk)
    redis.call('PERSIST', hk)
  end
end
-- kill moves a job to the dead letter; its value and its history lose
-- their TTL, or get the queue's dead TTL (job_ttl).
local function kill(jk, dk, id, tries, deliv, prio, reason, now, deadttl)
  redis.call('SETRANGE', jk, 1, hdr('x', tries, deliv, prio, reason, now, NONCE0))
  redis.call('LPUSH', dk, entry(1, id))
  job_ttl(jk, id, tonumber(deadttl))
end
`

// script makes a script of src and the parts of luaLib it uses. A Lua
// "local function" statement makes a closure each time the script runs, so
// the whole library would cost every call ~1.4 µs (redis-benchmark, an
// EVALSHA of luaLib alone against one of "return 1"), and most scripts use
// a few of its fourteen definitions.
func script(src string) *redis.Script { return redis.NewScript(libFor(src) + src) }

// libPart is one top-level definition of luaLib: a local function or
// constant, with the comment above it.
type libPart struct{ name, src string }

var libParts = splitLib(luaLib + tenancyLua + groupsLua)

var libDef = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)

// splitLib cuts lib into its top-level definitions, in order. A comment
// line at column 0 starts the part of the definition after it.
func splitLib(lib string) []libPart {
	var parts []libPart
	var pending strings.Builder // comment lines waiting for their definition
	for _, line := range strings.SplitAfter(lib, "\n") {
		switch m := libDef.FindStringSubmatch(line); {
		case m != nil:
			parts = append(parts, libPart{name: m[1], src: pending.String() + line})
			pending.Reset()
		case strings.HasPrefix(line, "--"):
			pending.WriteString(line)
		case len(parts) > 0:
			parts[len(parts)-1].src += line
		}
	}
	return parts
}

// libFor returns the definitions of luaLib that src uses, directly or
// through another definition, in luaLib's order (which defines every name
// before its first use).
func libFor(src string) string {
	used := make([]bool, len(libParts))
	text := src
	for changed := true; changed; {
		changed = false
		for i, p := range libParts {
			if !used[i] && usesName(text, p.name) {
				used[i], changed = true, true
				text += p.src
			}
		}
	}
	var b strings.Builder
	for i, p := range libParts {
		if used[i] {
			b.WriteString(p.src)
		}
	}
	return b.String()
}

// usesName reports whether the Lua text names name as a whole identifier.
func usesName(text, name string) bool {
	for i := 0; ; {
		k := strings.Index(text[i:], name)
		if k < 0 {
			return false
		}
		k += i
		end := k + len(name)
		if (k == 0 || !isIdent(text[k-1])) && (end == len(text) || !isIdent(text[end])) {
			return true
		}
		i = k + 1
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// publishScript stores the jobs of one queue and makes each ready or
// schedules it, in one step: either every job is written or none is.
//
//	KEYS[1]  ready list  q/{T}ns/q   KEYS[2]  timer  t/{T}ns/q
//	KEYS[3]  the group's timer index ti/{T}   KEYS[4]  priority set  p/{T}ns/q
//	KEYS[5]  queue config c/{T}ns/q
//	KEYS[6]  body key of the job a re-publish replaces (used when ARGV[4] ≠ "")
//	KEYS[7]  idempotency key u/{T}ns/q/KEY (used when ARGV[5] = "1")
//	KEYS[8]  the group's queue registry m/{T} (used when ARGV[6] = "1")
//	KEYS[9…] body keys j/{T}ns/q/ID, one per job
//	KEYS[#KEYS] the group's usage hash nu/{T} (tenancy_scripts.go)
//	ARGV[1]  index member ns/q    ARGV[2] ready channel n/{T}ns/q
//	ARGV[3]  the group's wake-up channel w/{T}   ARGV[4] ID of the replaced job, or ""
//	ARGV[5]  "1" when KEYS[7] is used
//	ARGV[6]  "1" to record the queue in the registry (its first publish
//	         through this server)
//	ARGV[7]  the publish command: PUBLISH, or SPUBLISH on a cluster
//	ARGV[8+5k…] per job k: its ready entry (packed tries and id, as the
//	         ready list holds it), value (header + payload, built by the
//	         caller), ttl (ms, 0 = forever), due (ms; 0 when ready now),
//	         priority; so a plain job made ready costs no Lua decoding
//	ARGV[#ARGV-1], ARGV[#ARGV]: the namespace's allowances of jobs and
//	         bytes in this group ('' = no limit; tenancy.go)
//
// Returns {0, made ready, new earliest due of the group or 0};
// {k} when job k's body key exists (nothing written);
// {-1, id} when the idempotency key is taken (nothing written);
// {-3, limit} when the jobs would exceed the namespace's allowance
// (nothing written).
var publishScript = script(publishSrc)

// publishSrc is publishScript's source; fireScheduleScript runs it too.
const publishSrc = `
local n = #KEYS - 9
local pub = ARGV[7]
if ARGV[5] == '1' then
  local prev = redis.call('GET', KEYS[7])
  if prev then return {-1, prev} end
end
local uk, ubytes, rlen = KEYS[#KEYS], 0, 0
for i = 1, n do ubytes = ubytes + #ARGV[8 + (i - 1) * 5 + 1] end
if ARGV[4] ~= '' then rlen = redis.call('STRLEN', KEYS[6]) end
local ujobs = n
if rlen > 0 then ujobs = n - 1 end
local over = over_quota(uk, KEYS[1], ujobs, ubytes - rlen, ARGV[#ARGV - 1], ARGV[#ARGV])
if over then return {-3, over} end
-- SET NX every job first: if one ID is taken, undo the ones written and
-- report it, so that a batch is all or nothing.
for i = 1, n do
  local b = 8 + (i - 1) * 5
  local ok
  if ARGV[b + 2] ~= '0' then
    ok = redis.call('SET', KEYS[8 + i], ARGV[b + 1], 'NX', 'PX', ARGV[b + 2])
  else
    ok = redis.call('SET', KEYS[8 + i], ARGV[b + 1], 'NX')
  end
  if not ok then
    for k = 1, i - 1 do redis.call('DEL', KEYS[8 + k]) end
    return {i}
  end
end
if ARGV[4] ~= '' then
  if rlen > 0 then redis.call('DEL', KEYS[6], hkey(KEYS[6])) end
  -- A replaced job gone with its timer entry expired in flight: the pump
  -- that would have counted it at its entry will not meet it.
  if redis.call('ZREM', KEYS[2], ARGV[4]) == 1 and rlen == 0 then
    usage_expired(uk, jprefix(KEYS[6], ARGV[4]), {ARGV[4]})
  end
  -- A replaced job in flight frees its slot (groups_scripts.go).
  inflight_wake(inflight_free(gpfx(jprefix(KEYS[6], ARGV[4])), KEYS[5], ARGV[4]), pub, ARGV[2])
end
usage_add(uk, KEYS[1], ujobs, ubytes - rlen)
if ARGV[5] == '1' then
  local id = eid(ARGV[8])
  if tonumber(ARGV[10]) > 0 then redis.call('SET', KEYS[7], id, 'PX', ARGV[10]) else redis.call('SET', KEYS[7], id) end
end
if ARGV[6] == '1' then redis.call('HSET', KEYS[8], ARGV[1], 1) end
local ready, made, mindue, gp, gready = {}, 0, nil, nil, {}
for i = 1, n do
  local b = 8 + (i - 1) * 5
  local e = ARGV[b]
  local grouped = string.byte(ARGV[b + 1], 1) >= 4
  if grouped and not gp then
    -- A grouped job makes the queue tracked (groups_scripts.go).
    gp = gpfx(jprefix(KEYS[8 + i], eid(e)))
    redis.call('HSET', KEYS[5], 'grp', '1')
  end
  if ARGV[b + 3] ~= '0' then
    local due = tonumber(ARGV[b + 3])
    redis.call('ZADD', KEYS[2], ARGV[b + 3], eid(e))
    if not mindue or due < mindue then mindue = due end
  elseif grouped then
    if ARGV[b + 4] ~= '0' then
      push_job(KEYS[1], KEYS[4], KEYS[5], gp, val_group(ARGV[b + 1]), tonumber(ARGV[b + 4]), r16(e, 1), eid(e))
    else
      grp_collect(gready, val_group(ARGV[b + 1]), e)
    end
    made = made + 1
  elseif ARGV[b + 4] ~= '0' then
    push_ready(KEYS[1], KEYS[4], KEYS[5], tonumber(ARGV[b + 4]), r16(e, 1), eid(e))
    made = made + 1
  else
    ready[#ready + 1] = e
    made = made + 1
  end
end
if #ready > 0 then redis.call('LPUSH', KEYS[1], unpack(ready)) end
if gp then grp_flush(gp, KEYS[5], gready) end
if made > 0 then redis.call(pub, ARGV[2], made) end
local earliest = 0
if mindue then earliest = lower_index(KEYS[3], ARGV[1], mindue, ARGV[3], pub) end
return {0, made, earliest}
`

// publishManyScript stores plain jobs (server-made IDs, no replaced job, no
// idempotency key) of several queues of the pool and makes each ready or
// schedules it, in one step: either every job is written or none is. It is
// publishScript for coalesced publishes across queues (coalesce.go). On a
// cluster the queues of one call are of one slot group (their publish lane
// is their group); on one Redis, of any. The jobs come grouped by queue,
// their ready entries side by side. A queue whose jobs are all ready now
// without a priority (kind "p") passes only its ready list and takes one
// LPUSH of an argument range and one PUBLISH of its job count as given: no
// Lua table, no number formatting, two arguments and one key. The others
// (kind "f") pass their timer, priority set, config and group index too.
// A kind with an "r" records the queue in its group's registry (its
// first publish through this server): one more key and the member. A kind
// with a "q" carries its namespace's allowances in its group: the jobs
// and bytes it may hold there (tenancy.go); every queue passes its group's
// usage hash and the bytes of its jobs, which its namespace's usage gains.
//
//	ARGV[1]  the publish command (PUBLISH or SPUBLISH)   ARGV[2]  m, the number of queues
//	ARGV[3]  the number of queue keys (the job keys follow them)
//	ARGV[4]  the number of arguments before the jobs' ready entries
//	ARGV[5]  "1" when a queue's kind has a "q"
//	per queue g (1..m), from ARGV[6]: kind ("p" or "f", then "r" and "q"
//	         when they apply), its number of jobs, its ready channel, the
//	         bytes of its jobs' values; then, for "f…" or "…r…", its index
//	         member ns/q; then, for "f…", its group's wake-up channel; then,
//	         for "…q", its allowances of jobs and bytes ('' = no limit)
//	per queue g, its keys: the ready list; then, for "f…", its timer,
//	         priority set, config and group's timer index; then, for
//	         "…r…", its group's registry; then its group's usage hash
//	KEYS[k0+i] body keys j/{T}ns/q/ID, one per job: the jobs of queue 1
//	         first, then those of queue 2, …
//	per job i (1..n), ARGV[e0+i]: its ready entry (packed tries and id)
//	per job i, ARGV[e0+n+4(i-1)+1..4]: value (header + payload), ttl (ms,
//	         0 = forever), due (ms; 0 when ready now), priority
//
// Returns {0, made ready, a new earliest due of a group or 0}, {i} when
// job i's body key exists, or {-3, g, limit} when queue g's jobs would
// exceed its namespace's allowance (nothing written).
var publishManyScript = script(`
local pub = ARGV[1]
local m = tonumber(ARGV[2])
local k0 = tonumber(ARGV[3])
local e0 = tonumber(ARGV[4])
local n = #KEYS - k0
local v0 = e0 + n
if ARGV[5] == '1' then
  -- The quotas first: the queues of one namespace in one group add up.
  local a, k, added = 5, 0, {}
  for g = 1, m do
    local kind, count, bytes = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 4])
    a = a + 4
    local full = string.sub(kind, 1, 1) == 'f'
    local record = string.find(kind, 'r', 2, true)
    local qk = KEYS[k + 1]
    k = k + 1
    if full or record then a = a + 1 end
    if full then a = a + 1 k = k + 4 end
    if record then k = k + 1 end
    k = k + 1
    local uk = KEYS[k]
    if string.find(kind, 'q', 2, true) then
      local key = uk .. ' ' .. ns_of(qk)
      local s = added[key] or {0, 0}
      local over = over_quota(uk, qk, s[1] + count, s[2] + bytes, ARGV[a + 1], ARGV[a + 2])
      if over then return {-3, g, over} end
      added[key] = {s[1] + count, s[2] + bytes}
      a = a + 2
    end
  end
end
for i = 1, n do
  local b = v0 + (i - 1) * 4
  local ok
  if ARGV[b + 2] ~= '0' then
    ok = redis.call('SET', KEYS[k0 + i], ARGV[b + 1], 'NX', 'PX', ARGV[b + 2])
  else
    ok = redis.call('SET', KEYS[k0 + i], ARGV[b + 1], 'NX')
  end
  if not ok then
    for k = 1, i - 1 do redis.call('DEL', KEYS[k0 + k]) end
    return {i}
  end
end
local total, earliest, last = 0, 0, 0
local a, k = 5, 0
for g = 1, m do
  local kind, count, chan, bytes = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  a = a + 4
  local full = string.sub(kind, 1, 1) == 'f'
  local record = string.find(kind, 'r', 2, true)
  local member, wake
  if full or record then a = a + 1 member = ARGV[a] end
  if full then a = a + 1 wake = ARGV[a] end
  if string.find(kind, 'q', 2, true) then a = a + 2 end
  local qk = KEYS[k + 1]
  local first = last + 1
  last = last + tonumber(count)
  if not full then
    k = k + 1
    redis.call('LPUSH', qk, unpack(ARGV, e0 + first, e0 + last))
    redis.call(pub, chan, count)
    total = total + last - first + 1
  else
    local tk, pk, ck, idx = KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
    k = k + 5
    local ready, made, mindue, gp, gready = {}, 0, nil, nil, {}
    for i = first, last do
      local b = v0 + (i - 1) * 4
      local e = ARGV[e0 + i]
      local grouped = string.byte(ARGV[b + 1], 1) >= 4
      if grouped and not gp then
        -- A grouped job makes the queue tracked (groups_scripts.go).
        gp = gpfx(jprefix(KEYS[k0 + i], eid(e)))
        redis.call('HSET', ck, 'grp', '1')
      end
      if ARGV[b + 3] ~= '0' then
        local due = tonumber(ARGV[b + 3])
        redis.call('ZADD', tk, ARGV[b + 3], eid(e))
        if not mindue or due < mindue then mindue = due end
      else
        if grouped and ARGV[b + 4] == '0' then
          grp_collect(gready, val_group(ARGV[b + 1]), e)
        elseif grouped then
          push_job(qk, pk, ck, gp, val_group(ARGV[b + 1]), tonumber(ARGV[b + 4]), r16(e, 1), eid(e))
        elseif ARGV[b + 4] ~= '0' then
          push_ready(qk, pk, ck, tonumber(ARGV[b + 4]), r16(e, 1), eid(e))
        else
          ready[#ready + 1] = e
        end
        made = made + 1
      end
    end
    if #ready > 0 then redis.call('LPUSH', qk, unpack(ready)) end
    if gp then grp_flush(gp, ck, gready) end
    if made > 0 then
      redis.call(pub, chan, made)
      total = total + made
    end
    if mindue then
      local e = lower_index(idx, member, mindue, wake, pub)
      if e > 0 and (earliest == 0 or e < earliest) then earliest = e end
    end
  end
  if record then
    k = k + 1
    redis.call('HSET', KEYS[k], member, 1)
  end
  k = k + 1
  usage_add(KEYS[k], qk, tonumber(count), tonumber(bytes))
end
return {0, total, earliest}
`)

// consumeScript takes up to count live jobs from the queues in priority
// order (per queue: its priority set, then its ready list), skipping (and
// dropping) stale entries, and makes each in flight until due with one try
// less and a fresh receipt. Paused queues are skipped. On a cluster the
// queues of one call are of one slot group (consumeFor splits a consume
// over queues of several groups into calls, in priority order).
//
//	per queue i (1..n), KEYS[6(i-1)+1..6]: ready list, timer, priority set,
//	         config, the group's timer index, job key prefix j/{T}ns/q/
//	ARGV[1] due of the deliveries: now + TTR (ms)   ARGV[2] count
//	ARGV[3] most entries to pop in all   ARGV[4] the publish command
//	ARGV[5] receipt base: a random number in [0, 2^32)
//	per queue i, ARGV[4+2i..5+2i]: index member ns/q, the group's wake-up channel
//	ARGV[6+2n] now (ms)   ARGV[7+2n] the consumer's worker name (or "")
//
// A delivery's receipt (nonce) is the base plus the job's position in the
// reply (mod 2^32), then the delivery's start (now mod 2^32 ms, read back
// by hist_close), 4 bytes each little endian: the receipts of one job's
// deliveries differ unless two start in the same millisecond with the same
// 32 random bits. A delivery to a named worker opens an entry in the job's
// attempt history (hist_open); a nameless one writes nothing more.
//
// Returns {more, earliest, popped, then per job: queue position (1-based),
// id, tries left, payload, PTTL (ms, -1 = none), deliveries, receipt,
// priority, format (header byte 1: 2 when the payload starts with a trace
// context; flag 4 when the job's group comes first)}.
// more = 1 when the pop budget ran out first, 2 when every queue's ready
// list and priority set are empty at the end, 3 when every queue is empty
// or at its in-flight limit and one is at its limit ("limited": nothing
// for now; a freed slot publishes on the queue's ready channel), else 0.
// A tracked queue (config grp = '1') serves its groups in turn; a queue
// with a limit (mif or gmif) records each job it hands out in flight
// (inflight_take) and gives no more than its max_in_flight and
// group_max_in_flight allow. earliest = a group's
// new earliest due time when this call moved it earlier, else 0; popped =
// the entries popped, stale ones included (lmstfy's queue_pop_jobs).
var consumeScript = script(consumeLua)

// consumeLua is consumeScript's source (TestRotationDifferential runs it
// beside a reference).
const consumeLua = `
local n = #KEYS / 6
local due = ARGV[1]
local now, worker = ARGV[6 + 2 * n], ARGV[7 + 2 * n]
local base, start32 = tonumber(ARGV[5]), u32(tonumber(now) % 4294967296)
local dueN = tonumber(due)
local due48 = u48(dueN)
local want = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local out = {0, 0, 0}
local got = 0
local touched = {}
local tracked = {}
-- timed[i]: due, id pairs of the jobs taken from queue i, for its timer.
local timed = {}
-- limited[i]: queue i stopped at an in-flight limit with jobs left.
local limited = {}
-- take makes the job of entry e, popped from queue i (keys from k), in
-- flight and adds it to the reply; false when the entry is stale.
local function take(i, k, e)
  local id = eid(e)
  local jk = KEYS[k + 6] .. id
  local v = redis.call('GET', jk)
  if not v or #v < 22 then return false end
  local st = string.sub(v, 2, 2)
  if st ~= 'r' and st ~= 'd' then return false end
  local left = r16(v, 3) - 1
  if left < 0 then left = 0 end
  local deliv = r16(v, 5) + 1
  local prio = string.byte(v, 7)
  got = got + 1
  local nonce = u32((base + got) % 4294967296) .. start32
  -- hdr('f', left, deliv, prio, 0, dueN, nonce), with the due time
  -- packed once for the call (due48).
  redis.call('SETRANGE', jk, 1, 'f' .. u16(left) .. u16(deliv) .. string.char(prio, 0) .. due48 .. nonce)
  -- The timer entries of a queue's jobs go in one ZADD (timed): nothing
  -- in the call reads the timer before.
  local z = timed[i]
  if not z then
    z = {}
    timed[i] = z
  end
  z[#z + 1] = due
  z[#z + 1] = id
  local o = #out
  out[o + 1] = i
  out[o + 2] = id
  out[o + 3] = left
  out[o + 4] = string.sub(v, 23)
  out[o + 5] = redis.call('PTTL', jk)
  if worker ~= '' then hist_open(jk, deliv, now, worker, out[o + 5]) end
  out[o + 6] = deliv
  out[o + 7] = nonce
  out[o + 8] = prio
  out[o + 9] = string.byte(v, 1)
  return id
end
for i = 1, n do
  local k = 6 * (i - 1)
  -- One HMGET tells whether the queue is paused, whether it ever had a
  -- priority job (push_ready sets seq first): queues that never use
  -- priorities skip the ZPOPMIN, and whether it is tracked (grp: it has
  -- groups or limits, groups_scripts.go), with its limits.
  local cfg = redis.call('HMGET', KEYS[k + 4], 'paused', 'seq', 'grp', 'mif', 'gmif', 'ws')
  tracked[i] = cfg[3] == '1'
  -- A queue with a limit records the jobs it hands out in flight (fl,
  -- inflight_new; flushed once at the end of the queue's turn); one
  -- without limits records nothing.
  local gmif = tonumber(cfg[5]) or 0
  local gp = gpfx(KEYS[k + 6])
  local fl = false
  if gmif > 0 or (tonumber(cfg[4]) or 0) > 0 then fl = inflight_new(gp, gmif) end
  if cfg[1] ~= '1' and cfg[3] == '1' then
    -- A tracked queue serves its groups in turn: the group at the head of
    -- the rotation gp..'r' moves to its tail and gives one job (a group
    -- of weight w > 1 goes back to the head until it gave w: weighted
    -- round robin, doc/design.md); the call moves the list in Lua and
    -- writes it once (rot_new, rot_save). With a limit, each job taken is
    -- recorded in flight (inflight_take); the queue gives no more than
    -- its max_in_flight allows (room), and a group at its
    -- group_max_in_flight leaves the rotation for gp..'b' until a slot of
    -- it frees (inflight_free).
    local hit = false
    local rk = gp .. 'r'
    -- One EXISTS tells whether the rotation of the layout before (gp..'a')
    -- or the queue's own ready list exists: most calls find neither.
    local ex = redis.call('EXISTS', gp .. 'a', KEYS[k + 1]) > 0
    if ex then grp_migrate(gp) end
    -- The default group (the queue's own q/ and p/) joins lazily: ungrouped
    -- publishes are those of an untracked queue. Its lists first: they
    -- are empty in most grouped queues (p/ is only when seq is set).
    if (ex and redis.call('LLEN', KEYS[k + 1]) > 0) or (cfg[2] and redis.call('ZCARD', KEYS[k + 3]) > 0) then
      grp_join(gp, '')
    end
    local ws = {}
    local gpop = 0
    local room = want - got
    if fl then
      room = inflight_room(gp, cfg[4], want - got)
      if room < want - got then limited[i] = true end
    end
    local took = 0
    local rot = rot_new(rk, room)
    while took < room do
      if budget <= 0 then out[1] = 1 break end
      local g = rot_next(rot)
      if not g then break end
      -- With a group limit, the group's slot is reserved before the pop
      -- (inflight_reserve); false: at its limit (a limit lowered since).
      local c = 0
      if gmif > 0 then c = inflight_reserve(fl, g, rot) end
      if not c then
        inflight_block(gp, rot, g)
        budget = budget - 1
      else
        -- The group's priority set is named only when the queue uses
        -- priorities (seq).
        local qk = KEYS[k + 1]
        if g ~= '' then qk = gp .. 'q:' .. g end
        local e = false
        if cfg[2] then
          local pk = KEYS[k + 3]
          if g ~= '' then pk = gp .. 'p:' .. g end
          local p = redis.call('ZPOPMIN', pk)
          if #p > 0 then e = p[1] end
        end
        if not e then e = redis.call('RPOP', qk) end
        local id = false
        if not e then
          grp_leave(gp, rot, g, false)
        else
          if g ~= '' then gpop = gpop + 1 end
          budget = budget - 1
          id = take(i, k, e)
          -- A stale entry (its job gone) costs the group no turn.
          if not id then rot_back(rot) end
        end
        if id then
          hit = true
          took = took + 1
          if fl then inflight_take(fl, id, g) end
          if gmif > 0 and c >= gmif then
            -- At its limit now: out of the rotation at once, rather than
            -- at its next turn.
            inflight_block(gp, rot, g)
          elseif cfg[6] then
            -- Weights are read only when the queue has some (ws).
            local w = ws[g]
            if not w then
              w = tonumber(redis.call('HGET', KEYS[k + 4], 'w:' .. g)) or 1
              ws[g] = w
            end
            if w > 1 then
              if redis.call('HINCRBY', gp .. 'm', g, 1) < w then
                rot_back(rot)
              else
                redis.call('HSET', gp .. 'm', g, 0)
              end
            end
          end
        elseif gmif > 0 then
          inflight_unreserve(fl, g)
        end
      end
    end
    rot_save(rot)
    if fl then inflight_flush(fl) end
    if gpop > 0 then redis.call('HINCRBY', KEYS[k + 4], 'gn', -gpop) end
    if hit then touched[#touched + 1] = i end
    -- A limited queue that ran out of jobs before its room is not
    -- limited: it is empty, or its groups are blocked (below).
    if limited[i] and took < room and out[1] ~= 1 then limited[i] = nil end
  elseif cfg[1] ~= '1' then
    -- A queue without groups: its one list (and priority set), and with
    -- a limit no rotation either, its default group's count read once
    -- for group_max_in_flight. At that limit the group is blocked
    -- (gp..'b'), so that the free that takes it below wakes a waiter.
    local hit = false
    local pdone = not cfg[2]
    local room, c0 = want - got, 0
    if fl then
      room = inflight_room(gp, cfg[4], want - got)
      if gmif > 0 then
        c0 = tonumber(redis.call('HGET', gp .. 'c', '')) or 0
        room = math.min(room, math.max(gmif - c0, 0))
      end
      if room < want - got then limited[i] = true end
    end
    local took = 0
    while took < room do
      if budget <= 0 then out[1] = 1 break end
      local es = false
      if not pdone then
        local p = redis.call('ZPOPMIN', KEYS[k + 3])
        if #p > 0 then es = {p[1]} else pdone = true end
      end
      -- Once the priority set is empty, the entries the room and the
      -- budget allow come in one RPOP (the ones popped one at a time
      -- would be these, in this order); stale ones cost budget and no
      -- room, and the loop pops again for them.
      if not es then es = redis.call('RPOP', KEYS[k + 1], math.min(room - took, budget)) end
      if not es then break end
      for _, e in ipairs(es) do
        budget = budget - 1
        local id = take(i, k, e)
        if id then
          hit = true
          took = took + 1
          if fl then
            inflight_take(fl, id, '')
            if gmif > 0 then inflight_pend(fl, '', 1) end
          end
        end
      end
    end
    if fl then
      inflight_flush(fl)
      if gmif > 0 and c0 + took >= gmif then redis.call('SADD', gp .. 'b', '') end
      if limited[i] and took < room and out[1] ~= 1 then limited[i] = nil end
    end
    if hit then touched[#touched + 1] = i end
  end
  if got >= want or budget <= 0 then break end
end
for _, i in ipairs(touched) do
  local z = timed[i]
  for j = 1, #z, 512 do redis.call('ZADD', KEYS[6 * (i - 1) + 2], unpack(z, j, math.min(j + 511, #z))) end
  local e = lower_index(KEYS[6 * (i - 1) + 5], ARGV[4 + 2 * i], dueN, ARGV[5 + 2 * i], ARGV[4])
  if e > 0 and out[2] == 0 then out[2] = e end
end
if out[1] == 0 then
  out[1] = 2
  local lim = false
  for i = 1, n do
    local k = 6 * (i - 1)
    -- A tracked queue's groups wait in its rotation (or in that of the
    -- layout before, until grp_migrate moved them; a queue this call
    -- did not reach may be tracked too); its blocked groups, or its
    -- max_in_flight reached, make it limited: nothing for now.
    local gp = gpfx(KEYS[k + 6])
    if limited[i] then
      lim = true
    elseif (tracked[i] and redis.call('EXISTS', gp .. 'r', gp .. 'a') > 0)
        or redis.call('LLEN', KEYS[k + 1]) > 0 or redis.call('ZCARD', KEYS[k + 3]) > 0
        or (tracked[i] == nil and redis.call('EXISTS', gp .. 'r', gp .. 'a') > 0) then
      out[1] = 0
      break
    elseif tracked[i] and redis.call('EXISTS', gp .. 'b') == 1 then
      lim = true
    end
  end
  if out[1] == 2 and lim then out[1] = 3 end
end
out[3] = tonumber(ARGV[3]) - budget
return out
`

// pumpLib is the part of the pump scripts that moves one queue's due
// timer entries: delayed jobs become ready; in-flight jobs whose TTR
// passed come back (at once, or after the queue's backoff) while tries
// remain, else go to the dead letter; entries whose job is gone are
// dropped; the queue's member in its group's timer index is moved to its
// new earliest due time (or removed). Both pump scripts take
//
//	ARGV[1]  now (ms)   ARGV[2] most entries to handle   ARGV[3] random seed (jitter)
//	ARGV[4]  the publish command (PUBLISH or SPUBLISH)
//	ARGV[5]  '1' to report what moved (tracing on), else '0'
//
// and return {entries handled, next due time (ms) or -1, expired, moved}:
// expired lists, for each queue where TTRs expired, its member, the jobs
// retried (tries left) and the jobs that went to the dead letter (for the
// history); moved, with ARGV[5] = '1', each queue's member (ns/q) and the
// job IDs of its entries handled (for tracing), else it is empty.
//
// Fairness (issue #31): the budget is shared, each due queue taking at
// most the budget left divided by the queues left (rounded up), so every
// due queue is served in every call and one queue's burst takes at most
// its share; a queue alone takes the whole budget.
const pumpLib = `
local now = ARGV[1]
local nowN = tonumber(now)
local budget = tonumber(ARGV[2])
local rnd = tonumber(ARGV[3])
local pub = ARGV[4]
local report = ARGV[5] == '1'
local function rand()
  rnd = (rnd * 69069 + 1) % 4294967296
  return rnd / 4294967296
end
local handled = 0
local expired = {}
local moved = {}
-- pump_queue handles at most share due entries of the queue of member m
-- (index, uk: its group's timer index and usage hash, where an entry
-- whose job expired is one job less (usage_expired); chan: its ready
-- channel; tk, qk, dk, pk, ck: its timer, ready list, dead letter,
-- priority set and config; jp: its job key prefix) and returns how many
-- it handled. A job whose TTR expired, or that expired in flight, frees
-- its in-flight slot (inflight_free).
local function pump_queue(index, uk, m, chan, tk, qk, dk, pk, ck, jp, share)
  local ids = redis.call('ZRANGEBYSCORE', tk, '-inf', now, 'LIMIT', '0', share)
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', tk, '0', #ids - 1) end
  local cfg = nil
  local ready = {}
  local nready = 0
  local retried, died = 0, 0
  local gone = nil -- the IDs of expired jobs, made at the first
  local wake = 0
  local gp = gpfx(jp)
  for n = 1, #ids do
    local id = ids[n]
    local jk = jp .. id
    -- Numbers as strings: Redis formats a number argument with printf,
    -- which was a sixth of a burst's pump CPU.
    local h = redis.call('GETRANGE', jk, '0', '21')
    if #h < 22 then
      if not gone then gone = {} end
      gone[#gone + 1] = id
      wake = wake + inflight_free(gp, ck, id)
    end
    if #h == 22 then
      local st = string.sub(h, 2, 2)
      local t1, t2, d1, d2, prio = string.byte(h, 3, 7)
      local tries, deliv = t1 + t2 * 256, d1 + d2 * 256
      if st == 'f' then
        if not cfg then cfg = redis.call('HMGET', ck, 'backoff', 'dead_ttl') end
        wake = wake + inflight_free(gp, ck, id)
        hist_close(jk, h, 't', r48(h, 9), '')
        if tries == 0 then
          kill(jk, dk, id, 0, deliv, prio, 1, nowN, cfg[2])
          died = died + 1
        else
          retried = retried + 1
          local delay = backoff(cfg[1], deliv, rand())
          if delay > 0 then
            local due = nowN + delay
            redis.call('SETRANGE', jk, 1, hdr('d', tries, deliv, prio, 0, due, NONCE0))
            redis.call('ZADD', tk, num(due), id)
          else
            redis.call('SETRANGE', jk, 1, hdr('r', tries, deliv, prio, 0, 0, NONCE0))
            st = 'd'
          end
        end
      end
      if st == 'd' then
        -- The header keeps 'd' and its due time: consumers take 'd' jobs
        -- from ready lists, and peek reports a due 'd' job as ready.
        nready = nready + 1
        if string.byte(h, 1) >= 4 then
          -- A grouped job goes back to its group (groups_scripts.go).
          push_job(qk, pk, ck, gpfx(jp), job_group(jk, h), prio, tries, id)
        elseif prio > 0 then
          push_ready(qk, pk, ck, prio, tries, id)
        else
          ready[#ready + 1] = entry(tries, id)
          if #ready == 256 then
            redis.call('LPUSH', qk, unpack(ready))
            ready = {}
          end
        end
      end
    end
  end
  if #ready > 0 then redis.call('LPUSH', qk, unpack(ready)) end
  if nready + wake > 0 then redis.call(pub, chan, nready + wake) end
  if gone then usage_expired(uk, jp, gone) end
  if retried + died > 0 then
    expired[#expired + 1] = m
    expired[#expired + 1] = retried
    expired[#expired + 1] = died
  end
  handled = handled + #ids
  if report and #ids > 0 then
    moved[#moved + 1] = m
    moved[#moved + 1] = ids
  end
  local first = redis.call('ZRANGE', tk, '0', '0', 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', index, m)
  else
    redis.call('ZADD', index, first[2], m)
  end
  return #ids
end
`

// pumpScript handles due timer entries of queues of one slot group, at
// most ARGV[2] of them (pumpLib). The pump reads the group's due queues
// from its timer index and passes their keys: every key is in KEYS, so
// the call touches one slot of a cluster.
//
//	KEYS[1]  the group's timer index
//	per queue i (1..n), KEYS[1+6(i-1)+1..6]: timer, ready list, dead
//	         letter, priority set, config, job key prefix j/{T}ns/q/
//	KEYS[#KEYS] the group's usage hash nu/{T} (usage_expired)
//	ARGV[1..5] as pumpLib
//	per queue i, ARGV[4+2i..5+2i]: index member ns/q, ready channel
//
// The next due time it returns is the group's.
var pumpScript = script(pumpLib + `
local nq = (#KEYS - 2) / 6
for q = 1, nq do
  if budget <= 0 then break end
  local k = 1 + 6 * (q - 1)
  budget = budget - pump_queue(KEYS[1], KEYS[#KEYS], ARGV[4 + 2 * q], ARGV[5 + 2 * q],
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6],
    math.ceil(budget / (nq - q + 1)))
end
local nxt = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local out = {handled, -1, expired, moved}
if #nxt > 0 then out[2] = tonumber(nxt[2]) end
return out
`)

// pumpPoolScript is a whole pump pass of a pool on one Redis (standalone
// or Sentinel), in one call: it reads the due members of the 64 groups'
// timer indexes, starting at group ARGV[6] (the pump moves the start at
// every pass: round robin across the groups when more queues are due
// than the budget), and handles at most ARGV[2] entries over all of them
// (pumpLib), a share each. The queues' key names are built here from the
// index's tag and the member ("ti/{T}", "ns/q": t/{T}ns/q, ..., and the
// group's usage hash nu/{T}), as keys.go and tenancy.go build them, so a pass is one round trip rather than two (read
// the indexes, then pump): a cluster cannot do this (its scripts name
// their keys in KEYS, and touch one slot), a single Redis can.
//
//	KEYS     the 64 groups' timer indexes, in group order
//	ARGV[1..5] as pumpLib   ARGV[6] the first group to read (0-based)
//
// The next due time it returns is the pool's.
var pumpPoolScript = script(pumpLib + `
-- The next due time of the pool: of the indexes with nothing due, their
-- head; of the others, their head once pumped.
local nxt = -1
local function seen(score)
  score = tonumber(score)
  if nxt < 0 or score < nxt then nxt = score end
end
local due = {}
local pumped = {}
local start = tonumber(ARGV[6])
-- Constant numbers go to Redis as strings here and in pump_queue: Redis
-- formats a number argument with printf (128 times a pass in this scan).
for i = 0, #KEYS - 1 do
  local ix = KEYS[(start + i) % #KEYS + 1]
  local head = redis.call('ZRANGE', ix, '0', '0', 'WITHSCORES')
  if #head > 0 then
    if tonumber(head[2]) > nowN or #due >= budget then
      seen(head[2])
    else
      pumped[#pumped + 1] = ix
      local ms = redis.call('ZRANGEBYSCORE', ix, '-inf', now, 'LIMIT', '0', budget - #due)
      for _, m in ipairs(ms) do due[#due + 1] = {ix, m} end
    end
  end
end
for i, d in ipairs(due) do
  if budget <= 0 then break end
  local tag = string.sub(d[1], 4)
  local b = tag .. d[2]
  budget = budget - pump_queue(d[1], 'nu/' .. tag, d[2], 'n/' .. b,
    't/' .. b, 'q/' .. b, 'd/' .. b, 'p/' .. b, 'c/' .. b, 'j/' .. b .. '/',
    math.ceil(budget / (#due - i + 1)))
end
for _, ix in ipairs(pumped) do
  local head = redis.call('ZRANGE', ix, '0', '0', 'WITHSCORES')
  if #head > 0 then seen(head[2]) end
end
return {handled, nxt, expired, moved}
`)

// pumpHeadsScript reads the heads of timer (or schedule) indexes: for
// each index in KEYS, its first ARGV[1] members with their scores; with
// ARGV[2] (now, ms), only its members due by then (at most ARGV[1]) and
// the first member beyond, so that the pump, which reads the 64 indexes
// at every pass, reads no more than it will move. The pump calls it once
// with the 64 groups' indexes on one Redis, and once per group
// (pipelined) on a cluster, where one call touches one slot.
//
// Returns, per index, {n, member 1, score 1, …, member n, score n} flattened.
var pumpHeadsScript = script(`
local out = {}
local limit, now = tonumber(ARGV[1]), ARGV[2]
for _, k in ipairs(KEYS) do
  local zs
  if now then
    zs = redis.call('ZRANGEBYSCORE', k, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
    if #zs < 2 * limit then
      local nxt = redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      for i = 1, #nxt do zs[#zs + 1] = nxt[i] end
    end
  else
    zs = redis.call('ZRANGE', k, 0, limit - 1, 'WITHSCORES')
  end
  out[#out + 1] = #zs / 2
  for i = 1, #zs do out[#out + 1] = zs[i] end
end
return out
`)

// peekQueueScript returns the next live job of a queue (priority set
// first, then the ready list) without consuming it, looking past stale
// entries. In a tracked queue (groups_scripts.go) the groups come first,
// in the order of the rotation, consume's order.
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] job key prefix
//	ARGV[1] most entries to look at
//
// Returns {id, payload with header, PTTL (ms)} or nil.
var peekQueueScript = script(`
local max = tonumber(ARGV[1])
local function live(e)
  local id = eid(e)
  local v = redis.call('GET', KEYS[3] .. id)
  if v and #v >= 22 and (string.sub(v, 2, 2) == 'r' or string.sub(v, 2, 2) == 'd') then
    return {id, v, redis.call('PTTL', KEYS[3] .. id)}
  end
  return nil
end
local function scan(qk, pk)
  local ps = redis.call('ZRANGE', pk, 0, 99)
  for _, e in ipairs(ps) do
    local r = live(e)
    if r then return r end
  end
  local batch = 100
  local stop = -1
  while max > 0 do
    local es = redis.call('LRANGE', qk, stop - batch + 1, stop)
    for j = #es, 1, -1 do
      local r = live(es[j])
      if r then return r end
    end
    if #es < batch then return nil end
    max = max - #es
    stop = stop - batch
  end
  return nil
end
local gp = gpfx(KEYS[3])
for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, 15)) do
  local r
  if g == '' then r = scan(KEYS[1], KEYS[2]) else r = scan(gp .. 'q:' .. g, gp .. 'p:' .. g) end
  if r then return r end
end
return scan(KEYS[1], KEYS[2]) or false
`)

// peekJobScript reads a job value and its TTL in one step.
//
//	KEYS[1] body key
//
// Returns {value with header, PTTL (ms), its attempt history (newest
// first)} or nil.
var peekJobScript = script(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1]), redis.call('LRANGE', hkey(KEYS[1]), 0, 15)}
`)

// ackManyScript deletes jobs of one queue and their timer entries
// (lmstfy's ACK; coalesced ACKs, or one alone); with a receipt, a job only
// when it matches the current delivery. Each job is checked alone, as in
// sequential calls (a job ACKed twice in one call is gone the second time),
// and the jobs that pass are deleted with one ZREM and one DEL.
//
//	KEYS[1] timer   KEYS[1+i] body key of job i
//	KEYS[#KEYS-1] config   KEYS[#KEYS] the group's usage hash nu/{T}
//	ARGV[2i-1] id of job i   ARGV[2i] its receipt (8 bytes), "" or "?"
//	ARGV[#ARGV-1] the publish command   ARGV[#ARGV] ready channel
//
// The deleted jobs' in-flight slots free (inflight_free_many: one HMGET
// for an untracked queue).
//
// Returns one code per job: 1 deleted (or nothing to delete, without a
// receipt), -1 no such job, -2 stale receipt; "?" is an ACK without
// receipt that answers 0 when there is no such job (a sharded queue's ACK
// then tries shard 0, shards.go).
var ackManyScript = script(ackManyLua)

// ackManyLua is ackManyScript's source (TestRotationDifferential runs it
// beside a reference).
const ackManyLua = `
local out, ids, jks, gone = {}, {}, {}, {}
for i = 1, #KEYS - 3 do
  local jk, nonce = KEYS[i + 1], ARGV[2 * i]
  local code = 1
  if nonce == '?' then
    if gone[jk] or redis.call('EXISTS', jk) == 0 then code = 0 end
  elseif nonce ~= '' then
    local h = ''
    -- A job ACKed earlier in this batch is gone, as in sequential calls.
    if not gone[jk] then h = redis.call('GETRANGE', jk, 0, 21) end
    if #h < 22 then
      code = -1
    elseif string.sub(h, 2, 2) ~= 'f' or string.sub(h, 15, 22) ~= nonce then
      code = -2
    end
  end
  if code == 1 and not gone[jk] then
    gone[jk] = true
    ids[#ids + 1] = ARGV[2 * i - 1]
    jks[#jks + 1] = jk
  end
  out[i] = code
end
if #ids > 0 then
  local dj, db, exp = 0, 0, {}
  for k, jk in ipairs(jks) do
    local l = redis.call('STRLEN', jk)
    if l > 0 then
      dj, db = dj + 1, db + l
    elseif redis.call('ZSCORE', KEYS[1], ids[k]) then
      -- Gone with its timer entry (an ACK without receipt): it expired in
      -- flight, and the pump that would have counted it at its entry
      -- will not meet it (usage_expired). Only a gone job costs this.
      exp[#exp + 1] = ids[k]
    end
  end
  redis.call('ZREM', KEYS[1], unpack(ids))
  local jp = jprefix(jks[1], ids[1])
  -- Each job's attempt history (its key with 'a' for 'j') goes with it.
  local n = #jks
  for i = 1, n do jks[n + i] = hkey(jks[i]) end
  redis.call('DEL', unpack(jks))
  if dj > 0 then usage_add(KEYS[#KEYS], KEYS[1], -dj, -db) end
  usage_expired(KEYS[#KEYS], jp, exp)
  inflight_wake(inflight_free_many(gpfx(jp), KEYS[#KEYS - 1], ids), ARGV[#ARGV - 1], ARGV[#ARGV])
end
return out
`

// releaseScript hands an in-flight job back (nack): ready now, or delayed
// by ARGV[4] ms or by the queue's backoff; with no try left it goes to the
// dead letter.
//
//	KEYS[1] body   KEYS[2] timer   KEYS[3] ready list   KEYS[4] priority set
//	KEYS[5] config   KEYS[6] dead letter   KEYS[7] the group's timer index
//	ARGV[1] id   ARGV[2] receipt   ARGV[3] now (ms)   ARGV[4] delay (ms; -1 = backoff policy)
//	ARGV[5] "1" to give back the spent try   ARGV[6] dead reason code   ARGV[7] random in [0,1)
//	ARGV[8] index member   ARGV[9] ready channel   ARGV[10] the group's wake-up channel
//	ARGV[11] the publish command (PUBLISH or SPUBLISH)
//	ARGV[12] the history outcome (r released, n nacked, w webhook failed)
//	ARGV[13] the error text (bounded by the server)
//
// The delivery's history entry is closed (hist_close) and its in-flight
// slot freed (inflight_free).
//
// Returns 1 ready, 2 dead, 3 delayed, -1 no such job, -2 stale receipt.
var releaseScript = script(`
local h = redis.call('GETRANGE', KEYS[1], 0, 21)
if #h < 22 then return -1 end
if string.sub(h, 2, 2) ~= 'f' or string.sub(h, 15, 22) ~= ARGV[2] then return -2 end
local id, now = ARGV[1], tonumber(ARGV[3])
local tries, deliv, prio = r16(h, 3), r16(h, 5), string.byte(h, 7)
hist_close(KEYS[1], h, ARGV[12], now, ARGV[13])
if ARGV[5] == '1' then tries = tries + 1 end
redis.call('ZREM', KEYS[2], id)
local gp = gpfx(jprefix(KEYS[1], id))
local wake = inflight_free(gp, KEYS[5], id)
if tries == 0 then
  kill(KEYS[1], KEYS[6], id, 0, deliv, prio, tonumber(ARGV[6]), now, redis.call('HGET', KEYS[5], 'dead_ttl'))
  inflight_wake(wake, ARGV[11], ARGV[9])
  return 2
end
local delay = tonumber(ARGV[4])
if delay < 0 then delay = backoff(redis.call('HGET', KEYS[5], 'backoff'), deliv, tonumber(ARGV[7])) end
if delay > 0 then
  local due = now + delay
  redis.call('SETRANGE', KEYS[1], 1, hdr('d', tries, deliv, prio, 0, due, NONCE0))
  redis.call('ZADD', KEYS[2], num(due), id)
  lower_index(KEYS[7], ARGV[8], due, ARGV[10], ARGV[11])
  inflight_wake(wake, ARGV[11], ARGV[9])
  return 3
end
redis.call('SETRANGE', KEYS[1], 1, hdr('r', tries, deliv, prio, 0, 0, NONCE0))
push_job(KEYS[3], KEYS[4], KEYS[5], gp, job_group(KEYS[1], h), prio, tries, id)
redis.call(ARGV[11], ARGV[9], 1 + wake)
return 1
`)

// touchScript extends an in-flight job's TTR.
//
//	KEYS[1] body   KEYS[2] timer   KEYS[3] the group's timer index
//	ARGV[1] id   ARGV[2] receipt   ARGV[3] new due (ms)   ARGV[4] index member
//	ARGV[5] the group's wake-up channel   ARGV[6] the publish command
//
// Returns 1, -1 no such job, -2 stale receipt.
var touchScript = script(`
local h = redis.call('GETRANGE', KEYS[1], 0, 21)
if #h < 22 then return -1 end
if string.sub(h, 2, 2) ~= 'f' or string.sub(h, 15, 22) ~= ARGV[2] then return -2 end
local due = tonumber(ARGV[3])
redis.call('SETRANGE', KEYS[1], 8, u48(due))
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
lower_index(KEYS[3], ARGV[4], due, ARGV[5], ARGV[6])
return 1
`)

// respawnScript moves the oldest dead jobs to the tail of their queue with
// one try, setting their TTL; dead entries whose job is gone (or no longer
// dead) are dropped without counting.
//
//	KEYS[1] dead letter   KEYS[2] ready list   KEYS[3] priority set   KEYS[4] config
//	KEYS[5] job key prefix
//	ARGV[1] most jobs   ARGV[2] ttl (ms; 0 = no expiry)   ARGV[3] the publish command
//	ARGV[4] ready channel   ARGV[5] most entries to pop
//
// Returns {respawned, 1 when the dead letter is now empty else 0}.
var respawnScript = script(`
local want, ttl, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local n, empty = 0, 0
while n < want and budget > 0 do
  local e = redis.call('RPOP', KEYS[1])
  if not e then empty = 1 break end
  budget = budget - 1
  local id = eid(e)
  local jk = KEYS[5] .. id
  local h = redis.call('GETRANGE', jk, 0, 21)
  if #h == 22 and string.sub(h, 2, 2) == 'x' then
    local prio = string.byte(h, 7)
    redis.call('SETRANGE', jk, 1, hdr('r', 1, r16(h, 5), prio, 0, 0, NONCE0))
    local g = job_group(jk, h)
    -- A queue destroyed since keeps its dead letter: a grouped job makes
    -- it tracked again.
    if g ~= '' then redis.call('HSET', KEYS[4], 'grp', '1') end
    push_job(KEYS[2], KEYS[3], KEYS[4], gpfx(KEYS[5]), g, prio, 1, id)
    job_ttl(jk, id, ttl)
    n = n + 1
  end
end
if n > 0 then redis.call(ARGV[3], ARGV[4], n) end
return {n, empty}
`)

// respawnOneScript respawns one dead job by ID.
//
//	KEYS[1] body   KEYS[2] dead letter   KEYS[3] ready list   KEYS[4] priority set   KEYS[5] config
//	ARGV[1] id   ARGV[2] ttl (ms; 0 = no expiry)   ARGV[3] ready channel
//	ARGV[4] the publish command (PUBLISH or SPUBLISH)
//
// Returns 1, or -1 when the job is not dead.
var respawnOneScript = script(`
local h = redis.call('GETRANGE', KEYS[1], 0, 21)
if #h < 22 or string.sub(h, 2, 2) ~= 'x' then return -1 end
redis.call('LREM', KEYS[2], 1, entry(1, ARGV[1]))
local prio = string.byte(h, 7)
redis.call('SETRANGE', KEYS[1], 1, hdr('r', 1, r16(h, 5), prio, 0, 0, NONCE0))
local g = job_group(KEYS[1], h)
if g ~= '' then redis.call('HSET', KEYS[5], 'grp', '1') end
push_job(KEYS[3], KEYS[4], KEYS[5], gpfx(jprefix(KEYS[1], ARGV[1])), g, prio, 1, ARGV[1])
job_ttl(KEYS[1], ARGV[1], tonumber(ARGV[2]))
redis.call(ARGV[4], ARGV[3], 1)
return 1
`)

// deleteDeadScript deletes the oldest dead jobs.
//
//	KEYS[1] dead letter   KEYS[2] job key prefix   KEYS[3] the group's usage hash
//	ARGV[1] most entries
//
// Returns the number of entries removed.
var deleteDeadScript = script(`
local n, dj, db = 0, 0, 0
for i = 1, tonumber(ARGV[1]) do
  local e = redis.call('RPOP', KEYS[1])
  if not e then break end
  local jk = KEYS[2] .. eid(e)
  if redis.call('GETRANGE', jk, 1, 1) == 'x' then
    local l = del_job(jk)
    if l > 0 then dj, db = dj + 1, db + l end
  end
  n = n + 1
end
usage_add(KEYS[3], KEYS[2], -dj, -db)
return n
`)

// deleteDeadOneScript deletes one dead job by ID.
//
//	KEYS[1] body   KEYS[2] dead letter   KEYS[3] the group's usage hash
//	ARGV[1] id
//
// Returns 1, or -1 when the job is not dead.
var deleteDeadOneScript = script(`
if redis.call('GETRANGE', KEYS[1], 1, 1) ~= 'x' then return -1 end
redis.call('LREM', KEYS[2], 1, entry(1, ARGV[1]))
usage_add(KEYS[3], KEYS[2], -1, -del_job(KEYS[1]))
return 1
`)

// listDeadScript returns a page of the dead letter, oldest first.
//
//	KEYS[1] dead letter   KEYS[2] job key prefix
//	ARGV[1] offset from the oldest   ARGV[2] limit
//
// Returns {id, value with header, PTTL, …} for the entries whose job exists.
var listDeadScript = script(`
local off, lim = tonumber(ARGV[1]), tonumber(ARGV[2])
local es = redis.call('LRANGE', KEYS[1], -(off + lim), -(off + 1))
local out = {}
for j = #es, 1, -1 do
  local id = eid(es[j])
  local v = redis.call('GET', KEYS[2] .. id)
  if v and #v >= 22 then
    out[#out + 1] = id
    out[#out + 1] = v
    out[#out + 1] = redis.call('PTTL', KEYS[2] .. id)
  end
end
return out
`)

// listDeadPageScript returns a page of the dead letter in either order,
// filtered by reason and by the text of the last error.
//
//	KEYS[1] dead letter   KEYS[2] job key prefix
//	ARGV[1] offset from the oldest (or newest)   ARGV[2] most jobs
//	ARGV[3] "1" for newest first   ARGV[4] reason code, 0 for any
//	ARGV[5] most entries examined with a filter
//	ARGV[6] text the last error must hold, "" for any
//
// Returns {size, next offset or -1, id, value with header, PTTL, last
// error, …} for the entries examined whose job exists (and passes the
// filters).
var listDeadPageScript = script(`
local off, lim, code, text = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4]), ARGV[6] or ''
local filtered = code ~= 0 or text ~= ''
local size = redis.call('LLEN', KEYS[1])
local n = lim
if filtered then n = tonumber(ARGV[5]) end
if off >= size then return {size, -1} end
if off + n > size then n = size - off end
local es, first, last, step
if ARGV[3] == '1' then
  es = redis.call('LRANGE', KEYS[1], off, off + n - 1)
  first, last, step = 1, #es, 1
else
  es = redis.call('LRANGE', KEYS[1], -(off + n), -(off + 1))
  first, last, step = #es, 1, -1
end
local out = {size, -1}
local found, seen = 0, 0
for j = first, last, step do
  seen = seen + 1
  local jk = KEYS[2] .. eid(es[j])
  local v = false
  local err = nil
  -- With a reason, only the header's reason byte is read until it matches:
  -- a scan of 1,000 entries does not copy 1,000 bodies; with an error text,
  -- the history is read before the body too.
  if code == 0 or string.byte(redis.call('GETRANGE', jk, 7, 7)) == code then
    if text ~= '' then
      err = last_error(jk)
      if string.find(err, text, 1, true) then v = redis.call('GET', jk) end
    else
      v = redis.call('GET', jk)
    end
  end
  if v and #v >= 22 then
    out[#out + 1] = eid(es[j])
    out[#out + 1] = v
    out[#out + 1] = redis.call('PTTL', jk)
    out[#out + 1] = err or last_error(jk)
    found = found + 1
    if filtered and found >= lim then break end
  end
end
if off + seen < size then out[2] = off + seen end
return out
`)

// destroyScript deletes a batch of a queue's ready, delayed and in-flight
// jobs (values and entries); when all are gone it drops the queue from the
// timer index. The dead letter is left alone.
//
//	KEYS[1] ready list   KEYS[2] timer   KEYS[3] the group's timer index   KEYS[4] priority set
//	KEYS[5] job key prefix   KEYS[6] the group's usage hash
//	KEYS[7] config (optional; its gn is cleared once done)
//	ARGV[1] most entries   ARGV[2] index member
//
// The ready jobs of a tracked queue's groups go too. Once done it deletes
// the queue's in-flight records (gp..'i', gp..'c'), its rotation and its
// blocked set (gp..'r', gp..'m', gp..'b'; gp..'a' of the layout before):
// no job of the queue is ready or in
// flight any more.
//
// Returns the number of entries deleted (less than ARGV[1] when done).
var destroyScript = script(`
local batch = tonumber(ARGV[1])
local n = 0
local dj, db = 0, 0
-- A timer entry whose job expired is still one job (recountScript), with
-- the bytes the expiry ledger recorded (usage_expired).
local expired = {}
local function drop(id, timed)
  local jk = KEYS[5] .. id
  local st = redis.call('GETRANGE', jk, 1, 1)
  if st ~= 'x' then
    local l = del_job(jk)
    if l > 0 then dj, db = dj + 1, db + l elseif timed then expired[#expired + 1] = id end
  end
end
while n < batch do
  local e = redis.call('RPOP', KEYS[1])
  if not e then break end
  drop(eid(e))
  n = n + 1
end
if n < batch then
  local ps = redis.call('ZRANGE', KEYS[4], 0, batch - n - 1)
  for _, e in ipairs(ps) do drop(eid(e)) end
  if #ps > 0 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, #ps - 1) end
  n = n + #ps
end
if n < batch then
  local ids = redis.call('ZRANGE', KEYS[2], 0, batch - n - 1)
  for _, id in ipairs(ids) do drop(id, true) end
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', KEYS[2], 0, #ids - 1) end
  n = n + #ids
end
-- A tracked queue's groups (groups_scripts.go): their ready jobs, group
-- by group (rotation, that of the layout before, then blocked set); a
-- group leaves them once empty.
local gp = gpfx(KEYS[5])
while n < batch do
  local from = 'r'
  local g = redis.call('LINDEX', gp .. 'r', 0)
  if not g then
    from = 'a'
    g = redis.call('ZRANGE', gp .. 'a', 0, 0)[1]
  end
  if not g then
    from = 'b'
    g = redis.call('SRANDMEMBER', gp .. 'b')
  end
  if not g then break end
  if g ~= '' then
    local qk, pk = gp .. 'q:' .. g, gp .. 'p:' .. g
    local es = redis.call('LRANGE', qk, -(batch - n), -1)
    for _, e in ipairs(es) do drop(eid(e)) end
    if #es > 0 then redis.call('LTRIM', qk, 0, -(#es + 1)) end
    n = n + #es
    if n < batch then
      local ps = redis.call('ZRANGE', pk, 0, batch - n - 1)
      for _, e in ipairs(ps) do drop(eid(e)) end
      if #ps > 0 then redis.call('ZREMRANGEBYRANK', pk, 0, #ps - 1) end
      n = n + #ps
    end
  end
  if n < batch then
    if from == 'r' then redis.call('LPOP', gp .. 'r') end
    redis.call('ZREM', gp .. 'a', g)
    if from ~= 'r' then redis.call('SREM', gp .. 'b', g) end
    redis.call('HDEL', gp .. 'm', g)
  end
end
if n < batch then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('DEL', gp .. 'i', gp .. 'c', gp .. 'b', gp .. 'r', gp .. 'm', gp .. 'a')
  -- The count of the groups' entries (gn) is 0 now.
  if KEYS[7] then redis.call('HDEL', KEYS[7], 'gn') end
end
usage_add(KEYS[6], KEYS[5], -dj, -db)
usage_expired(KEYS[6], KEYS[5], expired)
return n
`)

// cancelKeyScript deletes the job published with an idempotency key.
//
//	KEYS[1] idempotency key   KEYS[2] timer   KEYS[3] job key prefix
//	KEYS[4] the group's usage hash   KEYS[5] config
//	ARGV[1] the publish command   ARGV[2] ready channel
//
// A job in flight frees its slot (inflight_free).
//
// Returns the job's ID, or nil when the key is unknown.
var cancelKeyScript = script(`
local id = redis.call('GET', KEYS[1])
if not id then return false end
local l = del_job(KEYS[3] .. id)
local timed = redis.call('ZREM', KEYS[2], id) == 1
-- A timer entry whose job expired is still one job (recountScript).
if l > 0 then usage_add(KEYS[4], KEYS[3], -1, -l) elseif timed then usage_expired(KEYS[4], KEYS[3], {id}) end
redis.call('DEL', KEYS[1])
inflight_wake(inflight_free(gpfx(KEYS[3]), KEYS[5], id), ARGV[1], ARGV[2])
return id
`)

// reclaimScript drops the entries of one queue whose job is gone (its TTL
// ran out, or it was deleted while waiting), without a consumer: the
// background reclaimer (reclaim.go) runs it on the queues of the pool.
// Liveness is each structure's consumer's own rule: a ready or priority
// entry is live while its job is ready ('r', or 'd' made ready by the
// pump), as consume takes it; a dead-letter entry while its job is dead
// ('x'), as respawn takes it; a timer entry while its job exists, as the
// pump takes it.
//
// With ARGV[2] = 0, the consume ends: stale entries at the right end of
// the ready list and of the dead letter (where RPOP takes) are cut with one
// LTRIM, and those at the low end of the priority set removed; jobs of a
// queue with one TTL expire in publish order, so this catches the common
// case. The reply says when to look again: the shortest PTTL of the live
// jobs found at the ends (nothing can expire at an end before), at most
// 60 s for a job without TTL, 30 s for an empty structure, 0 when the
// budget ran out. The consume ends of the 16 groups next in a tracked
// queue's rotation are cut the same way (groups_scripts.go).
//
// With ARGV[2] > 0, one window of ARGV[2] entries of each structure at its
// cursor (ARGV[3..6]; lists counted from the right end, sets by rank):
// stale set members are removed with ZREM (O(log n)); stale list entries
// are overwritten with a 4-byte tombstone (LSET), and the tombstones at
// most ARGV[7] entries from an end removed with one LREM from that end (one
// from each end at most). LREM walks the list (about 40 ns an entry on
// Redis 7.0: 40 ms for a million), so deeper tombstones stay until an end
// comes within reach; every script skips them as stale (their ID is empty,
// their job key never exists).
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] dead letter
//	KEYS[5] job key prefix j/{T}ns/q/   KEYS[6] the group's usage hash
//	KEYS[7] config
//	ARGV[1] most entries to look at
//	ARGV[2] window (entries; 0 = the consume ends)
//	ARGV[3..6] cursors of the ready list, priority set, timer, dead letter
//	ARGV[7] most entries an LREM may walk
//	ARGV[8] the publish command   ARGV[9] ready channel
//
// A timer entry of a job gone in flight frees the job's in-flight slot
// (inflight_free), which the pump would have freed.
//
// Returns {entries removed, entries looked at, tombstones left, the four
// next cursors (0 once a structure was scanned to its end), ms until the
// ends are worth a look again}.
var reclaimScript = script(`
local jp, budget, win, walk = KEYS[5], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[7])
local TOMB = '\0\0\0\0'
local removed, looked, left = 0, 0, 0
local again = 60000
local function state(e) return redis.call('GETRANGE', jp .. eid(e), 1, 1) end
local function ready_live(e) local s = state(e) return s == 'r' or s == 'd' end
local function dead_live(e) return state(e) == 'x' end
local function timer_live(id) return redis.call('EXISTS', jp .. id) == 1 end
-- until notes when the live entry e at an end may expire.
local function until_(e)
  local t = redis.call('PTTL', jp .. eid(e))
  if t > 0 and t < again then again = t end
end
-- tail cuts the stale entries at the right end of list k.
local function tail(k, live)
  local n = 16
  while true do
    if budget <= 0 then again = 0 return end
    local es = redis.call('LRANGE', k, -n, -1)
    if #es == 0 then again = math.min(again, 30000) return end
    local stale, hit = 0, false
    for j = #es, 1, -1 do
      if budget <= 0 then break end
      if live(es[j]) then hit = es[j] break end
      budget = budget - 1
      looked = looked + 1
      stale = stale + 1
    end
    if stale > 0 then
      redis.call('LTRIM', k, 0, -(stale + 1))
      removed = removed + stale
    end
    if hit then until_(hit) return end
    if stale < #es then again = 0 return end
    if #es < n then again = math.min(again, 30000) return end
    n = 256
  end
end
-- zhead removes the stale members at the low end of sorted set k.
local function zhead(k, live)
  while true do
    if budget <= 0 then again = 0 return end
    local ms = redis.call('ZRANGE', k, 0, 15)
    if #ms == 0 then again = math.min(again, 30000) return end
    local stale, hit = {}, false
    for _, m in ipairs(ms) do
      if budget <= 0 then break end
      if live(m) then hit = m break end
      budget = budget - 1
      looked = looked + 1
      stale[#stale + 1] = m
    end
    if #stale > 0 then
      redis.call('ZREM', k, unpack(stale))
      removed = removed + #stale
    end
    if hit then until_(hit) return end
    if #stale < #ms then again = 0 return end
    if #ms < 16 then again = math.min(again, 30000) return end
  end
end
local function zwindow(k, cur, live, timer)
  local ms = redis.call('ZRANGE', k, cur, cur + win - 1)
  local stale = {}
  for _, m in ipairs(ms) do
    if not live(m) then stale[#stale + 1] = m end
  end
  looked = looked + #ms
  budget = budget - #ms
  if #stale > 0 then
    redis.call('ZREM', k, unpack(stale))
    removed = removed + #stale
    if timer then
      inflight_wake(inflight_free_many(gpfx(jp), KEYS[7], stale), ARGV[8], ARGV[9])
      usage_expired(KEYS[6], jp, stale)
    end
  end
  if #ms < win then return 0 end
  return cur + #ms - #stale
end
local function lwindow(k, cur, live)
  local es = redis.call('LRANGE', k, -(cur + win), -(cur + 1))
  if #es == 0 then return 0 end
  local len = redis.call('LLEN', k)
  local stale, kr, kl = 0, 0, 0
  for j = #es, 1, -1 do
    if es[j] == TOMB or not live(es[j]) then
      local off = cur + #es - j -- from the right end
      stale = stale + 1
      if es[j] ~= TOMB then redis.call('LSET', k, -(off + 1), TOMB) end
      if off < walk then kr = kr + 1 elseif len - 1 - off < walk then kl = kl + 1 end
    end
  end
  looked = looked + #es
  budget = budget - #es
  local gone = 0
  if kr > 0 then gone = gone + redis.call('LREM', k, -kr, TOMB) end
  if kl > 0 then gone = gone + redis.call('LREM', k, kl, TOMB) end
  removed = removed + gone
  if stale > gone then left = left + stale - gone end
  if #es < win then return 0 end
  return cur + #es - gone
end
local cur = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])}
if win == 0 then
  tail(KEYS[1], ready_live)
  zhead(KEYS[2], ready_live)
  tail(KEYS[4], dead_live)
  -- A tracked queue's groups (groups_scripts.go): the consume ends of the
  -- 16 groups next in its rotation; what goes leaves the count gn, and a
  -- group left empty leaves the rotation.
  local gp = gpfx(jp)
  local before = removed
  for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, 15)) do
    if budget <= 0 then break end
    if g ~= '' then
      local qk, pk = gp .. 'q:' .. g, gp .. 'p:' .. g
      tail(qk, ready_live)
      zhead(pk, ready_live)
      -- Among the first 16 of the rotation: LREM stops there.
      if redis.call('LLEN', qk) == 0 and redis.call('ZCARD', pk) == 0 and redis.call('LREM', gp .. 'r', 1, g) > 0 then
        redis.call('HDEL', gp .. 'm', g)
      end
    end
  end
  if removed > before then redis.call('HINCRBY', KEYS[7], 'gn', before - removed) end
else
  again = 0
  if budget > 0 then cur[1] = lwindow(KEYS[1], cur[1], ready_live) end
  if budget > 0 then cur[2] = zwindow(KEYS[2], cur[2], ready_live) end
  if budget > 0 then cur[3] = zwindow(KEYS[3], cur[3], timer_live, true) end
  if budget > 0 then cur[4] = lwindow(KEYS[4], cur[4], dead_live) end
end
return {removed, looked, left, cur[1], cur[2], cur[3], cur[4], again}
`)

// sizeScript counts a queue's ready jobs: the ready list's and priority
// set's lengths, less the stale entries at their consume ends (looking at
// most at ARGV[1] entries), so that the jobs of a queue with one TTL stop
// counting as soon as they expire, before the reclaimer removes their
// entries. It writes nothing: the size routes are public.
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] job key prefix
//	KEYS[4] config (optional): its gn, the entries of the queue's groups
//	        (groups_scripts.go), is added
//	ARGV[1] most entries to look at
//
// Returns the count.
var sizeScript = script(`
local jp, budget = KEYS[3], tonumber(ARGV[1])
local function live(e)
  local s = redis.call('GETRANGE', jp .. eid(e), 1, 1)
  return s == 'r' or s == 'd'
end
local stale = 0
local zn = redis.call('ZCARD', KEYS[2])
local off = 0
while budget > 0 and off < zn do
  local ms = redis.call('ZRANGE', KEYS[2], off, off + 99)
  local all = true
  for _, m in ipairs(ms) do
    budget = budget - 1
    if live(m) then all = false break end
    stale = stale + 1
  end
  if not all then break end
  off = off + #ms
end
local ln = redis.call('LLEN', KEYS[1])
off = 0
while budget > 0 and off < ln do
  local es = redis.call('LRANGE', KEYS[1], -(off + 100), -(off + 1))
  local all = true
  for j = #es, 1, -1 do
    budget = budget - 1
    if live(es[j]) then all = false break end
    stale = stale + 1
  end
  if not all or #es == 0 then break end
  off = off + #es
end
local gn = 0
if KEYS[4] then gn = tonumber(redis.call('HGET', KEYS[4], 'gn')) or 0 end
return ln + zn - stale + gn
`)

// allScripts are loaded by New so that a broken script fails at start and
// pipelined calls never meet NOSCRIPT.
var allScripts = []*redis.Script{
	publishScript, publishManyScript, consumeScript, pumpScript, pumpPoolScript, pumpHeadsScript, peekQueueScript, peekJobScript, ackManyScript,
	releaseScript, touchScript, respawnScript, respawnOneScript, deleteDeadScript,
	deleteDeadOneScript, listDeadScript, listDeadPageScript, destroyScript, cancelKeyScript, reclaimScript, sizeScript, upgradeQueueScript,
	queueDetailScript, readyHeadsScript, listJobsScript, importScript, recountScript, recountPartScript, recountApplyScript, resumScript, ledgerRecordScript, ledgerSweepScript, setLimitsScript, unblockScript, recordInFlightScript, queueGroupsScript,
}
