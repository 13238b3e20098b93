package rdb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The expiry ledger of the big queues (issue #31; doc/design.md "Usage
// and quotas"): how the counts of a queue too big for one recount
// converge although the queue never holds still for a chunked pass.
//
// A job whose key expires in a ready list, priority set or dead letter
// leaves no trace a script can count: its entry stays (or is popped by a
// consumer, or cut by the reclaimer, with nothing counted), and an entry
// of a job deleted by ID looks the same — and was counted when it was
// deleted; its bytes are gone with its key. So the reconciler learns what
// it needs before the job expires. It reads the big queues in turn, in
// chunks (ledgerRecordScript, no WATCH: the queue may change meanwhile),
// and for every live job whose TTL runs out within the horizon it
//
//   - records the job's length in the queue's expiry ledger, the sorted
//     set g/{T}ns/q/e (member the ID, score the length);
//   - makes the job's history key a/{T}ns/q/ID (created with a marker no
//     reader parses when the job has none) outlive the job by
//     ledgerGrace: the witness. Every script that deletes a job deletes
//     its history key in the same step; expiry leaves it.
//
// The sweep (ledgerSweepScript) then looks at the ledger's records, each
// in one step: a job whose key is gone, whose timer entry is gone (the
// pump and the reclaimer count those, and take their record: usage_expired)
// and whose witness is there expired with nobody counting it, and is
// taken off its queue's counts, one job and its recorded bytes, with its
// record and its witness; a job gone with its witness was deleted by a
// script, which counted it: its record goes. Each correction and the
// removal of its record are one step, and no other script takes a job
// off for a record (recountScript counts such a job as still there until
// the sweep takes it), so no expiry is counted twice or lost, however the
// queue changes meanwhile.
//
// The rounds read the queue's groups' lists too (ledgerGroupsChunk: the
// groups named by scans, which return every group there throughout), and
// the scripts keep a witness: a named worker's delivery and a release set
// a history's TTL only when they create it, and a death or a respawn
// (job_ttl, scripts.go) gives a recorded job's history its new TTL plus
// ledgerGrace.
//
// What it does not see is left to the recounts (the one-script recount of
// a queue that shrank under reconcileMax entries, and the chunked pass of
// a queue that held still): a job that expired before a
// round met it within the horizon (its TTL is shorter than the time
// between two rounds of its queue). Only the publish sees every such job
// in time, and recording there would cost the hot path a record and a
// witness a job (doc/design.md says why no bounded design closes it).

const (
	// ledgerEntries bounds the entries one step's rounds read.
	ledgerEntries = 5000
	// ledgerChunkMax is the most entries one ledgerRecordScript call
	// reads: about 0.3 ms of Redis (1.3 ms for 1,000 measured at load
	// average 20), so that a round does not hold up the load's calls the
	// way millisecond-long scripts do.
	ledgerChunkMax = 250
	// ledgerSweep bounds the records one step's sweep looks at.
	ledgerSweep = 2000
	// ledgerAgain is how long a big queue waits for its next round.
	ledgerAgain = time.Minute
	// ledgerHorizonMin is the least horizon: a round records the jobs
	// whose TTL runs out within max(ledgerHorizonMin, 3 rounds and waits).
	ledgerHorizonMin = 5 * time.Minute
	// ledgerGrace is how long a witness outlives its job: the sweep must
	// come by within it (every step looks at up to ledgerSweep records).
	// The scripts' LEDGER_GRACE (scripts.go) is the same in ms
	// (TestLedgerGraceInLua).
	ledgerGrace = 10 * time.Minute
)

// ledgerStructs is the number of structures a round reads: the ready
// list, the priority set, the timer, the dead letter and the groups'
// lists and priority sets.
const ledgerStructs = 5

// ledgerGroupScan is the COUNT of the scans that list a big queue's groups
// for its rounds.
const ledgerGroupScan = 100

// ledgerGroupChunk is the most entries one ledgerRecordScript call reads
// of the groups' lists, which it reads one after the other (an LLEN, an
// LRANGE and a ZRANGEBYSCORE a group besides the entries): half a chunk
// keeps such a call about as short as the others (TestLedgerRoundCost,
// 200 groups of 100 jobs: the calls over 0.2 ms had a median of 0.6-1.3
// ms with 250 entries, 0.25-1.2 ms with 125, at load average 13-14).
const ledgerGroupChunk = ledgerChunkMax / 2

// ledgerRound is a round under way over one big queue's structures.
type ledgerRound struct {
	q       [2]string
	s       int    // structure read next, 1..5 (ready, priority, timer, dead, the groups')
	off     int64  // lists: offset from the left
	lastLen int64  // lists: the length the previous chunk saw (-1: none)
	min     string // sorted sets: the lowest score still to read
	skip    int64  // sorted sets: the members of that score read already
	start   time.Time
	horizon time.Duration
	// The groups' lists (s = 5), named by scans of the membership hash
	// g/…/m, the rotation of the layout before g/…/a and the blocked set
	// g/…/b in turn (scan 0..2), a batch of names at a time: the group
	// names[gi] is read next, its list (sub 1) or its priority set (2).
	// A scan returns every member there from its start to its end, so a
	// group that holds ready jobs throughout a round is read in it.
	scan  int
	cur   uint64
	names []string
	gi    int
	sub   int
}

// newLedgerRound is a round over q from its first structure.
func newLedgerRound(q [2]string, start time.Time, horizon time.Duration) *ledgerRound {
	return &ledgerRound{q: q, s: 1, lastLen: -1, min: "-inf", start: start, horizon: horizon}
}

// done says whether the round read every structure to its end.
func (p *ledgerRound) done() bool { return p.s > ledgerStructs }

// ledgerState is the reconciler's state of the rounds and the sweep.
type ledgerState struct {
	round    *ledgerRound
	next     int                     // the next big queue for a round
	at       map[[2]string]time.Time // when each queue's last round ended
	took     map[[2]string]time.Duration
	ledgers  map[[2]string]bool // queues whose ledger may hold records
	sweepOff map[[2]string]int64
	sweepQ   [][2]string
	// sweepFrom is when the sweep round under way began (its ledgers
	// listed), swept when the last one that looked at every ledger to its
	// end began (reconGate.finish).
	sweepFrom, swept time.Time
}

// sweptSince says whether a sweep round that began at or after t looked
// at every known ledger to its end (true when there is none).
func (l *ledgerState) sweptSince(t time.Time) bool {
	return len(l.ledgers) == 0 || !l.swept.Before(t)
}

// ledgerStep runs the rounds of the big queues for at most ledgerEntries
// entries, then the sweep of the known ledgers for at most ledgerSweep
// records, and adds the corrections to st and their groups to groups.
func (e *Engine) ledgerStep(ctx context.Context, st *ReconcileStats, groups map[int]bool) error {
	if err := e.ledgerRounds(ctx); err != nil {
		return err
	}
	_, err := e.ledgerSweepStep(ctx, ledgerSweep, st, groups)
	return err
}

// ledgerRounds runs the rounds of the big queues for at most
// ledgerEntries entries. The gate's idle steps run it too
// (reconcileStep): a round must meet a job before it expires, and no key
// removed by Redis says nothing of the jobs about to be.
func (e *Engine) ledgerRounds(ctx context.Context) error {
	r := &e.ten.recon
	l := &r.ledger
	if l.at == nil {
		l.at, l.took = map[[2]string]time.Time{}, map[[2]string]time.Duration{}
		l.ledgers, l.sweepOff = map[[2]string]bool{}, map[[2]string]int64{}
	}
	for _, q := range r.big {
		l.ledgers[q] = true
	}
	budget := ledgerEntries
	if r.bigBudget > 0 {
		budget = r.bigBudget
	}
	now := time.Now()
	for tried := 0; budget > 0 && len(r.big) > 0; {
		if l.round == nil {
			if tried >= len(r.big) {
				break
			}
			tried++
			q := r.big[l.next%len(r.big)]
			l.next = (l.next + 1) % len(r.big)
			if at, ok := l.at[q]; ok && now.Sub(at) < ledgerAgain {
				continue
			}
			hz := max(ledgerHorizonMin, 3*(l.took[q]+ledgerAgain))
			l.round = newLedgerRound(q, now, hz)
		}
		read, err := e.ledgerChunk(ctx, l.round, min(budget, ledgerChunkMax))
		if err != nil {
			l.round = nil
			return err
		}
		budget -= max(read, 1)
		if l.round.done() {
			l.at[l.round.q] = time.Now()
			l.took[l.round.q] = time.Since(l.round.start)
			l.round = nil
		}
	}
	return nil
}

// sweepAll sweeps every known ledger to its end once (Reconcile).
func (e *Engine) sweepAll(ctx context.Context, st *ReconcileStats, groups map[int]bool) error {
	l := &e.ten.recon.ledger
	l.sweepQ, l.sweepFrom = nil, time.Now()
	for q := range l.ledgers {
		l.sweepQ = append(l.sweepQ, q)
		l.sweepOff[q] = 0
	}
	for len(l.sweepQ) > 0 {
		if _, err := e.ledgerSweepStep(ctx, ledgerSweep, st, groups); err != nil {
			return err
		}
	}
	return nil
}

// ledgerChunk reads the next chunk of round p: at most most entries.
func (e *Engine) ledgerChunk(ctx context.Context, p *ledgerRound, most int) (int, error) {
	if p.s == 5 {
		return e.ledgerGroupsChunk(ctx, p, min(most, ledgerGroupChunk))
	}
	zset := p.s == 2 || p.s == 3
	r, err := e.ledgerRecord(ctx, p, p.s, zset, most)
	if err != nil {
		return 0, err
	}
	if r.done == 1 {
		p.s, p.off, p.lastLen, p.min, p.skip = p.s+1, 0, -1, "-inf", 0
		return int(r.read), nil
	}
	p.moveTo(zset, r)
	return int(r.read), nil
}

// ledgerGroupsChunk reads the next chunk of the groups' lists of round p
// (structure 5): at most most entries of the groups of the last scan's
// batch, or the next batch of names when it was read.
func (e *Engine) ledgerGroupsChunk(ctx context.Context, p *ledgerRound, most int) (int, error) {
	if p.gi >= len(p.names) {
		return e.ledgerGroupsScan(ctx, p)
	}
	more := make([]any, 0, 2+len(p.names)-p.gi)
	more = append(more, 1, p.sub)
	for _, g := range p.names[p.gi:] {
		more = append(more, g)
	}
	r, err := e.ledgerRecord(ctx, p, 5, p.sub == 2, most, more...)
	if err != nil {
		return 0, err
	}
	if r.done == 1 {
		p.gi = len(p.names)
		return int(r.read), nil
	}
	p.gi += int(r.gi) - 1
	p.sub = int(r.sub)
	p.moveTo(p.sub == 2, r)
	return int(r.read), nil
}

// ledgerRecordReply is a ledgerRecordScript reply: the entries read,
// whether the structure (structure 5: the batch of groups) was read to its
// end, the cursor (a list's offset and length, or a sorted set's score and
// the members of that score read), and for structure 5 the group and the
// part of it (1 list, 2 priority set) reached.
type ledgerRecordReply struct {
	read, done, skip, length, gi, sub int64
	next                              string
}

// ledgerRecord runs ledgerRecordScript on structure s of round p's queue
// from the round's cursor (p.min and p.skip in a sorted set, zset; else
// p.off and p.lastLen), with structure 5's arguments (more) after the
// common ones.
func (e *Engine) ledgerRecord(ctx context.Context, p *ledgerRound, s int, zset bool, most int, more ...any) (ledgerRecordReply, error) {
	qn := e.names.get([3]string{p.q[0], p.q[1]})
	keys := []string{qn.ready, qn.prio, qn.timer, qn.dead, qn.jobPrefix, ledgerKey(qn.jobPrefix)}
	cur := strconv.FormatInt(p.off, 10)
	if zset {
		cur = p.min
	}
	args := append([]any{s, cur, p.skip, p.lastLen, most, p.horizon.Milliseconds(), ledgerGrace.Milliseconds()}, more...)
	v, err := e.run(ctx, ledgerRecordScript, keys, args...).Slice()
	if err != nil {
		return ledgerRecordReply{}, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	want := 5
	if s == 5 {
		want = 7
	}
	if len(v) != want {
		return ledgerRecordReply{}, fmt.Errorf("reconcile pool %s: unexpected reply %v", e.pool, v)
	}
	var r ledgerRecordReply
	r.read, _ = v[0].(int64)
	r.done, _ = v[1].(int64)
	r.next, _ = v[2].(string)
	r.skip, _ = v[3].(int64)
	r.length, _ = v[4].(int64)
	if s == 5 {
		r.gi, _ = v[5].(int64)
		r.sub, _ = v[6].(int64)
	}
	return r, nil
}

// moveTo moves round p's cursor to where reply r left it.
func (p *ledgerRound) moveTo(zset bool, r ledgerRecordReply) {
	if zset {
		p.min, p.skip = r.next, r.skip
	} else {
		p.off, _ = strconv.ParseInt(r.next, 10, 64)
		p.lastLen = r.length
	}
}

// ledgerGroupsScan reads the next batch of round p's group names: from the
// membership hash g/…/m (every group in the rotation or blocked), then
// the rotation of the layout before g/…/a and the blocked set g/…/b (the
// groups a server of that layout blocked, which have no membership),
// until each scan comes back to cursor 0; then the round is done. It
// returns the names read.
func (e *Engine) ledgerGroupsScan(ctx context.Context, p *ledgerRound) (int, error) {
	if p.scan > 2 {
		p.s++
		return 0, nil
	}
	gp := groupKeyPrefix(p.q[0], p.q[1])
	var (
		keys []string
		cur  uint64
		err  error
	)
	step := 2 // HSCAN and ZSCAN: name, value
	keys, cur, err = retried(ctx, e, func() *redis.ScanCmd {
		switch p.scan {
		case 0:
			return e.rdb.HScan(ctx, gp+"m", p.cur, "", ledgerGroupScan)
		case 1:
			return e.rdb.ZScan(ctx, gp+"a", p.cur, "", ledgerGroupScan)
		}
		return e.rdb.SScan(ctx, gp+"b", p.cur, "", ledgerGroupScan)
	}).Result()
	if p.scan == 2 {
		step = 1
	}
	if err != nil {
		return 0, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	names := make([]string, 0, len(keys)/step)
	for i := 0; i < len(keys); i += step {
		if keys[i] != "" { // the default group's lists are the queue's own
			names = append(names, keys[i])
		}
	}
	if p.scan == 2 && len(names) > 0 {
		// The groups blocked by this layout have a membership: read already.
		st, err := retried(ctx, e, func() *redis.SliceCmd { return e.rdb.HMGet(ctx, gp+"m", names...) }).Result()
		if err != nil {
			return 0, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
		}
		old := names[:0]
		for i, g := range names {
			if st[i] == nil {
				old = append(old, g)
			}
		}
		names = old
	}
	p.names, p.gi, p.sub, p.off, p.lastLen, p.min, p.skip = names, 0, 1, 0, -1, "-inf", 0
	if p.cur = cur; cur == 0 {
		p.scan++
	}
	return len(keys) / step, nil
}

// ledgerSweepStep looks at up to budget records of the known ledgers,
// in turn; it returns the records it looked at.
func (e *Engine) ledgerSweepStep(ctx context.Context, budget int, st *ReconcileStats, groups map[int]bool) (int, error) {
	l := &e.ten.recon.ledger
	if len(l.sweepQ) == 0 {
		l.sweepFrom = time.Now()
		for q := range l.ledgers {
			l.sweepQ = append(l.sweepQ, q)
		}
	}
	looked := 0
	for budget > 0 && len(l.sweepQ) > 0 {
		q := l.sweepQ[0]
		qn := e.names.get([3]string{q[0], q[1]})
		v, err := e.run(ctx, ledgerSweepScript, []string{ledgerKey(qn.jobPrefix), qn.timer, qn.jobPrefix, qn.usage},
			l.sweepOff[q], min(budget, ledgerChunkMax)).Int64Slice()
		if err != nil {
			return looked, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
		}
		if len(v) != 6 {
			return looked, fmt.Errorf("reconcile pool %s: unexpected reply %v", e.pool, v)
		}
		budget -= int(max(v[0], 1))
		looked += int(v[0])
		if v[1] != 0 || v[2] != 0 {
			st.Expired += v[1]
			st.Jobs -= v[1]
			st.Bytes -= v[2]
			groups[slotGroup(q[0], q[1])] = true
		}
		l.sweepOff[q] = v[3]
		if v[5] == 1 {
			l.sweepOff[q] = 0
			l.sweepQ = l.sweepQ[1:]
			if len(l.sweepQ) == 0 {
				l.swept = l.sweepFrom
			}
			if v[4] == 0 && !e.isBig(q) {
				delete(l.ledgers, q) // empty, and no round fills it any more
				delete(l.sweepOff, q)
			}
		}
	}
	return looked, nil
}

// isBig says whether q is among the big queues.
func (e *Engine) isBig(q [2]string) bool {
	for _, b := range e.ten.recon.big {
		if b == q {
			return true
		}
	}
	return false
}

// ledgerKey is the expiry ledger of the queue of job key prefix
// j/{T}ns/q/: g/{T}ns/q/e (the group prefix, as groups_scripts.go's gpfx).
func ledgerKey(jobPrefix string) string { return "g" + jobPrefix[1:] + "e" }

// ledgerRecordScript reads one chunk of a big queue's structure and
// records in its expiry ledger every live job found there whose TTL runs
// out within the horizon, with its witness (reconcile_ledger.go). Lists
// are read from the left, from an offset moved on by what they grew since
// the previous chunk (pushes are at the left: an entry may be read twice,
// never skipped for a push); sorted sets by score, from the last one read
// (past the members of that score read already, found by rank rather than
// walked). Structure 5 is the
// groups' lists: the ready list gp..'q:'..G, then the priority set
// gp..'p:'..G (groups_scripts.go; built from the job key prefix, as every
// script of the groups does) of each group named in ARGV[10…] in turn,
// from the one at index ARGV[8] (1-based), read as the queue's own.
//
//	KEYS[1] ready list   KEYS[2] priority set   KEYS[3] timer   KEYS[4] dead letter
//	KEYS[5] job key prefix   KEYS[6] the expiry ledger
//	ARGV[1] structure (1..5)   ARGV[2] cursor: a list's offset, or a sorted
//	set's lowest score to read ('-inf', a score)   ARGV[3] the members of
//	that score read already   ARGV[4] the list's length at the previous
//	chunk (-1 at the first)   ARGV[5] most entries   ARGV[6] horizon (ms)   ARGV[7] grace (ms)
//	ARGV[8] (structure 5) the group read, an index in ARGV[10…]
//	ARGV[9] (structure 5) its structure: 1 its list, 2 its priority set
//	ARGV[10…] (structure 5) group names
//
// Returns {entries read, 1 when the structure was read to its end (5:
// every group named), the next cursor, the members of its score read, the
// list's length}, then for structure 5 the group and its structure the
// cursor is in (ARGV[8], ARGV[9]'s meaning). A group's empty list or set
// counts as one entry read, so that a call (and a step) reads a bounded
// number of them.
var ledgerRecordScript = script(`
local s, n = tonumber(ARGV[1]), tonumber(ARGV[5])
local jp, lk = KEYS[5], KEYS[6]
local hz, grace = tonumber(ARGV[6]), tonumber(ARGV[7])
local ids = {}
-- rd_list reads at most m entries of list k from offset off (moved on by
-- what it grew since it was last long; -1: not read before).
local function rd_list(k, off, last, m)
  local len = redis.call('LLEN', k)
  if last >= 0 then off = off + math.max(0, len - last) end
  local es = redis.call('LRANGE', k, off, off + m - 1)
  for _, e in ipairs(es) do ids[#ids + 1] = eid(e) end
  local done = 0
  if #es < m then done = 1 end
  return #es, done, tostring(off + #es), 0, len
end
-- rd_zset reads at most m members of sorted set k from score lo (past the
-- first skip of that score); timer members are IDs (raw), the others entries.
local function rd_zset(k, lo, skip, m, raw)
  -- By rank: ZRANGEBYSCORE's LIMIT would walk the members of the
  -- cursor's score read already one by one (a burst's timer entries share
  -- one score: 200,000 of them made a chunk tens of milliseconds of
  -- Redis); ZCOUNT of the lower scores finds the same rank in O(log N).
  local base = 0
  if lo ~= '-inf' then base = redis.call('ZCOUNT', k, '-inf', '(' .. lo) end
  local ms = redis.call('ZRANGE', k, base + skip, base + skip + m - 1, 'WITHSCORES')
  local nxt = lo
  for i = 1, #ms, 2 do
    local e, sc = ms[i], ms[i + 1]
    if raw then ids[#ids + 1] = e else ids[#ids + 1] = eid(e) end
    if sc == nxt then skip = skip + 1 else nxt, skip = sc, 1 end
  end
  local done = 0
  if #ms / 2 < m then done = 1 end
  return #ms / 2, done, nxt, skip, 0
end
local read, done, nxt, skip, len = 0, 0, '', 0, 0
local gi, sub = 0, 0
if s == 1 or s == 4 then
  read, done, nxt, skip, len = rd_list(KEYS[s], tonumber(ARGV[2]), tonumber(ARGV[4]), n)
elseif s == 2 or s == 3 then
  read, done, nxt, skip, len = rd_zset(KEYS[s], ARGV[2], tonumber(ARGV[3]), n, s == 3)
else
  local gp = gpfx(jp)
  gi, sub = tonumber(ARGV[8]), tonumber(ARGV[9])
  nxt, skip, len = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local left = n
  while left > 0 and gi <= #ARGV - 9 do
    local g = ARGV[9 + gi]
    local r, d
    if sub == 1 then
      r, d, nxt, skip, len = rd_list(gp .. 'q:' .. g, tonumber(nxt), len, left)
    else
      r, d, nxt, skip, len = rd_zset(gp .. 'p:' .. g, nxt, skip, left, false)
    end
    left = left - math.max(r, 1)
    if d == 1 then
      if sub == 1 then
        sub, nxt, skip, len = 2, '-inf', 0, -1
      else
        gi, sub, nxt, skip, len = gi + 1, 1, '0', 0, -1
      end
    end
  end
  if gi > #ARGV - 9 then done = 1 end
  read = n - left
end
for _, id in ipairs(ids) do
  if id ~= '' then
    local jk = jp .. id
    local t = redis.call('PTTL', jk)
    if t > 0 and t <= hz then
      local hk = hkey(jk)
      local want = t + grace
      local ok = true
      if redis.call('EXISTS', hk) == 0 then
        -- The witness: a marker no history reader parses (attempts.go).
        ok = type(redis.pcall('RPUSH', hk, '~')) == 'number'
        if ok then redis.call('PEXPIRE', hk, want) end
      else
        local ht = redis.call('PTTL', hk)
        if ht > 0 and ht < want then redis.call('PEXPIRE', hk, want) end
      end
      -- pcall: a full Redis (OOM) refuses a record, not the round.
      if ok then redis.pcall('ZADD', lk, redis.call('STRLEN', jk), id) end
    end
  end
end
if s == 5 then return {read, done, nxt, skip, len, gi, sub} end
return {read, done, nxt, skip, len}
`)

// ledgerSweepScript looks at up to ARGV[2] records of a queue's expiry
// ledger from rank ARGV[1] (reconcile_ledger.go): a job whose key is gone
// with no timer entry and whose witness is there expired uncounted — one
// job and its recorded bytes less, its record and witness deleted; one
// gone with its witness was deleted (and counted) by a script, and one
// whose TTL no longer runs out within ARGV[3] ms is not expiring: their
// records go. A job gone with its timer entry is left to the pump.
//
//	KEYS[1] the expiry ledger   KEYS[2] timer   KEYS[3] job key prefix
//	KEYS[4] the group's usage hash
//	ARGV[1] rank   ARGV[2] most records
//
// Returns {records looked at, jobs taken off, bytes taken off, the next
// rank, the records left, 1 when the ledger was looked at to its end}.
var ledgerSweepScript = script(`
local lk, tk, jp = KEYS[1], KEYS[2], KEYS[3]
local off, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local rs = redis.call('ZRANGE', lk, off, off + n - 1, 'WITHSCORES')
local dj, db, drop, kept = 0, 0, {}, 0
for i = 1, #rs, 2 do
  local id = rs[i]
  local jk = jp .. id
  local t = redis.call('PTTL', jk)
  if t == -2 then
    if redis.call('ZSCORE', tk, id) then
      kept = kept + 1
    else
      local hk = hkey(jk)
      if redis.call('EXISTS', hk) == 1 then
        dj, db = dj + 1, db + tonumber(rs[i + 1])
        redis.call('DEL', hk)
      end
      drop[#drop + 1] = id
    end
  elseif t == -1 then
    drop[#drop + 1] = id
  else
    kept = kept + 1
  end
end
if #drop > 0 then redis.call('ZREM', lk, unpack(drop)) end
if dj > 0 then usage_add(KEYS[4], jp, -dj, -db) end
local done = 0
if #rs < 2 * n then done = 1 end
return {#rs / 2, dj, db, off + kept, redis.call('ZCARD', lk), done}
`)
