package rdb

import (
	"context"
	"fmt"
	"sort"

	"github.com/kairos-dev/kairos/engine"
)

// A queue's groups as the dashboard shows them (engine.Grouper, issue
// #32): groups_scripts.go keeps them, this reads them.

var _ engine.Grouper = (*Engine)(nil)

// groupScanMax is the most groups queueGroupsScript reads of each of a
// physical queue's group structures (rotation, blocked set, in-flight
// counts): a queue of 100,000 groups costs a few milliseconds of Redis,
// not a second; the answer then says it is truncated.
const groupScanMax = 2000

// groupTimerScanMax is the most timer entries queueGroupsScript reads to
// count the jobs in flight of each group of a queue without limits, which
// keeps no count (groups_scripts.go): exact up to this many jobs in the
// queue's timer (in flight and delayed), a few milliseconds of Redis;
// beyond, the answer counts the jobs due first and says it is truncated.
const groupTimerScanMax = 5000

// queueGroupsScript reads a physical queue's groups: those in its
// rotation, its blocked set and its in-flight counts (at most ARGV[1] of
// each), with their ready jobs (ready list and priority set entries),
// jobs in flight, weight and whether they are blocked. A queue without
// limits keeps no in-flight records: its jobs in flight are counted from
// its timer (at most ARGV[2] entries, those due first).
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] config
//	KEYS[4] job key prefix (the group prefix is built from it, gpfx)
//	KEYS[5] timer
//	ARGV[1] most groups read of each structure
//	ARGV[2] most timer entries read (a queue without limits)
//
// Returns {jobs in flight, mifq, gmif, 1 when a structure held more than
// ARGV[1] groups (or the timer more than ARGV[2] entries) else 0, then
// per group: name, ready, in flight, weight, blocked (1 or 0)}.
var queueGroupsScript = script(`
local max = tonumber(ARGV[1])
local gp = gpfx(KEYS[4])
local cfg = redis.call('HMGET', KEYS[3], 'mifq', 'gmif', 'mif')
local out = {0, tonumber(cfg[1]) or 0, tonumber(cfg[2]) or 0, 0}
local seen, names = {}, {}
local function add(g)
  if not seen[g] then
    seen[g] = true
    names[#names + 1] = g
  end
end
for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, max - 1)) do add(g) end
if redis.call('LLEN', gp .. 'r') > max then out[4] = 1 end
-- The rotation of the layout before, until consume moved it (grp_migrate).
for _, g in ipairs(redis.call('ZRANGE', gp .. 'a', 0, max - 1)) do add(g) end
if redis.call('ZCARD', gp .. 'a') > max then out[4] = 1 end
local blocked = redis.call('SRANDMEMBER', gp .. 'b', max)
for _, g in ipairs(blocked) do add(g) end
if redis.call('SCARD', gp .. 'b') > max then out[4] = 1 end
-- fl: jobs in flight per group, from the counts of a queue with a limit,
-- else from the timer (the headers of its entries: 'f' in flight).
local fl, lim = {}, (tonumber(cfg[3]) or 0) > 0 or out[3] > 0
if lim then
  out[1] = redis.call('HLEN', gp .. 'i')
  local c = redis.call('HSCAN', gp .. 'c', 0, 'COUNT', max)
  for i = 1, #c[2], 2 do add(c[2][i]) end
  if c[1] ~= '0' then out[4] = 1 end
else
  local tmax = tonumber(ARGV[2])
  local ids = redis.call('ZRANGE', KEYS[5], 0, tmax - 1)
  if #ids >= tmax and redis.call('ZCARD', KEYS[5]) > tmax then out[4] = 1 end
  for _, id in ipairs(ids) do
    local jk = KEYS[4] .. id
    local h = redis.call('GETRANGE', jk, 0, 21)
    if #h == 22 and string.sub(h, 2, 2) == 'f' then
      local g = job_group(jk, h)
      add(g)
      fl[g] = (fl[g] or 0) + 1
      out[1] = out[1] + 1
    end
  end
end
-- The default group has no entry anywhere in an untracked queue.
if not seen[''] and (redis.call('LLEN', KEYS[1]) > 0 or redis.call('ZCARD', KEYS[2]) > 0) then add('') end
for _, g in ipairs(names) do
  local qk, pk = KEYS[1], KEYS[2]
  if g ~= '' then qk, pk = gp .. 'q:' .. g, gp .. 'p:' .. g end
  local ready = redis.call('LLEN', qk) + redis.call('ZCARD', pk)
  local f = fl[g] or 0
  if lim then f = tonumber(redis.call('HGET', gp .. 'c', g)) or 0 end
  if ready > 0 or f > 0 then
    out[#out + 1] = g
    out[#out + 1] = ready
    out[#out + 1] = f
    out[#out + 1] = tonumber(redis.call('HGET', KEYS[3], 'w:' .. g)) or 1
    out[#out + 1] = redis.call('SISMEMBER', gp .. 'b', g)
  end
end
return out
`)

