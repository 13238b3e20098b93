package rdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// What the dashboard reads (engine.Dashboard): sizes of many queues in few
// round trips, a page of queues' details in one, jobs by state, a job by ID.

var _ engine.Dashboard = (*Engine)(nil)

const (
	sizesPerPipeline = 500  // queues per pipeline of NamespaceQueues (4 commands each)
	inFlightExact    = 500  // timers up to this size are split exactly
	inFlightSample   = 100  // entries sampled from a larger timer
	listScanBudget   = 1000 // entries one ListJobs call may look at
	findJobBudget    = 2 * time.Second
)

// queueDetailScript reads what the queue table shows of one queue.
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] dead letter
//	KEYS[5] config   KEYS[6] job key prefix j/{T}ns/q/
//	KEYS[7..] the history hashes of the recent minutes' blocks
//	ARGV[1] "1" when the last minute of ARGV[4..] is the current one
//	ARGV[2] exact split up to   ARGV[3] sample size (0: no split)
//	ARGV[4..] per recent minute: the index in KEYS of its block's hash, and
//	its place in the block
//
// Returns {ready, timer, dead, paused, in flight, exact, oldest list ID,
// first priority ID, published, consumed, acked, retried, dead (recent),
// then the same five of the current minute (0 without ARGV[1]), then
// max_in_flight (mifq), the jobs in flight it counts and 1 when the
// queue is held at its limit with ready jobs (else 0)}.
var queueDetailScript = script(`
local jp = KEYS[6]
-- gn: the ready entries of the queue's groups; mif, mifq: this physical
-- queue's part of max_in_flight and the queue's (groups_scripts.go,
-- limits.go).
local cfg = redis.call('HMGET', KEYS[5], 'paused', 'gn', 'grp', 'mif', 'mifq')
local ready = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + (tonumber(cfg[2]) or 0)
local timer = redis.call('ZCARD', KEYS[3])
local dead = redis.call('LLEN', KEYS[4])
local paused = 0
if cfg[1] == '1' then paused = 1 end
-- In flight as the limit counts it (read only for a queue with a limit),
-- and held: the consume script gives this queue nothing while its ready
-- jobs wait (consumeScript's room, inflight_room).
local mif, mifq, counted, held = tonumber(cfg[4]) or 0, tonumber(cfg[5]) or 0, 0, 0
if mif > 0 or mifq > 0 then
  counted = redis.call('HLEN', gpfx(jp) .. 'i')
  if mif > 0 and counted >= mif and ready > 0 then held = 1 end
end
local inflight, exact = 0, 1
local ids = {}
if timer <= tonumber(ARGV[2]) then
  ids = redis.call('ZRANGE', KEYS[3], 0, -1)
else
  exact = 0
  if tonumber(ARGV[3]) > 0 then ids = redis.call('ZRANDMEMBER', KEYS[3], tonumber(ARGV[3])) end
end
local seen = 0
for _, id in ipairs(ids) do
  local st = redis.call('GETRANGE', jp .. id, 1, 1)
  if st == 'f' then inflight = inflight + 1 end
  seen = seen + 1
end
if exact == 0 and seen > 0 then inflight = math.floor(inflight * timer / seen + 0.5) end
local oldest, first = ready_heads(KEYS[1], KEYS[2], jp)
local sums = {0, 0, 0, 0, 0}
local cur = {0, 0, 0, 0, 0}
for i = 4, #ARGV - 1, 2 do
  local d = ARGV[i + 1]
  local v = redis.call('HMGET', KEYS[tonumber(ARGV[i])], d .. 'p', d .. 'c', d .. 'a', d .. 'r', d .. 'd')
  local to = sums
  if ARGV[1] == '1' and i + 1 == #ARGV then to = cur end
  for k = 1, 5 do to[k] = to[k] + (tonumber(v[k]) or 0) end
end
return {ready, timer, dead, paused, inflight, exact, oldest, first, sums[1], sums[2], sums[3], sums[4], sums[5],
  cur[1], cur[2], cur[3], cur[4], cur[5], mifq, counted, held}
`)

