package rdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine/tracing"
)

// The pump moves due timer entries (delayed jobs and in-flight jobs whose
// TTR passed) to ready lists or dead letters. It sleeps until the pool's
// earliest due time, never longer than MaxPumpSleep, and is woken early when
// a publish or consume on any server makes an earlier entry (in process
// through wakePump, across servers through the groups' wake-up channels).
//
// Each slot group has its own timer index (keys.go). A pass reads the heads
// of the groups' indexes (pumpHeadsScript: one call on one Redis, one per
// group in one pipeline on a cluster), then runs pumpScript for the groups
// that have due queues, with those queues' keys, in a second pipeline.

// wakePump asks the pump to look at the timer indexes again now.
func (e *Engine) wakePump() {
	select {
	case e.pumpWake <- struct{}{}:
	default:
	}
}

func (e *Engine) runPump(ctx context.Context) {
	e.runWoken(ctx, e.pumpWake, "pump", func(ctx context.Context) (time.Duration, error) {
		next, err := e.PumpOnce(ctx)
		if err != nil || next < 0 {
			return e.maxWait, err
		}
		return min(max(time.Duration(next-ms(e.now()))*time.Millisecond, 0), e.maxWait), nil
	})
}

// runWoken runs step until ctx is done: at once, then whenever wake
// fires or the time step returned has passed; 100 ms after an error
// (logged with what). The pump and the scheduler are such loops.
func (e *Engine) runWoken(ctx context.Context, wake <-chan struct{}, what string, step func(context.Context) (time.Duration, error)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		sleep, err := step(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.log.WithError(err).Warnf("%s failed; retrying", what)
			sleep = 100 * time.Millisecond
		}
		t.Reset(sleep)
	}
}

// PumpOnce moves every entry due now and returns the pool's next due time
// in Unix milliseconds, or -1 when the timers are empty. It runs passes
// until no group has due entries left. Several servers may pump one pool
// at once: each batch is atomic.
//
// Every pass serves every group with due entries (issue #31): a queue
// whose jobs fall due while another queue's burst drains is served in the
// next pass, a few milliseconds later, not after the burst. A pass reads
// the index of a group that had due entries, or whose next due time has
// come, and all 64 indexes when a publish or consume woke the pump (an
// earlier entry than the pass knew of); the other groups' next due times
// are known from the last read, so a burst's passes cost no more than
// the burst's groups (one call per group on a cluster).
//
// On one Redis a pass is one call (pumpPoolScript), which reads the
// indexes and moves the due entries of every group: one round trip per
// pass instead of two, which is what kept delayed-job lateness low
// before the slot groups (doc/performance.md).
func (e *Engine) PumpOnce(ctx context.Context) (int64, error) {
	if !e.cluster {
		next, err := e.pumpPool(ctx)
		if err != nil {
			return 0, fmt.Errorf("pump pool %s: %w", e.pool, err)
		}
		return next, nil
	}
	var known [slotGroups]int64 // each group's next due time (ms), -1 for none
	groups := allGroups[:]
	for {
		more, err := e.pumpPass(ctx, groups, &known)
		if err != nil {
			return 0, fmt.Errorf("pump pool %s: %w", e.pool, err)
		}
		next := int64(-1)
		for _, t := range known {
			if t >= 0 && (next < 0 || t < next) {
				next = t
			}
		}
		if !more {
			return next, nil
		}
		select {
		case <-e.pumpWake:
			groups = allGroups[:]
		default:
			now := ms(e.now())
			groups = groups[:0:0]
			for g, t := range known {
				if t >= 0 && t <= now {
					groups = append(groups, g)
				}
			}
		}
	}
}

// allGroups are the slot groups 0..63.
var allGroups = func() (a [slotGroups]int) {
	for g := range a {
		a[g] = g
	}
	return a
}()