// QueueGroups implements engine.Grouper: the groups of every shard of the
// queue (a group lives in one shard; the default group may be in each,
// and is summed), biggest (ready + in flight) first, at most limit of
// them. The queue's limits are as set (max_in_flight of the whole queue).
func (e *Engine) QueueGroups(ctx context.Context, ns, q string, limit int) (engine.QueueGroups, error) {
	var out engine.QueueGroups
	if err := checkNames(ns, q); err != nil {
		return out, fmt.Errorf("groups: %w", err)
	}
	if limit <= 0 {
		return out, fmt.Errorf("groups: limit must be at least 1: %w", engine.ErrInvalid)
	}
	names := []string{q}
	if sp := e.shardsOf(ns, q); sp != nil {
		names = sp.names
	}
	keys := make([][]string, len(names))
	args := make([][]interface{}, len(names))
	for i, n := range names {
		qn := e.names.get([3]string{ns, n})
		keys[i] = []string{qn.ready, qn.prio, qn.config, qn.jobPrefix, qn.timer}
		args[i] = []interface{}{groupScanMax, groupTimerScanMax}
	}
	byName := map[string]int{}
	for _, c := range e.runEach(ctx, queueGroupsScript, keys, args) {
		res, err := c.Slice()
		if err != nil {
			return out, fmt.Errorf("groups %s/%s: %w", ns, q, err)
		}
		if len(res) < 4 || (len(res)-4)%5 != 0 {
			return out, fmt.Errorf("groups %s/%s: unexpected reply", ns, q)
		}
		n, _ := res[0].(int64)
		mif, _ := res[1].(int64)
		gmif, _ := res[2].(int64)
		trunc, _ := res[3].(int64)
		out.InFlight += n
		out.MaxInFlight, out.GroupMaxInFlight = max(out.MaxInFlight, int(mif)), max(out.GroupMaxInFlight, int(gmif))
		out.Truncated = out.Truncated || trunc == 1
		for i := 4; i < len(res); i += 5 {
			g, _ := res[i].(string)
			ready, _ := res[i+1].(int64)
			fl, _ := res[i+2].(int64)
			w, _ := res[i+3].(int64)
			blocked, _ := res[i+4].(int64)
			k, ok := byName[g]
			if !ok {
				k = len(out.Groups)
				byName[g] = k
				out.Groups = append(out.Groups, engine.GroupStats{Group: g, Weight: int(w)})
			}
			s := &out.Groups[k]
			s.Ready += ready
			s.InFlight += fl
			s.Limited = s.Limited || blocked == 1
		}
	}
	sort.SliceStable(out.Groups, func(i, j int) bool {
		a, b := out.Groups[i], out.Groups[j]
		if a.Ready+a.InFlight != b.Ready+b.InFlight {
			return a.Ready+a.InFlight > b.Ready+b.InFlight
		}
		return a.Group < b.Group
	})
	out.Total = len(out.Groups)
	if len(out.Groups) > limit {
		out.Groups = out.Groups[:limit]
		out.Truncated = true
	}
	if out.Groups == nil {
		out.Groups = []engine.GroupStats{}
	}
	return out, nil
}
