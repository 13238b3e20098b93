package rdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Upgrade from the layout before slot groups (Kairos up to issue #22,
// layout 1 in layout.go), in which a queue's keys had the tag {ns/q}, one
// pool-wide sorted set timer_index indexed the timers, and lmstfy's hashes
// m/ns and m/ns/NS registered the queues. When a pool has no layout marker,
// New moves such data to the slot-group layout before the engine serves
// anything: every queue of the old registries and of the old index that
// holds data of that layout (a key tagged {ns/q}, or an entry of the old
// index), one script per queue (its jobs, ready list, priority set, timer,
// dead letter, settings, idempotency keys, index entry and registry entry,
// schedules and their schedule_index entries); then the old indexes are
// deleted, and the registry entries of the queues moved.
//
// m/ns and m/ns/NS are also lmstfy's own registries, so a queue found
// there with no data of Kairos's old layout is left alone, registry entry
// included: it may be lmstfy's (issue #30; engine/lmstfy reads lmstfy's
// layout and imports it when asked). The old layout never worked on a
// cluster (every script failed with CROSSSLOT), so only standalone and
// Sentinel pools are looked at; the upgrade script touches keys of two
// tags, which one Redis allows.

const (
	legacyTimerIndex    = "timer_index"
	legacyNamespaces    = "m/ns"
	legacyScheduleIndex = "schedule_index" // on main before slot groups, never released
)

func legacyQueues(ns string) string            { return "m/ns/" + ns }
func legacyBase(ns, q string) string           { return "{" + ns + "/" + q + "}" }
func legacyKey(kind, ns, q string) string      { return kind + "/" + legacyBase(ns, q) }
func legacyJobPrefix(ns, q string) string      { return "j/" + legacyBase(ns, q) + "/" }
func legacyUniqueKey(ns, q, key string) string { return "u/" + legacyBase(ns, q) + "/" + key }

// upgradeQueueScript moves one queue from the old layout to the new one.
// Entries of the old ready list and dead letter go to the consume end of
// the new ones in their order (they are older than any entry a new server
// made); timer and priority entries keep their scores; settings the new
// hash lacks are copied (seq: the larger); job bodies and idempotency keys
// are renamed (RENAME keeps their TTL).
//
//	KEYS[1..6]  old ready list, timer, priority set, config, dead letter, job key prefix
//	KEYS[7..12] new ready list, timer, priority set, config, dead letter, job key prefix
//	KEYS[13] old timer_index   KEYS[14] the group's timer index
//	KEYS[15] the group's registry   KEYS[16] old m/ns/NS
//	KEYS[17] old schedule names sn/{ns/q}   KEYS[18] new schedule names
//	KEYS[19] old schedule key prefix sc/{ns/q}/   KEYS[20] new schedule key prefix
//	KEYS[21] old schedule_index   KEYS[22] the group's schedule index
//	KEYS[23…] pairs: an old idempotency key, its new name
//	KEYS[#KEYS] the group's usage hash (the jobs moved count as published)
//	ARGV[1] index member ns/q   ARGV[2] queue name
//	ARGV[3] the queue's schedule member prefix ns/q/
//
// Returns the number of job bodies moved.
var upgradeQueueScript = script(schedIndexSrc + `
local ojp, njp = KEYS[6], KEYS[12]
local moved, bytes = 0, 0
local function mv(id)
  if id ~= '' and redis.call('EXISTS', ojp .. id) == 1 then
    bytes = bytes + redis.call('STRLEN', ojp .. id)
    redis.call('RENAME', ojp .. id, njp .. id)
    moved = moved + 1
  end
end
for _, p in ipairs({{KEYS[1], KEYS[7]}, {KEYS[5], KEYS[11]}}) do
  local es = redis.call('LRANGE', p[1], 0, -1)
  for _, e in ipairs(es) do mv(eid(e)) end
  for i = 1, #es, 1000 do redis.call('RPUSH', p[2], unpack(es, i, math.min(i + 999, #es))) end
  redis.call('DEL', p[1])
end
for _, p in ipairs({{KEYS[2], KEYS[8], false}, {KEYS[3], KEYS[9], true}}) do
  local ms = redis.call('ZRANGE', p[1], 0, -1, 'WITHSCORES')
  for i = 1, #ms, 2 do
    if p[3] then mv(eid(ms[i])) else mv(ms[i]) end
    redis.call('ZADD', p[2], ms[i + 1], ms[i])
  end
  redis.call('DEL', p[1])
end
local cfg = redis.call('HGETALL', KEYS[4])
for i = 1, #cfg, 2 do
  if cfg[i] == 'seq' then
    local cur = tonumber(redis.call('HGET', KEYS[10], 'seq') or '0')
    if tonumber(cfg[i + 1]) > cur then redis.call('HSET', KEYS[10], 'seq', cfg[i + 1]) end
  else
    redis.call('HSETNX', KEYS[10], cfg[i], cfg[i + 1])
  end
end
redis.call('DEL', KEYS[4])
for _, name in ipairs(redis.call('SMEMBERS', KEYS[17])) do
  if redis.call('EXISTS', KEYS[19] .. name) == 1 then redis.call('RENAME', KEYS[19] .. name, KEYS[20] .. name) end
  redis.call('SADD', KEYS[18], name)
  redis.call('ZREM', KEYS[21], ARGV[3] .. name)
  sched_index(KEYS[20] .. name, KEYS[22], ARGV[3] .. name)
end
redis.call('DEL', KEYS[17])
for i = 23, #KEYS - 1, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('RENAME', KEYS[i], KEYS[i + 1]) end
end
redis.call('ZREM', KEYS[13], ARGV[1])
local first = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
if #first > 0 then
  local cur = redis.call('ZSCORE', KEYS[14], ARGV[1])
  if not cur or tonumber(cur) > tonumber(first[2]) then redis.call('ZADD', KEYS[14], first[2], ARGV[1]) end
end
redis.call('HSET', KEYS[15], ARGV[1], 1)
redis.call('HDEL', KEYS[16], ARGV[2])
usage_add(KEYS[#KEYS], KEYS[7], moved, bytes)
return moved
`)

// upgrade moves the pool's old-layout data, if any, to the slot-group
// layout (see the top of this file). It returns the queues moved.
func (e *Engine) upgrade(ctx context.Context) (int, error) {
	if e.cluster {
		return 0, nil
	}
	n, err := e.rdb.Exists(ctx, legacyNamespaces, legacyTimerIndex, legacyScheduleIndex).Result()
	if err != nil || n == 0 {
		return 0, err
	}
	queues := map[[2]string]bool{}
	nss, err := e.rdb.HKeys(ctx, legacyNamespaces).Result()
	if err != nil {
		return 0, err
	}
	for _, ns := range nss {
		qs, err := e.rdb.HKeys(ctx, legacyQueues(ns)).Result()
		if err != nil {
			return 0, err
		}
		for _, q := range qs {
			queues[[2]string{ns, q}] = true
		}
	}
	members, err := e.rdb.ZRange(ctx, legacyTimerIndex, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	for _, m := range members {
		if ns, q, ok := cutMember(m); ok {
			queues[[2]string{ns, q}] = true
		}
	}
	// Idempotency keys are found by a SCAN of the keyspace: an old one is
	// u/{ns/q}/KEY (its tag holds a slash; a new one's is two letters);
	// so are the queues with schedules (sn/{ns/q}).
	unique := map[[2]string][]string{}
	iter := e.rdb.Scan(ctx, 0, "u/{*", 10000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		tag, key, ok := strings.Cut(k[len("u/{"):], "}/")
		if !ok {
			continue
		}
		ns, q, ok := cutMember(tag)
		if !ok || !engine.ValidName(ns) || !engine.ValidName(q) {
			continue
		}
		unique[[2]string{ns, q}] = append(unique[[2]string{ns, q}], key)
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	for nq := range unique {
		queues[nq] = true
	}
	iter = e.rdb.Scan(ctx, 0, "sn/{*}", 10000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if ns, q, ok := cutMember(strings.TrimSuffix(k[len("sn/{"):], "}")); ok && engine.ValidName(ns) && engine.ValidName(q) {
			queues[[2]string{ns, q}] = true
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	// Only queues with data of the old layout are moved: a name in m/ns/NS
	// alone may be lmstfy's queue.
	indexed := map[[2]string]bool{}
	for _, m := range members {
		if ns, q, ok := cutMember(m); ok {
			indexed[[2]string{ns, q}] = true
		}
	}
	var candidates [][2]string
	var exists []*redis.IntCmd
	_, err = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for nq := range queues {
			ns, q := nq[0], nq[1]
			if !engine.ValidName(ns) || !engine.ValidName(q) {
				continue
			}
			candidates = append(candidates, nq)
			exists = append(exists, p.Exists(ctx, legacyKey("q", ns, q), legacyKey("t", ns, q), legacyKey("p", ns, q),
				legacyKey("c", ns, q), legacyKey("d", ns, q), "sn/"+legacyBase(ns, q)))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	moved := 0
	for i, nq := range candidates {
		ns, q := nq[0], nq[1]
		if exists[i].Val() == 0 && !indexed[nq] && len(unique[nq]) == 0 {
			continue
		}
		qn := newQueueNames(ns, q)
		keys := []string{
			legacyKey("q", ns, q), legacyKey("t", ns, q), legacyKey("p", ns, q), legacyKey("c", ns, q), legacyKey("d", ns, q), legacyJobPrefix(ns, q),
			qn.ready, qn.timer, qn.prio, qn.config, qn.dead, qn.jobPrefix,
			legacyTimerIndex, qn.index, qn.registry, legacyQueues(ns),
			"sn/" + legacyBase(ns, q), scheduleNamesKey(ns, q), "sc/" + legacyBase(ns, q) + "/", "sc/" + queueBase(ns, q) + "/",
			legacyScheduleIndex, scheduleIndexKey(qn.group),
		}
		for _, key := range unique[nq] {
			keys = append(keys, legacyUniqueKey(ns, q, key), uniqueKey(ns, q, key))
		}
		keys = append(keys, qn.usage)
		jobs, err := upgradeQueueScript.Run(ctx, e.rdb, keys, qn.member, q, qn.member+"/").Int64()
		if err != nil {
			return moved, fmt.Errorf("queue %s/%s: %w", ns, q, err)
		}
		e.log.WithField("namespace", ns).WithField("queue", q).WithField("jobs", jobs).Info("moved a queue from the layout before slot groups to the slot-group layout")
		moved++
	}
	// Every queue moved: the old indexes go, and each old registry whose
	// entries were all moved (the script removed them; Redis deletes an
	// emptied hash) leaves m/ns. Entries of queues that were not moved
	// stay: they may be lmstfy's.
	for _, ns := range nss {
		n, err := e.rdb.Exists(ctx, legacyQueues(ns)).Result()
		if err != nil {
			return moved, err
		}
		if n == 0 {
			if err := e.rdb.HDel(ctx, legacyNamespaces, ns).Err(); err != nil {
				return moved, err
			}
		}
	}
	return moved, e.rdb.Del(ctx, legacyTimerIndex, legacyScheduleIndex).Err()
}