// pumpPass runs one fair pump pass over groups: every group with due
// queues gets a pumpScript call (one pipeline), and within a group every
// due queue gets its share of the group's PumpBatch (pumpScript). It
// records each group's next due time in known (-1 for none; a time not
// after now when entries are still due) and says whether some group still
// has due entries.
func (e *Engine) pumpPass(ctx context.Context, groups []int, known *[slotGroups]int64) (more bool, err error) {
	now := ms(e.now())
	report := "0"
	if e.tracer != nil {
		report = "1"
	}
	heads, err := e.pumpHeads(ctx, groups, now)
	if err != nil {
		return false, err
	}
	type call struct {
		g    int
		keys []string
		args []interface{}
		cmd  *redis.Cmd
	}
	var calls []call
	for i, g := range groups {
		known[g] = -1
		var due []string
		for _, z := range heads[i] {
			if z.score > now {
				known[g] = z.score
				break
			}
			due = append(due, z.member)
		}
		if len(due) == 0 {
			continue
		}
		k := make([]string, 1, 2+6*len(due))
		k[0] = timerIndexKey(g)
		a := make([]interface{}, 5, 5+2*len(due))
		a[0], a[1], a[2], a[3], a[4] = now, e.batch, rand.Uint32(), e.pub, report
		for _, m := range due {
			ns, q, _ := cutMember(m)
			qn := e.names.get([3]string{ns, q})
			k = append(k, qn.timer, qn.ready, qn.dead, qn.prio, qn.config, qn.jobPrefix)
			a = append(a, qn.argMember, qn.argChannel)
		}
		k = append(k, usageKey(g)) // usage_expired (tenancy_scripts.go)
		calls = append(calls, call{g: g, keys: k, args: a})
	}
	if len(calls) == 0 {
		return false, nil
	}
	start := time.Now()
	_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range calls {
			calls[i].cmd = pumpScript.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && (isNoScript(err) || e.retryFor > 0 && clusterRetryable(err)) {
			// The script cache was flushed (or a node restarted), or a
			// cluster answered TRYAGAIN or CLUSTERDOWN (nothing ran): EVALSHA,
			// then EVAL, retried (retry.go).
			c.cmd = e.run(ctx, pumpScript, c.keys, c.args...)
		}
		// Each group reports its own queues: the history and the spans
		// add up over the groups of a pass.
		nxt, err := e.pumped(ctx, c.cmd, start, now)
		if err != nil {
			return false, err
		}
		more = more || nxt >= 0 && nxt <= now
		known[c.g] = nxt
	}
	return more, nil
}

// pumpPoolPass is a pump pass on one Redis: one pumpPoolScript call over
// the 64 timer indexes, starting at a random group (round robin across
// the groups, on average, when more queues are due than one call takes).
// It returns the pool's next due time (-1 when none) and whether entries
// are still due.
func (e *Engine) pumpPoolPass(ctx context.Context) (next int64, more bool, err error) {
	return e.pumpPoolPassOf(ctx, e.batch)
}

// pumpPoolPassOf is pumpPoolPass handling at most budget entries.
func (e *Engine) pumpPoolPassOf(ctx context.Context, budget int) (next int64, more bool, err error) {
	now := ms(e.now())
	report := "0"
	if e.tracer != nil {
		report = "1"
	}
	start := time.Now()
	cmd := e.run(ctx, pumpPoolScript, timerIndexKeys[:], now, budget, rand.Uint32(), e.pub, report, rand.IntN(slotGroups))
	next, err = e.pumped(ctx, cmd, start, now)
	if err != nil {
		return 0, false, err
	}
	return next, next >= 0 && next <= now, nil
}

// pumpPool runs pump passes on one Redis until no entry is due and
// returns the pool's next due time (-1 when none). While entries are
// still due after a pass (a burst draining), two runners make passes side
// by side, on two connections: Redis starts the next pass as soon as one
// ends, instead of idling for the reply's round trip and for this process
// to be scheduled on a busy machine (a 1,000-entry pass takes a few
// milliseconds of Redis; the gap between passes was up to as much).
// Redis still runs one pass at a time, each atomic and fair. Each
// runner's pass takes half of PumpBatch: another client's command that
// arrives during a pass may now wait for the next one too (already
// queued), so two half passes hold it no longer than one whole pass did.
// Both runners stop at their first pass that leaves nothing due.
func (e *Engine) pumpPool(ctx context.Context) (int64, error) {
	next, more, err := e.pumpPoolPass(ctx)
	if err != nil || !more {
		return next, err
	}
	half := max(e.batch/2, 1)
	type result struct {
		next int64
		err  error
	}
	other := make(chan result, 1)
	go func() {
		n, err := e.pumpPoolRun(ctx, half)
		other <- result{n, err}
	}()
	n1, err1 := e.pumpPoolRun(ctx, half)
	r := <-other
	if err1 != nil {
		return 0, err1
	}
	if r.err != nil {
		return 0, r.err
	}
	// Either runner's last reading may be the later one: the earlier due
	// time is safe (at worst a pass that finds nothing).
	return earliest(n1, r.next), nil
}

// pumpPoolRun makes pump passes of at most budget entries until one
// leaves nothing due; it returns that pass's next due time.
func (e *Engine) pumpPoolRun(ctx context.Context, budget int) (int64, error) {
	for {
		next, more, err := e.pumpPoolPassOf(ctx, budget)
		if err != nil || !more {
			return next, err
		}
	}
}

// earliest is the earlier of two due times, -1 meaning none.
func earliest(a, b int64) int64 {
	if a < 0 || b >= 0 && b < a {
		return b
	}
	return a
}

// timerIndexKeys are the 64 groups' timer indexes, in group order.
var timerIndexKeys = func() (k [slotGroups]string) {
	for g := range k {
		k[g] = timerIndexKey(g)
	}
	return k
}()

// pumped reads the reply of a pump script run at now (pumpLib): it counts
// what moved (history, metrics, spans from start) and returns the next
// due time the script reported, -1 for none.
func (e *Engine) pumped(ctx context.Context, cmd *redis.Cmd, start time.Time, now int64) (int64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 4 {
		return 0, fmt.Errorf("unexpected reply %v", res)
	}
	handled, ok1 := res[0].(int64)
	nxt, ok2 := res[1].(int64)
	expired, ok3 := res[2].([]interface{})
	moved, ok4 := res[3].([]interface{})
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, fmt.Errorf("unexpected reply %v", res)
	}
	e.histExpired(expired)
	if e.tracer != nil {
		e.tracePump(ctx, start, moved)
	}
	// The earliest entry is still due: a queue used its whole share, or
	// more queues were due than one call takes.
	e.metrics.pumped(handled, nxt >= 0 && nxt <= now)
	return nxt, nil
}

