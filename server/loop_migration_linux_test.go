//go:build linux

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/migration"
	"github.com/kairos-dev/kairos/engine/rdb"
)

// countingEngine is a Redis engine that counts the calls of the event
// loops' forms (batches and watches): they show that the loops served.
type countingEngine struct {
	*rdb.Engine
	publishEach, consumeEach, deleteEach, watch atomic.Int64
}

func (c *countingEngine) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	c.publishEach.Add(1)
	c.Engine.PublishEach(ctx, reqs, ids, errs)
}

func (c *countingEngine) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	c.consumeEach.Add(1)
	c.Engine.ConsumeEach(ctx, reqs, jobs, errs)
}

func (c *countingEngine) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	c.deleteEach.Add(1)
	c.Engine.DeleteEach(ctx, refs, errs)
}

func (c *countingEngine) Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	c.watch.Add(1)
	return c.Engine.Watch(ns, queues, fn)
}

// runningEngine runs a counting Redis engine on a fresh miniredis until
// the test ends.
func runningEngine(t *testing.T) *countingEngine {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	e, err := rdb.New(context.Background(), client, rdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); _ = client.Close() })
	return &countingEngine{Engine: e}
}

// TestLoopMigratingPool: a pool that is migrating (MigrateTo) is served by
// the event loops like any other: publishes go to the new pool, consumes
// take the old pool's jobs first, ACKs reach either pool, and a parked
// consume is woken by a job that comes back to the old pool.
func TestLoopMigratingPool(t *testing.T) {
	oldPool, newPool := runningEngine(t), runningEngine(t)
	m := migration.New(oldPool, newPool)
	_, _, addr := serveLoops(t, func(_ *config.Config, d *Deps) { d.Engines["default"] = m })
	conn := dialLoop(t, addr, 10*time.Second)
	br := bufio.NewReader(conn)
	ctx := context.Background()

	oldID, err := oldPool.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("old"), Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	get := func(timeout int) string {
		return fmt.Sprintf("GET /api/ns/q?timeout=%d HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", timeout, goodToken)
	}
	del := func(id string) string {
		return fmt.Sprintf("DELETE /api/ns/q/job/%s HTTP/1.1\r\nHost: kairos\r\nX-Token: %s\r\n\r\n", id, goodToken)
	}

	// A publish and a consume in one pass: the job goes to the new pool,
	// the consumer gets the old pool's job first.
	_, _ = io.WriteString(conn, fastPut("new")+get(0))
	a := readAnswers(t, br, 2)
	newID := jobIDOf(a[0].body)
	if a[0].status != 201 || a[1].status != 200 || jobIDOf(a[1].body) != oldID {
		t.Fatalf("publish, consume: %+v; want the old pool's %s consumed", a, oldID)
	}
	if _, err := newPool.PeekJob(ctx, "ns", "q", newID); err != nil {
		t.Fatalf("the published job is not in the new pool: %v", err)
	}
	// The ACK of the old pool's job, then the new pool's job.
	_, _ = io.WriteString(conn, del(oldID)+get(0))
	a = readAnswers(t, br, 2)
	if a[0].status != 204 || a[1].status != 200 || jobIDOf(a[1].body) != newID {
		t.Fatalf("ACK, consume: %+v; want the new pool's %s", a, newID)
	}
	_, _ = io.WriteString(conn, del(newID))
	if a := readAnswers(t, br, 1); a[0].status != 204 {
		t.Fatalf("ACK: %+v", a)
	}
	for _, p := range []*countingEngine{oldPool, newPool} {
		for _, id := range []string{oldID, newID} {
			if _, err := p.PeekJob(ctx, "ns", "q", id); !errors.Is(err, engine.ErrJobNotFound) {
				t.Fatalf("job %s after its ACK: %v", id, err)
			}
		}
	}

	// A parked consume, woken by a job of the old pool.
	_, _ = io.WriteString(conn, get(5))
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	backID, err := oldPool.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("back"), Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a := readAnswers(t, br, 1); a[0].status != 200 || jobIDOf(a[0].body) != backID {
		t.Fatalf("parked consume: %+v; want %s", a, backID)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("parked consume answered %v after the old pool's job", d)
	}

	// The loops served: the batches and watches reached both pools.
	for name, n := range map[string]int64{
		"new pool PublishEach": newPool.publishEach.Load(),
		"old pool ConsumeEach": oldPool.consumeEach.Load(),
		"new pool ConsumeEach": newPool.consumeEach.Load(),
		"old pool DeleteEach":  oldPool.deleteEach.Load(),
		"new pool DeleteEach":  newPool.deleteEach.Load(),
		"old pool Watch":       oldPool.watch.Load(),
		"new pool Watch":       newPool.watch.Load(),
	} {
		if n == 0 {
			t.Errorf("%s: no call; the event loops did not serve the migrating pool", name)
		}
	}
}
