package rdb

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Schedules (engine.Scheduler). A schedule is a hash, sc/{T}ns/q/NAME,
// holding its expression, its job template and its state, the next tick
// above all; the queue's set sn/{T}ns/q names its schedules, and the
// schedule index of the queue's slot group, si/{T} (member ns/q/NAME,
// score = next tick), lets every server find the schedules due soon. All
// of them carry the queue's group tag, as do the keys of a publish: every
// schedule script touches one slot, and keeps the index entry of the
// schedule it changes in the same atomic step, so the index is exact. The
// scheduler walks the groups' indexes as the pump walks the timer indexes.
//
// Exactly once: each server's scheduler (runSchedules) reads a due
// schedule and runs fireScheduleScript, which in one atomic step checks
// that the hash still holds the tick it read (next and ver, compare and
// set), publishes the tick's job with the publish script's own code, and
// moves next on. Two servers racing for a tick both run the script; the
// second finds next moved and does nothing. A server killed before the
// script leaves the tick to the others; killed after it, the tick is
// fired and recorded. There is no lock to lose and no window between the
// claim and the publish.
//
// On time: a tick is published up to scheduleLead ahead as a delayed job
// due at the tick, so the pump makes it ready on time, to the
// millisecond, as any delayed job.

const (
	// scheduleLead is how far ahead of its tick a job is published.
	scheduleLead = time.Second
	// scheduleBatch is the most due schedules one scheduler pass reads.
	scheduleBatch = 100
	// scheduleMinSleep is the shortest pause between scheduler passes.
	scheduleMinSleep = 10 * time.Millisecond
)

// schedIndexSrc is the Lua function the schedule scripts end with:
// sched_index sets schedule member's entry in its group's schedule index
// idx from its hash h: its next tick, or no entry (deleted, paused, no
// tick left).
const schedIndexSrc = `
local function sched_index(h, idx, member)
  local v = redis.call('HMGET', h, 'next', 'paused')
  local n = tonumber(v[1])
  if n and n > 0 and v[2] ~= '1' then
    redis.call('ZADD', idx, v[1], member)
  else
    redis.call('ZREM', idx, member)
  end
end
`

// fireScheduleScript fires one tick of a schedule: it publishes its job
// and moves next on, only if the schedule still holds the tick the caller
// read. Its keys are all of the queue's slot group.
//
//	KEYS[1]   schedule hash sc/{T}ns/q/NAME   KEYS[2] schedule index si/{T}
//	KEYS[3…]  publishScript's KEYS (one job; the group's timer index and
//	          registry included)
//	ARGV[1]   next tick read (ms)   ARGV[2] ver read
//	ARGV[3]   next tick afterwards (ms; 0 = none)
//	ARGV[4]   the tick fired (ms)   ARGV[5] the job's ID
//	ARGV[6]   the schedule's index member ns/q/NAME
//	ARGV[7…]  publishScript's ARGV
//
// Returns {-9} when the schedule changed (another server fired the tick,
// or it was replaced, paused or deleted): nothing written; otherwise
// publishScript's reply, and the schedule and its index entry moved on
// when that is {0, …}, or {-3, limit} (the namespace's quota refused the
// job: the tick is missed rather than tried again and again). A tick the
// memory reserve refuses (admitMemory, before the script) is missed the
// same way, by skipScheduleScript.
var fireScheduleScript = script(schedIndexSrc + `
local function publish(KEYS, ARGV)
` + publishSrc + `
end
local cur = redis.call('HMGET', KEYS[1], 'next', 'ver', 'paused')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] == '1' then return {-9} end
local pk, pa = {}, {}
for i = 3, #KEYS do pk[#pk + 1] = KEYS[i] end
for i = 7, #ARGV do pa[#pa + 1] = ARGV[i] end
local r = publish(pk, pa)
if r[1] == 0 then
  redis.call('HSET', KEYS[1], 'next', ARGV[3], 'last_tick', ARGV[4], 'last_job', ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'fired', 1)
  sched_index(KEYS[1], KEYS[2], ARGV[6])
elseif r[1] == -3 then
  redis.call('HSET', KEYS[1], 'next', ARGV[3])
  sched_index(KEYS[1], KEYS[2], ARGV[6])
end
return r
`)