// readyHeadsScript returns the IDs of the live jobs at a queue's consume
// ends (ready_heads), for Stats; in a tracked queue, those of the 16
// groups next in its rotation too (the least served, where the oldest
// ready job waits; groups_scripts.go).
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] job key prefix j/{T}ns/q/
//
// Returns {oldest list ID, first priority ID, then the same per group},
// each empty when none.
var readyHeadsScript = script(`
local oldest, first = ready_heads(KEYS[1], KEYS[2], KEYS[3])
local out = {oldest, first}
local gp = gpfx(KEYS[3])
for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, 15)) do
  if g ~= '' then
    local o, f = ready_heads(gp .. 'q:' .. g, gp .. 'p:' .. g, KEYS[3])
    out[#out + 1] = o
    out[#out + 1] = f
  end
end
return out
`)

// listJobsScript lists jobs of a queue from a cursor: the ready ones (the
// priority set, then the ready list from its consume end, then those of
// the 100 groups next in a tracked queue's rotation) or the timer's (by
// due time) of one state.
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] job key prefix
//	ARGV[2] list: ready, delayed, in_flight, scheduled
//	ARGV[3] cursor   ARGV[4] most jobs   ARGV[5] most entries to look at
//
// Returns {next cursor or -1, then id, value, PTTL per job}.
var listJobsScript = script(`
local jp, list = KEYS[4], ARGV[2]
local cur, lim, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {-1}
local n = 0
local function take(id, want)
  if #id == 0 then return end
  local v = redis.call('GET', jp .. id)
  if not v or #v < 22 then return end
  local st = string.sub(v, 2, 2)
  if want == 'ready' then
    if st ~= 'r' and st ~= 'd' then return end
  elseif want == 'delayed' then
    if st ~= 'd' then return end
  elseif want == 'in_flight' then
    if st ~= 'f' then return end
  elseif st ~= 'd' and st ~= 'f' then
    return
  end
  out[#out + 1] = id
  out[#out + 1] = v
  out[#out + 1] = redis.call('PTTL', jp .. id)
  n = n + 1
end
local pos = cur
if list == 'ready' then
  -- The priority set and ready list of the queue, then those of the 100
  -- groups next in a tracked queue's rotation (groups_scripts.go), one
  -- after the other: the cursor counts entries across them.
  local parts = {{KEYS[2], true}, {KEYS[1], false}}
  local gp = gpfx(jp)
  for _, g in ipairs(redis.call('LRANGE', gp .. 'r', 0, 99)) do
    if g ~= '' then
      parts[#parts + 1] = {gp .. 'p:' .. g, true}
      parts[#parts + 1] = {gp .. 'q:' .. g, false}
    end
  end
  local total = 0
  for _, pt in ipairs(parts) do
    if pt[2] then pt[3] = redis.call('ZCARD', pt[1]) else pt[3] = redis.call('LLEN', pt[1]) end
    pt[4] = total
    total = total + pt[3]
  end
  local k = 1
  while n < lim and budget > 0 and pos < total do
    while pos >= parts[k][4] + parts[k][3] do k = k + 1 end
    local pt = parts[k]
    local i = pos - pt[4]
    local chunk = math.min(100, budget, pt[3] - i)
    local es
    if pt[2] then
      es = redis.call('ZRANGE', pt[1], i, i + chunk - 1)
    else
      local got = redis.call('LRANGE', pt[1], -(i + chunk), -(i + 1))
      es = {}
      for j = #got, 1, -1 do es[#es + 1] = got[j] end
    end
    if #es == 0 then break end
    for _, e in ipairs(es) do
      pos = pos + 1
      budget = budget - 1
      take(eid(e), 'ready')
      if n >= lim then break end
    end
  end
  if pos < total then out[1] = pos end
else
  local total = redis.call('ZCARD', KEYS[3])
  while n < lim and budget > 0 and pos < total do
    local chunk = math.min(100, budget)
    local ids = redis.call('ZRANGE', KEYS[3], pos, pos + chunk - 1)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      pos = pos + 1
      budget = budget - 1
      take(id, list)
      if n >= lim then break end
    end
  end
  if pos < total then out[1] = pos end
end
return out
`)

