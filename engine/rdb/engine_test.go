package rdb

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/enginetest"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// testClock is real time plus an offset that tests move forward.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) Add(d time.Duration)     { c.off.Add(int64(d)) }
func newTestClock() *testClock               { return &testClock{} }
func (c *testClock) offset() time.Duration   { return time.Duration(c.off.Load()) }
func (c *testClock) String() string          { return c.offset().String() }
func (c *testClock) since(t time.Time) int64 { return c.Now().Sub(t).Milliseconds() }

// startEngine runs an engine on client until the test ends.
func startEngine(t testing.TB, client redis.UniversalClient, clock *testClock) *Engine {
	t.Helper()
	return startEngineOpts(t, client, Options{Now: clock.Now})
}

// startEngineOpts runs an engine with opts on client until the test ends.
func startEngineOpts(t testing.TB, client redis.UniversalClient, opts Options) *Engine {
	t.Helper()
	e, err := New(context.Background(), client, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

func harness(t *testing.T, client redis.UniversalClient, elapse func(time.Duration)) *enginetest.Harness {
	clock := newTestClock()
	e := startEngine(t, client, clock)
	return &enginetest.Harness{
		Engine: e,
		Advance: func(d time.Duration) {
			clock.Add(d)
			if _, err := e.PumpOnce(context.Background()); err != nil {
				t.Fatalf("pump: %v", err)
			}
		},
		Elapse: elapse,
	}
}

func TestContractMiniredis(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		return harness(t, client, m.FastForward)
	})
}

func TestContractRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness {
		if err := client.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return harness(t, client, time.Sleep)
	})
}

func TestExtendedMiniredis(t *testing.T) {
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		return harness(t, client, m.FastForward)
	})
}

func TestExtendedRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness {
		if err := client.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return harness(t, client, time.Sleep)
	})
}

// serialEngine is the Redis engine with engine.Serial's generic batches,
// passes and (absent) watches, so that the contract suite checks Serial.
type serialEngine struct{ *Engine }

func (s serialEngine) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	engine.Serial{E: s.Engine}.PublishEach(ctx, reqs, ids, errs)
}

func (s serialEngine) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	engine.Serial{E: s.Engine}.ConsumeEach(ctx, reqs, jobs, errs)
}

func (s serialEngine) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	engine.Serial{E: s.Engine}.DeleteEach(ctx, refs, errs)
}

func (s serialEngine) Together(ctx context.Context, steps ...func(context.Context)) {
	engine.Serial{}.Together(ctx, steps...)
}

func (s serialEngine) Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	return engine.Serial{}.Watch(ns, queues, fn)
}

// engine.Serial passes the contract over the Redis engine's Core methods.
func TestContractSerial(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		h := harness(t, client, m.FastForward)
		h.Engine = serialEngine{h.Engine.(*Engine)}
		return h
	})
}