// skipScheduleScript moves a schedule's next tick on without firing
// (missed ticks under the skip policy), if it still holds the tick read.
//
//	KEYS[1] schedule hash   KEYS[2] schedule index si/{T}
//	ARGV[1] next read   ARGV[2] ver read   ARGV[3] next tick afterwards (ms)
//	ARGV[4] index member
var skipScheduleScript = script(schedIndexSrc + `
local cur = redis.call('HMGET', KEYS[1], 'next', 'ver', 'paused')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] == '1' then return 0 end
redis.call('HSET', KEYS[1], 'next', ARGV[3])
sched_index(KEYS[1], KEYS[2], ARGV[4])
return 1
`)

// indexScheduleScript sets a schedule's index entry from its hash: the
// scheduler's repair of an entry that disagrees with the hash (which the
// scripts here never leave).
//
//	KEYS[1] schedule hash   KEYS[2] schedule index   ARGV[1] index member
var indexScheduleScript = script(schedIndexSrc + `
sched_index(KEYS[1], KEYS[2], ARGV[1])
return 1
`)

// putScheduleScript creates or replaces a schedule, keeping its state
// (last tick, last job, fired, created) and whether it is paused.
//
//	KEYS[1] schedule hash   KEYS[2] the queue's schedule names sn/{T}ns/q
//	KEYS[3] schedule index si/{T}
//	ARGV[1..9] spec, tz, missed, body, ttl (ms), tries, priority,
//	        attributes (JSON or ""), versioned ("1" or "0")
//	ARGV[10] next tick (ms)   ARGV[11] now (ms)   ARGV[12] name
//	ARGV[13] index member   ARGV[14] the template's group ("" = none)
//
// Returns the hash (HGETALL).
var putScheduleScript = script(schedIndexSrc + `
local paused = redis.call('HGET', KEYS[1], 'paused') == '1'
local nxt = ARGV[10]
if paused then nxt = '0' end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'tz', ARGV[2], 'missed', ARGV[3], 'body', ARGV[4],
  'ttl', ARGV[5], 'tries', ARGV[6], 'prio', ARGV[7], 'attrs', ARGV[8], 'versioned', ARGV[9],
  'next', nxt, 'updated', ARGV[11])
if ARGV[14] and ARGV[14] ~= '' then
  redis.call('HSET', KEYS[1], 'group', ARGV[14])
else
  redis.call('HDEL', KEYS[1], 'group')
end
redis.call('HSETNX', KEYS[1], 'created', ARGV[11])
redis.call('HSETNX', KEYS[1], 'paused', '0')
redis.call('HINCRBY', KEYS[1], 'ver', 1)
redis.call('SADD', KEYS[2], ARGV[12])
sched_index(KEYS[1], KEYS[3], ARGV[13])
return redis.call('HGETALL', KEYS[1])
`)

// pauseScheduleScript pauses or resumes a schedule.
//
//	KEYS[1] schedule hash   KEYS[2] schedule index si/{T}
//	ARGV[1] "1" pause, "0" resume
//	ARGV[2] next tick when resumed (ms)   ARGV[3] now (ms)
//	ARGV[4] the spec and ARGV[5] the zone next was computed for
//	ARGV[6] index member
//
// Returns the hash, {} when there is no schedule, or {"changed"} when its
// expression changed meanwhile (the caller computes next again).
var pauseScheduleScript = script(schedIndexSrc + `
local cur = redis.call('HMGET', KEYS[1], 'paused', 'spec', 'tz')
if not cur[1] then return {} end
if cur[1] ~= ARGV[1] then
  if ARGV[1] == '0' and (cur[2] ~= ARGV[4] or cur[3] ~= ARGV[5]) then return {'changed'} end
  local nxt = ARGV[2]
  if ARGV[1] == '1' then nxt = '0' end
  redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'next', nxt, 'updated', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'ver', 1)
  sched_index(KEYS[1], KEYS[2], ARGV[6])
end
return redis.call('HGETALL', KEYS[1])
`)

// deleteScheduleScript deletes a schedule.
//
//	KEYS[1] schedule hash   KEYS[2] schedule names   KEYS[3] schedule index
//	ARGV[1] name   ARGV[2] index member
var deleteScheduleScript = script(`
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
return redis.call('DEL', KEYS[1])
`)

var scheduleScripts = []*redis.Script{fireScheduleScript, skipScheduleScript, indexScheduleScript, putScheduleScript, pauseScheduleScript, deleteScheduleScript}

var _ engine.Scheduler = (*Engine)(nil)