// NamespaceQueues implements engine.Dashboard: the queues of lmstfy's
// registry of ns, sorted by name, with their sizes, sizesPerPipeline
// queues per round trip.
func (e *Engine) NamespaceQueues(ctx context.Context, ns string) ([]engine.QueueStats, error) {
	if !engine.ValidName(ns) {
		return nil, fmt.Errorf("namespace queues: invalid namespace: %w", engine.ErrInvalid)
	}
	qs, err := e.namespaceQueueNames(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("namespace queues %s: %w", ns, err)
	}
	slices.Sort(qs)
	out := make([]engine.QueueStats, len(qs))
	for start := 0; start < len(qs); start += sizesPerPipeline {
		part := qs[start:min(len(qs), start+sizesPerPipeline)]
		cmds := make([][4]*redis.IntCmd, len(part))
		_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range part {
				cmds[i] = [4]*redis.IntCmd{p.LLen(ctx, readyKey(ns, q)), p.ZCard(ctx, prioKey(ns, q)), p.ZCard(ctx, timerKey(ns, q)), p.LLen(ctx, deadKey(ns, q))}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("namespace queues %s: %w", ns, err)
		}
		for i, q := range part {
			c := cmds[i]
			out[start+i] = engine.QueueStats{Namespace: ns, Queue: q, Ready: c[0].Val() + c[1].Val(), Timer: c[2].Val(), DeadLetter: c[3].Val()}
		}
	}
	return mergeShardStats(out), nil
}

// Registered reports whether queue ns/q is in its group's registry
// (m/{T}): a server published to it, or imported it, at least once. The
// dashboard answers 404 for a queue that is not, has no jobs and no
// settings (a mistyped URL). One HEXISTS.
func (e *Engine) Registered(ctx context.Context, ns, q string) (bool, error) {
	if err := checkNames(ns, q); err != nil {
		return false, fmt.Errorf("registered: %w", err)
	}
	ok, err := e.rdb.HExists(ctx, registryKey(slotGroup(ns, q)), ns+"/"+q).Result()
	if err != nil {
		return false, fmt.Errorf("registered %s/%s: %w", ns, q, err)
	}
	return ok, nil
}

