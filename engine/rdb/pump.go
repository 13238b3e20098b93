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

// PumpOnce moves every entry due now, in batches of PumpBatch per group,
// and returns the pool's next due time in Unix milliseconds, or -1 when
// the timers are empty. Several servers may pump one pool at once: each
// batch is atomic.
func (e *Engine) PumpOnce(ctx context.Context) (int64, error) {
	groups := make([]int, slotGroups)
	for g := range groups {
		groups[g] = g
	}
	next := int64(-1)
	for len(groups) > 0 {
		more, nxt, err := e.pumpGroups(ctx, groups)
		if err != nil {
			return 0, fmt.Errorf("pump pool %s: %w", e.pool, err)
		}
		if nxt >= 0 && (next < 0 || nxt < next) {
			next = nxt
		}
		groups = more
	}
	return next, nil
}

// pumpGroups runs one pump pass over groups. It returns the groups whose
// batch was full (more may be due) and the earliest next due time of the
// others (-1 when none).
func (e *Engine) pumpGroups(ctx context.Context, groups []int) (more []int, next int64, err error) {
	now := ms(e.now())
	next = -1
	report := "0"
	if e.tracer != nil {
		report = "1"
	}
	heads, err := e.pumpHeads(ctx, groups)
	if err != nil {
		return nil, 0, err
	}
	type call struct {
		g   int
		cmd *redis.Cmd
	}
	var calls []call
	var keys [][]string
	var args [][]interface{}
	for i, g := range groups {
		var due []string
		for _, z := range heads[i] {
			if z.score > now {
				if next < 0 || z.score < next {
					next = z.score
				}
				break
			}
			due = append(due, z.member)
		}
		if len(due) == 0 {
			continue
		}
		k := make([]string, 1, 1+6*len(due))
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
		calls = append(calls, call{g: g})
		keys = append(keys, k)
		args = append(args, a)
	}
	if len(calls) == 0 {
		return nil, next, nil
	}
	start := time.Now()
	_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range calls {
			calls[i].cmd = pumpScript.EvalSha(ctx, p, keys[i], args[i]...)
		}
		return nil
	})
	for i, c := range calls {
		if err := c.cmd.Err(); err != nil && (isNoScript(err) || e.retryFor > 0 && clusterRetryable(err)) {
			// The script cache was flushed (or a node restarted), or a
			// cluster answered TRYAGAIN or CLUSTERDOWN (nothing ran): EVALSHA,
			// then EVAL, retried (retry.go).
			c.cmd = e.run(ctx, pumpScript, keys[i], args[i]...)
		}
		res, err := c.cmd.Slice()
		if err != nil {
			return nil, 0, err
		}
		if len(res) != 4 {
			return nil, 0, fmt.Errorf("unexpected reply %v", res)
		}
		handled, ok1 := res[0].(int64)
		nxt, ok2 := res[1].(int64)
		expired, ok3 := res[2].([]interface{})
		moved, ok4 := res[3].([]interface{})
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, 0, fmt.Errorf("unexpected reply %v", res)
		}
		// Each group reports its own queues: the history and the spans
		// add up over the groups of a pass.
		e.histExpired(expired)
		if e.tracer != nil {
			e.tracePump(ctx, start, moved)
		}
		e.metrics.pumped(handled, handled >= int64(e.batch))
		if handled >= int64(e.batch) {
			more = append(more, c.g)
		} else if nxt >= 0 && (next < 0 || nxt < next) {
			next = nxt
		}
	}
	return more, next, nil
}

type head struct {
	member string
	score  int64
}

// pumpHeads reads the first PumpBatch members of the groups' timer
// indexes (pumpHeadsScript): one call over every group on one Redis, one
// call per group, pipelined, on a cluster.
func (e *Engine) pumpHeads(ctx context.Context, groups []int) ([][]head, error) {
	keys := make([]string, len(groups))
	for i, g := range groups {
		keys[i] = timerIndexKey(g)
	}
	return e.indexHeads(ctx, keys, e.batch)
}

// indexHeads reads the first limit members of the sorted sets keys, each
// a group's index (pumpHeadsScript): one call over every key on one Redis,
// one call per key, pipelined, on a cluster. The pump reads the timer
// indexes with it, the scheduler the schedule indexes.
func (e *Engine) indexHeads(ctx context.Context, keys []string, limit int) ([][]head, error) {
	var replies [][]interface{}
	if !e.cluster {
		res, err := e.run(ctx, pumpHeadsScript, keys, limit).Slice()
		if err != nil {
			return nil, err
		}
		replies = [][]interface{}{res}
	} else {
		cmds := make([]*redis.Cmd, len(keys))
		_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = pumpHeadsScript.EvalSha(ctx, p, []string{k}, limit)
			}
			return nil
		})
		for i, c := range cmds {
			if err := c.Err(); err != nil && (isNoScript(err) || clusterRetryable(err)) {
				c = e.run(ctx, pumpHeadsScript, []string{keys[i]}, limit)
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