type head struct {
	member string
	score  int64
}

// pumpHeads reads, for each of groups, the due members of its timer index
// (at most PumpBatch) and the first member not due (pumpHeadsScript): one
// call on one Redis, one call per group, pipelined, on a cluster.
func (e *Engine) pumpHeads(ctx context.Context, groups []int, now int64) ([][]head, error) {
	keys := make([]string, len(groups))
	for i, g := range groups {
		keys[i] = timerIndexKey(g)
	}
	return e.indexHeads(ctx, keys, e.batch, now)
}

// indexHeads reads the first limit members of the sorted sets keys, each
// a group's index (pumpHeadsScript): one call over every key on one Redis,
// one call per key, pipelined, on a cluster. With upTo[0] given, it reads
// only the members scored up to it (at most limit) and the first member
// beyond. The pump reads the timer indexes with it, the scheduler the
// schedule indexes.
func (e *Engine) indexHeads(ctx context.Context, keys []string, limit int, upTo ...int64) ([][]head, error) {
	args := []interface{}{limit}
	if len(upTo) > 0 {
		args = append(args, upTo[0])
	}
	var replies [][]interface{}
	if !e.cluster {
		res, err := e.run(ctx, pumpHeadsScript, keys, args...).Slice()
		if err != nil {
			return nil, err
		}
		replies = [][]interface{}{res}
	} else {
		cmds := make([]*redis.Cmd, len(keys))
		_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = pumpHeadsScript.EvalSha(ctx, p, []string{k}, args...)
			}
			return nil
		})
		for i, c := range cmds {
			if err := c.Err(); err != nil && (isNoScript(err) || clusterRetryable(err)) {
				c = e.run(ctx, pumpHeadsScript, []string{keys[i]}, args...)
			}
			res, err := c.Slice()
			if err != nil {
				return nil, err
			}
			replies = append(replies, res)
		}
	}
	out := make([][]head, 0, len(keys))
	for _, res := range replies {
		for j := 0; j < len(res); {
			n, _ := res[j].(int64)
			j++
			if n < 0 || j+2*int(n) > len(res) {
				return nil, fmt.Errorf("unexpected index reply %v", res)
			}
			hs := make([]head, n)
			for k := range hs {
				hs[k].member, _ = res[j].(string)
				sc, _ := res[j+1].(string)
				f, _ := strconv.ParseFloat(sc, 64)
				hs[k].score = int64(f)
				j += 2
			}
			out = append(out, hs)
		}
	}
	if len(out) != len(keys) {
		return nil, fmt.Errorf("index heads: %d replies for %d indexes", len(out), len(keys))
	}
	return out, nil
}

// cutMember splits an index or registry member "ns/q".
func cutMember(m string) (ns, q string, ok bool) {
	for i := 0; i < len(m); i++ {
		if m[i] == '/' {
			return m[:i], m[i+1:], true
		}
	}
	return "", "", false
}

// histExpired counts the jobs of expired TTRs the pump retried or killed:
// triples {"ns/q", retried, dead} of its reply.
func (e *Engine) histExpired(triples []interface{}) {
	if e.hist == nil {
		return
	}
	for i := 0; i+2 < len(triples); i += 3 {
		m, _ := triples[i].(string)
		retried, _ := triples[i+1].(int64)
		dead, _ := triples[i+2].(int64)
		ns, q, ok := strings.Cut(m, "/")
		if !ok {
			continue
		}
		qn := e.names.get([3]string{ns, q})
		e.histAdd(ns, q, qn, hRetried, retried)
		e.histAdd(ns, q, qn, hDead, dead)
	}
}

// tracePump makes one span per queue of a pump batch that started at
// start: moved holds each queue's member (ns/q) and the IDs of its timer
// entries the batch handled (made ready, retried later, sent to the dead
// letter, or dropped when their job was gone).
func (e *Engine) tracePump(ctx context.Context, start time.Time, moved []interface{}) {
	end := time.Now()
	for i := 0; i+1 < len(moved); i += 2 {
		m, _ := moved[i].(string)
		raw, _ := moved[i+1].([]interface{})
		ids := make([]string, 0, len(raw))
		for _, v := range raw {
			if id, ok := v.(string); ok {
				ids = append(ids, id)
			}
		}
		ns, q, _ := strings.Cut(m, "/")
		attrs := append(tracing.Queue(ns, q), tracing.AttrPool.String(e.pool), tracing.AttrMoved.Int(len(ids)))
		attrs = append(attrs, tracing.JobIDs(ids)...)
		_, span := e.tracer.Start(ctx, tracing.SpanPump, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(end))
	}
}