// mergeShardStats sums the stats of a sharded queue's shards ("q~i",
// sorted after "q") into the queue's own.
func mergeShardStats(in []engine.QueueStats) []engine.QueueStats {
	out := in[:0]
	at := map[string]int{}
	for _, st := range in {
		st.Queue = logicalQueue(st.Queue)
		if k, ok := at[st.Queue]; ok {
			out[k].Ready += st.Ready
			out[k].Timer += st.Timer
			out[k].DeadLetter += st.DeadLetter
			continue
		}
		at[st.Queue] = len(out)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b engine.QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	return out
}

// namespaceQueueNames returns the queues of ns that the registries know:
// the queues of ns are spread over the slot groups, so one HKEYS of each
// group's registry m/{T}, in one pipeline (one round trip per node on a
// cluster), keeping the members "ns/…".
func (e *Engine) namespaceQueueNames(ctx context.Context, ns string) ([]string, error) {
	cmds := make([]*redis.StringSliceCmd, slotGroups)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := range cmds {
			cmds[g] = p.HKeys(ctx, registryKey(g))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	prefix := ns + "/"
	for _, c := range cmds {
		for _, m := range c.Val() {
			if q, ok := strings.CutPrefix(m, prefix); ok {
				out = append(out, q)
			}
		}
	}
	return out, nil
}

// QueueDetails implements engine.Dashboard: one script per queue, all in
// one pipeline; a sharded queue's details are its shards' summed.
func (e *Engine) QueueDetails(ctx context.Context, ns string, queues []string) ([]engine.QueueDetail, error) {
	return e.details(ctx, ns, queues, true)
}

// QueueActivity implements engine.Dashboard: QueueDetails without the
// in-flight split (the script then reads no job of the timer), in
// pipelines of sizesPerPipeline queues.
func (e *Engine) QueueActivity(ctx context.Context, ns string, queues []string) ([]engine.QueueDetail, error) {
	out := make([]engine.QueueDetail, 0, len(queues))
	for start := 0; start < len(queues); start += sizesPerPipeline {
		part, err := e.details(ctx, ns, queues[start:min(len(queues), start+sizesPerPipeline)], false)
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
	}
	return out, nil
}

// details is QueueDetails, with the timer's in-flight split or not.
func (e *Engine) details(ctx context.Context, ns string, queues []string, split bool) ([]engine.QueueDetail, error) {
	for _, q := range queues {
		if err := checkNames(ns, q); err != nil {
			return nil, fmt.Errorf("queue details: %w", err)
		}
	}
	var phys []string
	var of []int // phys[k] is a shard of queues[of[k]]
	for i, q := range queues {
		names := []string{q}
		if sp := e.shardsOf(ns, q); sp != nil {
			names = sp.names
		}
		for _, n := range names {
			phys = append(phys, n)
			of = append(of, i)
		}
	}
	if len(phys) == len(queues) {
		return e.queueDetails(ctx, ns, queues, split)
	}
	details, err := e.queueDetails(ctx, ns, phys, split)
	if err != nil {
		return nil, err
	}
	out := make([]engine.QueueDetail, len(queues))
	seen := make([]bool, len(queues))
	for k, d := range details {
		i := of[k]
		if !seen[i] {
			// Shard 0 (the queue itself) comes first: its settings and
			// history are the queue's.
			seen[i] = true
			d.Queue = queues[i]
			out[i] = d
			continue
		}
		o := &out[i]
		o.Ready += d.Ready
		o.Timer += d.Timer
		o.DeadLetter += d.DeadLetter
		o.InFlight += d.InFlight
		o.Delayed += d.Delayed
		o.InFlightExact = o.InFlightExact && d.InFlightExact
		o.MaxInFlight = max(o.MaxInFlight, d.MaxInFlight)
		o.LimitInFlight += d.LimitInFlight
		o.AtLimit = o.AtLimit || d.AtLimit
		if !d.OldestReady.IsZero() && (o.OldestReady.IsZero() || d.OldestReady.Before(o.OldestReady)) {
			o.OldestReady = d.OldestReady
		}
	}
	return out, nil
}

// queueDetails is QueueDetails of physical queues; without split, the
// script reads no timer entry (exact up to 0, a sample of 0) and the
// details have no in-flight split.
func (e *Engine) queueDetails(ctx context.Context, ns string, queues []string, split bool) ([]engine.QueueDetail, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	exact, sample := inFlightExact, inFlightSample
	if !split {
		exact, sample = -1, 0
	}
	now := e.now()
	minute := now.Unix() / 60
	cmds := make([]*redis.Cmd, len(queues))
	run := func() error {
		_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range queues {
				keys := []string{readyKey(ns, q), prioKey(ns, q), timerKey(ns, q), deadKey(ns, q), configKey(ns, q), jobKeyPrefix(ns, q)}
				current := ""
				end := minute // exclusive
				if !split {   // the activity: the current minute too
					current, end = "1", minute+1
				}
				args := []interface{}{current, exact, sample}
				last := int64(-1)
				for m := minute - engine.RecentMinutes; m < end; m++ {
					b, at := blockOf(m)
					if b != last {
						keys = append(keys, queueHistoryKey(ns, q, b))
						last = b
					}
					args = append(args, len(keys), at)
				}
				cmds[i] = queueDetailScript.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		return err
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The Redis lost its scripts (restarted, SCRIPT FLUSH): load and
		// try once more.
		if err = queueDetailScript.Load(ctx, e.rdb).Err(); err == nil {
			err = run()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("queue details %s: %w", ns, err)
	}
	out := make([]engine.QueueDetail, len(queues))
	for i, q := range queues {
		res, err := cmds[i].Slice()
		if err != nil || len(res) != 21 {
			return nil, fmt.Errorf("queue details %s/%s: unexpected reply %v: %v", ns, q, res, err)
		}
		n := func(k int) int64 { v, _ := res[k].(int64); return v }
		d := engine.QueueDetail{
			QueueStats: engine.QueueStats{Namespace: ns, Queue: q, Ready: n(0), Timer: n(1), DeadLetter: n(2)},
			Paused:     n(3) == 1, InFlight: n(4), InFlightExact: n(5) == 1,
			Recent:      engine.Counts{Published: n(8), Consumed: n(9), Acked: n(10), Retried: n(11), Dead: n(12)},
			Current:     engine.Counts{Published: n(13), Consumed: n(14), Acked: n(15), Retried: n(16), Dead: n(17)},
			MaxInFlight: n(18), LimitInFlight: n(19), AtLimit: n(20) == 1,
		}
		d.InFlight = min(d.InFlight, d.Timer)
		d.Delayed = d.Timer - d.InFlight
		if !split {
			d.InFlight, d.Delayed, d.InFlightExact = 0, 0, false
		}
		for _, k := range []int{6, 7} {
			id, _ := res[k].(string)
			if t, ok := readySince(id); ok && (d.OldestReady.IsZero() || t.Before(d.OldestReady)) {
				d.OldestReady = t
			}
		}
		out[i] = d
	}
	return out, nil
}

// readySince is when the job of a ready entry became ready, as its ID
// tells: its publish plus its delay.
func readySince(id string) (time.Time, bool) {
	if id == "" {
		return time.Time{}, false
	}
	info, err := engine.ParseJobID(id)
	if err != nil {
		return time.Time{}, false
	}
	return info.Published.Add(info.Delay), true
}

// ListJobs implements engine.Dashboard.
func (e *Engine) ListJobs(ctx context.Context, ns, q string, list engine.JobList, cursor int64, limit int) ([]*engine.Job, int64, error) {
	if err := checkNames(ns, q); err != nil {
		return nil, 0, fmt.Errorf("list jobs: %w", err)
	}
	switch list {
	case engine.ListReady, engine.ListDelayed, engine.ListInFlight, engine.ListScheduled:
	default:
		return nil, 0, fmt.Errorf("list jobs: unknown list %q: %w", list, engine.ErrInvalid)
	}
	if cursor < 0 || limit < 1 || limit > listScanBudget {
		return nil, 0, fmt.Errorf("list jobs: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.listJobsSharded(ctx, sp, ns, list, cursor, limit)
	}
	res, err := e.run(ctx, listJobsScript, []string{readyKey(ns, q), prioKey(ns, q), timerKey(ns, q), jobKeyPrefix(ns, q)},
		"", string(list), cursor, limit, listScanBudget).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs %s/%s: %w", ns, q, err)
	}
	if len(res) < 1 || (len(res)-1)%3 != 0 {
		return nil, 0, fmt.Errorf("list jobs %s/%s: unexpected reply", ns, q)
	}
	next, _ := res[0].(int64)
	if next < 0 {
		next = 0
	}
	now := e.now()
	jobs := make([]*engine.Job, 0, (len(res)-1)/3)
	for i := 1; i+2 < len(res); i += 3 {
		id, _ := res[i].(string)
		v, _ := res[i+1].(string)
		pttl, _ := res[i+2].(int64)
		j, err := makeStoredJob(ns, q, id, []byte(v), pttl, now)
		if err != nil {
			return nil, 0, fmt.Errorf("list jobs %s/%s: %w", ns, q, err)
		}
		jobs = append(jobs, j)
	}
	return jobs, next, nil
}

// FindJob implements engine.Dashboard: a SCAN for the job's key (on every
// master of a cluster), for at most findJobBudget.
func (e *Engine) FindJob(ctx context.Context, id string) (*engine.Job, error) {
	if _, err := engine.ParseJobID(id); err != nil {
		return nil, fmt.Errorf("find job: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, findJobBudget)
	defer cancel()
	match := "j/*/" + id
	var mu sync.Mutex
	var found string
	done := func() bool { mu.Lock(); defer mu.Unlock(); return found != "" }
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cur uint64
		for !done() {
			keys, next, err := c.Scan(ctx, cur, match, 5000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				if strings.HasSuffix(k, "/"+id) {
					mu.Lock()
					found = k
					mu.Unlock()
				}
			}
			if cur = next; cur == 0 {
				return nil
			}
		}
		return nil
	}
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, e.rdb)
	}
	if found == "" {
		if err != nil {
			return nil, fmt.Errorf("find job %s: %w", id, err)
		}
		return nil, fmt.Errorf("find job %s: %w", id, engine.ErrJobNotFound)
	}
	ns, q, ok := jobKeyQueue(found, id)
	if !ok {
		return nil, fmt.Errorf("find job %s: %w", id, engine.ErrJobNotFound)
	}
	return e.PeekJob(context.WithoutCancel(ctx), ns, q, id)
}

// jobKeyQueue returns the queue of a job key found by a SCAN: the names in
// the key, provided jobKey builds this very key from them.
func jobKeyQueue(key, id string) (ns, q string, ok bool) {
	base, ok := strings.CutPrefix(key, "j/")
	if !ok {
		return "", "", false
	}
	base, ok = strings.CutSuffix(base, "/"+id)
	if !ok || !strings.HasPrefix(base, "{") {
		return "", "", false
	}
	end := strings.IndexByte(base, '}')
	if end < 0 {
		return "", "", false
	}
	names := base[end+1:] // a tag before the names
	if names == "" {
		names = base[1:end] // the names as the tag
	}
	ns, q, ok = strings.Cut(names, "/")
	if !ok || jobKey(ns, q, id) != key {
		return "", "", false
	}
	return ns, q, true
}

// Topology implements engine.Dashboard.
func (e *Engine) Topology() string {
	if _, ok := e.rdb.(*redis.ClusterClient); ok {
		return "cluster"
	}
	return "standalone"
}

// Ping implements engine.Dashboard.
func (e *Engine) Ping(ctx context.Context) error { return e.rdb.Ping(ctx).Err() }
