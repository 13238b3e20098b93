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
