package rdb

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// resendScripts runs the next script calls (as many as armed) twice, as go-redis does
// when the reply of the first run is lost to a read timeout or a broken
// connection although the script went through (a Redis stalled for longer
// than the read timeout).
type resendScripts struct{ armed atomic.Int32 }

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

func (h *resendScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resendScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isScript(cmd) && h.armed.Add(-1) >= 0 {
			return next(ctx, cmd)
		}
		return err
	}
}

func (h *resendScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			for _, c := range cmds {
				if isScript(c) && h.armed.Add(-1) >= 0 {
					return next(ctx, cmds)
				}
			}
		}
		return err
	}
}

// TestPublishResentByGoRedis: a publish script that go-redis sends again
// after its first run went through finds its first job's key taken by
// itself; it is the same publish, not an ID collision: one job each, not
// a second one under a fresh ID (a Redis SIGSTOPped for 7 s made a single
// PUT publish two jobs).
func TestPublishResentByGoRedis(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	hook := &resendScripts{}
	client.AddHook(hook)
	e := startEngine(t, client, newTestClock())
	ctx := context.Background()
	req := func(body string) *engine.PublishRequest {
		return &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte(body), TTL: 0, Tries: 1}
	}
	hook.armed.Store(1)
	id, err := e.Publish(ctx, req("one"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	hook.armed.Store(1)
	ids, err := e.PublishBatch(ctx, []*engine.PublishRequest{req("a"), req("b"), req("c")})
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	more := make([]string, 2)
	errs := make([]error, 2)
	hook.armed.Store(1)
	e.PublishEach(ctx, []*engine.PublishRequest{req("x"), req("y")}, more, errs)
	for _, err := range errs {
		if err != nil {
			t.Fatalf("PublishEach: %v", err)
		}
	}
	var jobs []string
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, jobKeyPrefix("ns", "q")) {
			jobs = append(jobs, strings.TrimPrefix(k, jobKeyPrefix("ns", "q")))
		}
	}
	want := append(append([]string{id}, ids...), more...)
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs %v for %d publishes %v", len(jobs), jobs, len(want), want)
	}
}