func checkSchedule(ns, q, name string) error {
	if err := checkNames(ns, q); err != nil {
		return err
	}
	if !engine.ValidScheduleName(name) {
		return fmt.Errorf("schedule name %q: %w", name, engine.ErrInvalid)
	}
	return nil
}

// PutSchedule implements engine.Scheduler.
func (e *Engine) PutSchedule(ctx context.Context, s *engine.Schedule) (*engine.Schedule, error) {
	if err := checkSchedule(s.Namespace, s.Queue, s.Name); err != nil {
		return nil, err
	}
	c, err := engine.ParseCron(s.Spec, s.TZ)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, engine.ErrInvalid)
	}
	missed, err := engine.ParseMissed(string(s.Missed))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, engine.ErrInvalid)
	}
	if s.Tries == 0 || s.TTL < 0 || s.Priority < 0 || s.Priority > engine.MaxPriority || len(s.Body) > engine.MaxBodySize {
		return nil, fmt.Errorf("schedule template: tries ≥ 1, ttl ≥ 0, priority 0..%d: %w", engine.MaxPriority, engine.ErrInvalid)
	}
	if s.Group != "" && !engine.ValidGroup(s.Group) {
		return nil, fmt.Errorf("schedule template: group %q: 1..%d characters of [-_A-Za-z0-9]: %w", s.Group, engine.MaxGroupLength, engine.ErrInvalid)
	}
	tz := s.TZ
	if tz == "" {
		tz = "UTC"
	}
	attrs := ""
	if len(s.Attributes) > 0 {
		b, err := json.Marshal(s.Attributes)
		if err != nil {
			return nil, err
		}
		attrs = string(b)
	}
	versioned := "0"
	if s.Versioned {
		versioned = "1"
	}
	now := e.now()
	next := c.Next(now)
	key := scheduleKey(s.Namespace, s.Queue, s.Name)
	keys := []string{key, scheduleNamesKey(s.Namespace, s.Queue), scheduleIndexKey(slotGroup(s.Namespace, s.Queue))}
	res, err := e.run(ctx, putScheduleScript, keys,
		s.Spec, tz, string(missed), s.Body, durMS(s.TTL), s.Tries, s.Priority, attrs, versioned,
		ms(next), ms(now), s.Name, scheduleMember(s.Namespace, s.Queue, s.Name), s.Group).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("put schedule %s/%s/%s: %w", s.Namespace, s.Queue, s.Name, err)
	}
	out := decodeSchedule(s.Namespace, s.Queue, s.Name, pairs(res))
	e.wakeScheduler()
	return out, nil
}

// GetSchedule implements engine.Scheduler.
func (e *Engine) GetSchedule(ctx context.Context, ns, q, name string) (*engine.Schedule, error) {
	if err := checkSchedule(ns, q, name); err != nil {
		return nil, err
	}
	h, err := retried(ctx, e, func() *redis.MapStringStringCmd { return e.rdb.HGetAll(ctx, scheduleKey(ns, q, name)) }).Result()
	if err != nil {
		return nil, fmt.Errorf("get schedule %s/%s/%s: %w", ns, q, name, err)
	}
	if len(h) == 0 {
		return nil, engine.ErrScheduleNotFound
	}
	return decodeSchedule(ns, q, name, h), nil
}

// ListSchedules implements engine.Scheduler.
func (e *Engine) ListSchedules(ctx context.Context, ns, q string) ([]*engine.Schedule, error) {
	if err := checkNames(ns, q); err != nil {
		return nil, err
	}
	names, err := retried(ctx, e, func() *redis.StringSliceCmd { return e.rdb.SMembers(ctx, scheduleNamesKey(ns, q)) }).Result()
	if err != nil {
		return nil, fmt.Errorf("list schedules %s/%s: %w", ns, q, err)
	}
	sort.Strings(names)
	out := make([]*engine.Schedule, 0, len(names))
	if len(names) == 0 {
		return out, nil
	}
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGetAll(ctx, scheduleKey(ns, q, n))
	}
	if _, err := e.exec(ctx, pipe); err != nil {
		return nil, fmt.Errorf("list schedules %s/%s: %w", ns, q, err)
	}
	for i, n := range names {
		if h := cmds[i].Val(); len(h) > 0 {
			out = append(out, decodeSchedule(ns, q, n, h))
		}
	}
	return out, nil
}

