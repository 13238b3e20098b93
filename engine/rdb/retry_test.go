package rdb

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// failFirst makes the first n EVALSHA/EVAL commands fail with err, before
// they reach Redis (as a cluster answers TRYAGAIN before running anything).
type failFirst struct {
	n   atomic.Int32
	err error
}

func (f *failFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && f.n.Add(-1) >= 0 {
			cmd.SetErr(f.err)
			return f.err
		}
		return next(ctx, cmd)
	}
}
func (f *failFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// runRetry retries TRYAGAIN and CLUSTERDOWN within its limit, and the
// script runs once; other errors, or no limit, are not retried.
func TestRunRetry(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	for _, tc := range []struct {
		name   string
		err    error
		fails  int32
		limit  time.Duration
		want   int64 // the counter after the call
		wantOK bool
	}{
		{"tryagain", redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), 3, 5 * time.Second, 1, true},
		{"clusterdown", redisErr("CLUSTERDOWN The cluster is down"), 2, 5 * time.Second, 1, true},
		{"bounded", redisErr("CLUSTERDOWN The cluster is down"), 1000, 200 * time.Millisecond, 0, false},
		{"no limit", redisErr("TRYAGAIN x"), 1, 0, 0, false},
		{"other error", redisErr("ERR something else"), 1, 5 * time.Second, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.FlushAll()
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			defer c.Close()
			f := &failFirst{err: tc.err}
			f.n.Store(tc.fails)
			c.AddHook(f)
			start := time.Now()
			err := runRetry(ctx, c, incr, tc.limit, []string{"k"}).Err()
			if (err == nil) != tc.wantOK {
				t.Fatalf("err = %v, want ok %v", err, tc.wantOK)
			}
			if !tc.wantOK && !errors.Is(err, tc.err) && err.Error() != tc.err.Error() {
				t.Errorf("err = %v, want %v", err, tc.err)
			}
			if took := time.Since(start); took > tc.limit+time.Second {
				t.Errorf("took %v, limit %v", took, tc.limit)
			}
			if n, _ := c.Get(ctx, "k").Int64(); n != tc.want {
				t.Errorf("counter %d, want %d: the script ran %d times", n, tc.want, n)
			}
		})
	}
}

// refuseKeys answers MOVED, without sending them, to the pipelined
// commands on key (the second argument) for the first n pipelines, and
// sends the others: a pipeline split between a node that runs its part and
// one that refuses its own.
type refuseKeys struct {
	key string
	n   atomic.Int32
}

func (f *refuseKeys) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *refuseKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *refuseKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f.n.Add(-1) < 0 {
			return next(ctx, cmds)
		}
		var send []redis.Cmder
		for _, c := range cmds {
			if args := c.Args(); len(args) > 1 && args[1] == f.key {
				c.SetErr(redisErr("MOVED 1234 127.0.0.1:1"))
				continue
			}
			send = append(send, c)
		}
		if len(send) > 0 {
			_ = next(ctx, send)
		}
		return firstErr(cmds) // as a cluster client's pipeline answers
	}
}

// retryCmds sends again only the commands a cluster refused, until they
// run or the limit: a HINCRBY beside them that ran is not run twice.
func TestRetryCmds(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		refusals  int32
		limit     time.Duration
		wantA     int64 // the refused key's counter after the call
		wantError bool
	}{
		{"retried", 3, 5 * time.Second, 1, false},
		{"bounded", 1000, 200 * time.Millisecond, 0, true},
		{"no limit", 1, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.FlushAll()
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			defer c.Close()
			f := &refuseKeys{key: "a"}
			f.n.Store(tc.refusals)
			c.AddHook(f)
			p := c.Pipeline()
			p.HIncrBy(ctx, "a", "f", 1)
			p.HIncrBy(ctx, "b", "f", 1)
			cmds, _ := p.Exec(ctx)
			start := time.Now()
			err := retryCmds(ctx, c, tc.limit, cmds)
			if (err != nil) != tc.wantError || err != nil && !clusterRetryable(err) {
				t.Fatalf("err = %v, want an error %v (MOVED)", err, tc.wantError)
			}
			if took := time.Since(start); took > tc.limit+time.Second {
				t.Errorf("took %v, limit %v", took, tc.limit)
			}
			a, _ := c.HGet(ctx, "a", "f").Int64()
			b, _ := c.HGet(ctx, "b", "f").Int64()
			if a != tc.wantA || b != 1 {
				t.Errorf("counters a %d b %d; want %d and 1: a command ran twice or not at all", a, b, tc.wantA)
			}
		})
	}
}
