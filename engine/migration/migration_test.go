package migration

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
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

var bg = context.Background()

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// pair runs two engines on two Redis servers with one clock.
func pair(t *testing.T, oldC, newC redis.UniversalClient, elapse func(time.Duration)) (*Engine, *enginetest.Harness) {
	t.Helper()
	c := &clock{}
	var engines []*rdb.Engine
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for _, cl := range []redis.UniversalClient{oldC, newC} {
		e, err := rdb.New(bg, cl, rdb.Options{Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	m := New(engines[0], engines[1])
	return m, &enginetest.Harness{
		Engine: m,
		Advance: func(d time.Duration) {
			c.off.Add(int64(d))
			for _, e := range engines {
				if _, err := e.PumpOnce(bg); err != nil {
					t.Fatal(err)
				}
			}
		},
		Elapse: elapse,
	}
}

func miniPair(t *testing.T) (*Engine, *enginetest.Harness) {
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	ca := redis.NewClient(&redis.Options{Addr: a.Addr()})
	cb := redis.NewClient(&redis.Options{Addr: b.Addr()})
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	return pair(t, ca, cb, func(d time.Duration) { a.FastForward(d); b.FastForward(d) })
}

// The migration engine is an engine like any other: it passes the contract.
func TestContract(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness { _, h := miniPair(t); return h })
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness { _, h := miniPair(t); return h })
}

func TestMigrationOnRealRedis(t *testing.T) {
	oldS, newS := redistest.Start(t), redistest.Start(t)
	m, _ := pair(t, oldS.Client(), newS.Client(), time.Sleep)
	// Jobs published before the migration sit in the old pool.
	oldID, err := m.Old.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 2, Body: []byte("old")})
	if err != nil {
		t.Fatal(err)
	}
	newID, err := m.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("new")})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := newS.Client().Exists(bg, "j/{ns/q}/"+newID).Result(); n != 1 {
		t.Fatal("a publish during migration did not land in the new pool")
	}
	if n, _ := m.Size(bg, "ns", "q"); n != 2 {
		t.Fatalf("size = %d, want both pools' 2", n)
	}
	p, err := m.PeekJob(bg, "ns", "q", oldID)
	if err != nil || string(p.Body) != "old" {
		t.Fatalf("peek of an old job: %v %v", p, err)
	}
	// Consumers drain the old pool first, then the new one.
	jobs, err := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: time.Second})
	if err != nil || len(jobs) != 1 || jobs[0].ID != oldID {
		t.Fatalf("first consume = %v %v, want the old job", jobs, err)
	}
	// A receipt from the old pool still releases there.
	if err := m.Release(bg, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: oldID, Receipt: jobs[0].Receipt, KeepTry: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{oldID, newID} {
		jobs, err = m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: time.Second})
		if err != nil || len(jobs) != 1 || jobs[0].ID != want {
			t.Fatalf("consume = %v %v, want %s", jobs, err, want)
		}
		if err := m.Delete(bg, "ns", "q", want); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer waiting during the migration is woken by a publish (to
	// the new pool).
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, _ := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: 3 * time.Second})
		got <- jobs
	}()
	time.Sleep(100 * time.Millisecond)
	id, _ := m.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if jobs := <-got; len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("waiting consumer got %v", jobs)
	}
}