// DeleteSchedule implements engine.Scheduler.
func (e *Engine) DeleteSchedule(ctx context.Context, ns, q, name string) error {
	if err := checkSchedule(ns, q, name); err != nil {
		return err
	}
	keys := []string{scheduleKey(ns, q, name), scheduleNamesKey(ns, q), scheduleIndexKey(slotGroup(ns, q))}
	n, err := e.run(ctx, deleteScheduleScript, keys, name, scheduleMember(ns, q, name)).Int64()
	if err != nil {
		return fmt.Errorf("delete schedule %s/%s/%s: %w", ns, q, name, err)
	}
	if n == 0 {
		return engine.ErrScheduleNotFound
	}
	return nil
}

// PauseSchedule implements engine.Scheduler.
func (e *Engine) PauseSchedule(ctx context.Context, ns, q, name string, paused bool) (*engine.Schedule, error) {
	if err := checkSchedule(ns, q, name); err != nil {
		return nil, err
	}
	key := scheduleKey(ns, q, name)
	flag := "0"
	if paused {
		flag = "1"
	}
	for attempt := 0; ; attempt++ {
		cur, err := retried(ctx, e, func() *redis.SliceCmd { return e.rdb.HMGet(ctx, key, "spec", "tz") }).Result()
		if err != nil {
			return nil, fmt.Errorf("pause schedule %s/%s/%s: %w", ns, q, name, err)
		}
		spec, _ := cur[0].(string)
		tz, _ := cur[1].(string)
		if cur[0] == nil {
			return nil, engine.ErrScheduleNotFound
		}
		var next int64
		now := e.now()
		if !paused {
			c, err := e.cron(spec, tz)
			if err != nil {
				return nil, err
			}
			next = ms(c.Next(now))
		}
		res, err := e.run(ctx, pauseScheduleScript, []string{key, scheduleIndexKey(slotGroup(ns, q))},
			flag, next, ms(now), spec, tz, scheduleMember(ns, q, name)).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("pause schedule %s/%s/%s: %w", ns, q, name, err)
		}
		switch {
		case len(res) == 0:
			return nil, engine.ErrScheduleNotFound
		case len(res) == 1 && attempt < 3:
			continue // replaced meanwhile: compute next again
		}
		e.wakeScheduler()
		return decodeSchedule(ns, q, name, pairs(res)), nil
	}
}

// reindexSchedule sets a schedule's index entry from its hash.
func (e *Engine) reindexSchedule(ctx context.Context, ns, q, name string) error {
	member := scheduleMember(ns, q, name)
	keys := []string{scheduleKey(ns, q, name), scheduleIndexKey(slotGroup(ns, q))}
	if err := e.run(ctx, indexScheduleScript, keys, member).Err(); err != nil {
		return fmt.Errorf("schedule index %s: %w", member, err)
	}
	return nil
}

// crons caches parsed expressions by "spec\x00tz".
var crons sync.Map

func (e *Engine) cron(spec, tz string) (*engine.Cron, error) {
	k := spec + "\x00" + tz
	if c, ok := crons.Load(k); ok {
		return c.(*engine.Cron), nil
	}
	c, err := engine.ParseCron(spec, tz)
	if err != nil {
		return nil, err
	}
	crons.Store(k, c)
	return c, nil
}

func (e *Engine) wakeScheduler() {
	select {
	case e.schedWake <- struct{}{}:
	default:
	}
}

// runSchedules fires due ticks until ctx is done (every server runs it).
func (e *Engine) runSchedules(ctx context.Context) {
	e.runWoken(ctx, e.schedWake, "scheduler", func(ctx context.Context) (time.Duration, error) {
		next, err := e.ScheduleOnce(ctx)
		if err != nil || next <= 0 {
			return e.maxWait, err
		}
		// At least a few milliseconds: a tick another server is firing
		// stays in the index until that server updates it.
		return min(max(time.Duration(next-ms(e.now()))*time.Millisecond-scheduleLead, scheduleMinSleep), e.maxWait), nil
	})
}

