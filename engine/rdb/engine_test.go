package rdb

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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
