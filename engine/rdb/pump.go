package rdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pump moves due timer entries (delayed jobs and in-flight jobs whose
// TTR passed) to ready lists or dead letters. It sleeps until the pool's
// earliest due time, never longer than MaxPumpSleep, and is woken early when
// a publish or consume on any server makes an earlier entry (in process
// through wakePump, across servers through the groups' wake-up channels).
//
// Each slot group has its own timer index (keys.go). A pass reads the due
// queues of every group (ZRANGE of each index, in one pipeline: one round
// trip, per node on a cluster), then runs pumpScript for the groups that
// have due queues, with those queues' keys, in a second pipeline.

// wakePump asks the pump to look at the timer indexes again now.
func (e *Engine) wakePump() {
	select {
	case e.pumpWake <- struct{}{}:
	default:
	}
}

func (e *Engine) runPump(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.pumpWake:
		}
		next, err := e.PumpOnce(ctx)
		var sleep time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			e.log.WithError(err).Warn("pump failed; retrying")
			sleep = 100 * time.Millisecond
		case next < 0:
			sleep = e.maxWait
		default:
			sleep = time.Duration(next-ms(e.now())) * time.Millisecond
			if sleep > e.maxWait {
				sleep = e.maxWait
			}
			if sleep < 0 {
				sleep = 0
			}
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
	heads := make([]*redis.ZSliceCmd, len(groups))
	_, err = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			heads[i] = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: timerIndexKey(g), Start: 0, Stop: int64(e.batch) - 1})
		}
		return nil
	})
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
		zs := heads[i].Val()
		var due []string
		for _, z := range zs {
			if int64(z.Score) > now {
				if next < 0 || int64(z.Score) < next {
					next = int64(z.Score)
				}
				break
			}
			m, _ := z.Member.(string)
			due = append(due, m)
		}
		if len(due) == 0 {
			continue
		}
		k := make([]string, 1, 1+6*len(due))
		k[0] = timerIndexKey(g)
		a := make([]interface{}, 4, 4+2*len(due))
		a[0], a[1], a[2], a[3] = now, e.batch, rand.Uint32(), e.pub
		for _, m := range due {
			ns, q, _ := cutMember(m)
			qn := e.names.get([3]string{ns, q})
			k = append(k, qn.timer, qn.ready, qn.dead, qn.prio, qn.config, qn.jobPrefix)
			a = append(a, qn.argMember, qn.argChannel)
		}
		calls = append(calls, call{g: g})
		keys = append(keys, k)
		args = append(args, a)
	}
	if len(calls) == 0 {
		return nil, next, nil
	}
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
		res, err := c.cmd.Int64Slice()
		if err != nil {
			return nil, 0, err
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("unexpected reply %v", res)
		}
		e.metrics.pumped(res[0], res[0] >= int64(e.batch))
		if res[0] >= int64(e.batch) {
			more = append(more, c.g)
		} else if res[1] >= 0 && (next < 0 || res[1] < next) {
			next = res[1]
		}
	}
	return more, next, nil
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