// ScheduleOnce fires every tick due within the publish lead, in every
// slot group, and returns the earliest next tick of the pool (ms), or 0
// when there is none. Several servers may run it at once: each tick fires
// once.
func (e *Engine) ScheduleOnce(ctx context.Context) (int64, error) {
	groups := make([]int, slotGroups)
	for g := range groups {
		groups[g] = g
	}
	// nexts[g] is group g's earliest tick beyond the horizon, 0 for none.
	var nexts [slotGroups]int64
	// Rounds until no group has a due tick left: a schedule whose next
	// tick falls within the lead too (a late server catching up) fires
	// again. Each round reads the heads of the indexes of the groups
	// still in play as the pump reads the timer indexes (indexHeads: one
	// script call on one Redis, one per group in one pipeline on a
	// cluster); a group is read again only when it had due ticks. Every
	// tick handled moves the schedule's index entry (the scripts keep it
	// with the hash), so the rounds end.
	for round := 0; len(groups) > 0 && round < 1000; round++ {
		horizon := ms(e.now().Add(scheduleLead))
		keys := make([]string, len(groups))
		for i, g := range groups {
			keys[i] = scheduleIndexKey(g)
		}
		heads, err := e.indexHeads(ctx, keys, scheduleBatch)
		if err != nil {
			return 0, fmt.Errorf("schedules: %w", err)
		}
		var firstErr error
		again := groups[:0:0]
		for i, g := range groups {
			nexts[g] = 0
			due := false
			for _, h := range heads[i] {
				if h.score > horizon {
					nexts[g] = h.score
					break
				}
				due = true
				if err := e.fireDue(ctx, g, h.member); err != nil {
					e.log.WithError(err).WithField("schedule", h.member).Warn("schedule tick failed")
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			if due {
				again = append(again, g)
			}
		}
		if firstErr != nil {
			return 0, firstErr
		}
		groups = again
	}
	var first int64
	for _, h := range nexts {
		if h > 0 && (first == 0 || h < first) {
			first = h
		}
	}
	return first, nil
}

// fireDue handles one schedule that group g's index says is due: it fires
// its tick (or skips missed ones); a schedule the hash says is not due has
// its index entry set from the hash.
func (e *Engine) fireDue(ctx context.Context, g int, member string) error {
	parts := strings.SplitN(member, "/", 3)
	if len(parts) != 3 || checkSchedule(parts[0], parts[1], parts[2]) != nil || slotGroup(parts[0], parts[1]) != g {
		return retried(ctx, e, func() *redis.IntCmd { return e.rdb.ZRem(ctx, scheduleIndexKey(g), member) }).Err()
	}
	ns, q, name := parts[0], parts[1], parts[2]
	key := scheduleKey(ns, q, name)
	h, err := retried(ctx, e, func() *redis.MapStringStringCmd { return e.rdb.HGetAll(ctx, key) }).Result()
	if err != nil {
		return err
	}
	now := e.now()
	next, _ := strconv.ParseInt(h["next"], 10, 64)
	if len(h) == 0 || h["paused"] == "1" || next <= 0 || next > ms(now.Add(scheduleLead)) {
		return e.reindexSchedule(ctx, ns, q, name)
	}
	c, err := e.cron(h["spec"], h["tz"])
	if err != nil {
		// Stored by PutSchedule, so parsed once already: a zone the
		// server's tzdata lacks. Leave it for a server that has it.
		return fmt.Errorf("schedule %s: %w", member, err)
	}
	s := decodeSchedule(ns, q, name, h)
	plan := c.PlanTick(time.UnixMilli(next), now, s.Missed)
	newNext := int64(0)
	if !plan.Next.IsZero() {
		newNext = ms(plan.Next)
	}
	index := scheduleIndexKey(g)
	if !plan.Fire {
		n, err := e.run(ctx, skipScheduleScript, []string{key, index}, h["next"], h["ver"], newNext, member).Int64()
		if err != nil {
			return err
		}
		if n == 1 {
			e.log.WithField("schedule", member).Info("missed ticks skipped")
		}
		return nil
	}
	req := &engine.PublishRequest{
		Namespace: ns, Queue: q, Body: s.Body, Tries: s.Tries, Priority: s.Priority,
		Attributes: s.Attributes, Versioned: s.Versioned, DueAt: plan.Tick, Group: s.Group,
	}
	// A tick's job goes to the queue itself (shard 0 of a sharded queue),
	// grouped or not: the fire is one script call with the schedule's
	// keys, which are in shard 0's slot.

	if s.TTL > 0 {
		// The template's TTL counts from the tick.
		req.TTL = s.TTL + max(plan.Tick.Sub(now), 0)
	}
	if err := e.admitMemory(ns, q, jobBytes(req)); err != nil {
		// The memory reserve refuses the namespace (it holds at least its
		// share of a node in its reserve): the tick is missed, as when
		// its quota refuses it, rather than tried again and again.
		if _, serr := e.run(ctx, skipScheduleScript, []string{key, index}, h["next"], h["ver"], newNext, member).Int64(); serr != nil {
			return serr
		}
		return fmt.Errorf("schedule %s: tick missed: %w", member, err)
	}
	for attempt := 0; ; attempt++ {
		qn, keys, args, id, err := e.publishCall(req, now)
		if err != nil {
			return err
		}
		record := args[5] == "1"
		keys = append([]string{key, index}, keys...)
		args = append([]interface{}{h["next"], h["ver"], newNext, ms(plan.Tick), id, member}, args...)
		res, err := e.run(ctx, fireScheduleScript, keys, args...).Slice()
		if err != nil {
			return err
		}
		code, _ := res[0].(int64)
		switch {
		case code == -9:
			return nil // another server fired it, or the schedule changed
		case code == -3 && len(res) == 2:
			return fmt.Errorf("schedule %s: tick missed: %w", member, e.quotaErr(ns, res[1]))
		case code == 0 && len(res) == 3:
			if earliest, _ := res[2].(int64); earliest > 0 {
				e.wakePump()
			}
			if record {
				qn.recorded.Store(true)
			}
			delayed := 0
			if plan.Tick.After(now) {
				delayed = 1
			}
			e.metrics.publishedPool(1, delayed)
			e.metrics.publishedQueue(ns, q, qn, 1)
			return nil
		case code == 1 && attempt < maxPublishRetries:
			continue // the generated ID collided: a fresh one
		}
		return fmt.Errorf("schedule %s: unexpected reply %v", member, res)
	}
}

// publishCall builds publishScript's keys and arguments for one job of a
// fresh ID (as publishValid does for a job without a replaced job or
// idempotency key): all of the queue's slot group, its timer index and
// registry included; the queue is recorded in the registry unless this
// engine has done so.
func (e *Engine) publishCall(r *engine.PublishRequest, now time.Time) (*queueNames, []string, []interface{}, string, error) {
	if err := checkPublish(r.Namespace, r.Queue, r); err != nil {
		return nil, nil, nil, "", err
	}
	qn := e.names.get([3]string{r.Namespace, r.Queue})
	nowMS := ceilMS(now)
	id := engine.NewJobID(now, jobDelay(r, now), r.Versioned)
	value, due, err := jobValue(r, nowMS)
	if err != nil {
		return nil, nil, nil, "", err
	}
	keys := []string{qn.ready, qn.timer, qn.index, qn.prio, qn.config, qn.ready, qn.ready, qn.registry, qn.jobPrefix + id, qn.usage}
	aj, ab := e.allowance(r.Namespace, qn.group)
	args := []interface{}{qn.argMember, qn.argChannel, qn.argWake, "", "0", flag(!qn.recorded.Load()), e.pub,
		packEntry(r.Tries, id), value, durMS(r.TTL), scriptDue(due, nowMS), r.Priority, aj, ab}
	return qn, keys, args, id, nil
}

// pairs turns an HGETALL reply into a map.
func pairs(kv []string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// decodeSchedule reads a schedule hash.
func decodeSchedule(ns, q, name string, h map[string]string) *engine.Schedule {
	s := &engine.Schedule{
		Namespace: ns, Queue: q, Name: name,
		Spec: h["spec"], TZ: h["tz"], Missed: engine.MissedPolicy(h["missed"]),
		Paused: h["paused"] == "1", Body: []byte(h["body"]), Versioned: h["versioned"] == "1", Group: h["group"],
		Next: msTime(h["next"]), LastTick: msTime(h["last_tick"]), LastJob: h["last_job"],
		Created: msTime(h["created"]), Updated: msTime(h["updated"]),
	}
	if s.Missed == "" {
		s.Missed = engine.MissedSkip
	}
	ttl, _ := strconv.ParseInt(h["ttl"], 10, 64)
	s.TTL = time.Duration(ttl) * time.Millisecond
	tries, _ := strconv.ParseUint(h["tries"], 10, 16)
	s.Tries = uint16(tries)
	s.Priority, _ = strconv.Atoi(h["prio"])
	s.Fired, _ = strconv.ParseInt(h["fired"], 10, 64)
	if a := h["attrs"]; a != "" {
		_ = json.Unmarshal([]byte(a), &s.Attributes)
	}
	return s
}
