package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/kairos-dev/kairos/client"
	"github.com/redis/go-redis/v9"
)

// kairosPeer drives a running kairos-server through the project's own Go
// client and Worker, as doc/client.md shows them: one Client shared by
// every goroutine, Publish, BatchPublish, and a Worker of N slots (each
// slot long-polls, runs the handler and ACKs).
type kairosPeer struct {
	c      *client.Client
	rdb    *redis.Client
	mu     sync.Mutex
	queues map[string]bool
}

func newKairos(cfg config) (peer, error) {
	if cfg.kairosAddr == "" || cfg.token == "" || cfg.redis == "" {
		return nil, fmt.Errorf("kairos needs -kairos, -token and -redis")
	}
	c, err := client.New(cfg.kairosAddr, client.WithNamespace("bench"), client.WithToken(cfg.token))
	if err != nil {
		return nil, err
	}
	return &kairosPeer{c: c, rdb: redis.NewClient(&redis.Options{Addr: cfg.redis}), queues: map[string]bool{}}, nil
}

func (k *kairosPeer) name() string    { return "kairos" }
func (k *kairosPeer) version() string { return "this checkout" }

func (k *kairosPeer) use(q string) {
	k.mu.Lock()
	k.queues[q] = true
	k.mu.Unlock()
}

func (k *kairosPeer) enqueue(ctx context.Context, queue string, body []byte, due time.Time) error {
	k.use(queue)
	var opts []client.PublishOption
	if !due.IsZero() {
		opts = append(opts, client.DueAt(due))
	}
	_, err := k.c.Publish(ctx, queue, body, opts...)
	return err
}

func (k *kairosPeer) batch(ctx context.Context, queue string, bodies [][]byte, due time.Time) error {
	k.use(queue)
	jobs := make([]any, len(bodies))
	for i, b := range bodies {
		jobs[i] = json.RawMessage(b)
	}
	var opts []client.PublishOption
	if !due.IsZero() {
		opts = append(opts, client.DueAt(due))
	}
	_, err := k.c.BatchPublish(ctx, queue, jobs, opts...)
	return err
}

func (k *kairosPeer) work(ctx context.Context, queue string, concurrency int, h func([]byte)) (func(), error) {
	k.use(queue)
	w, err := client.NewWorker(k.c, client.WorkerConfig{Queues: []string{queue}, Concurrency: concurrency},
		func(_ context.Context, j *client.Job) error {
			h(j.Body)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}, nil
}

// clean destroys every queue used so far (ready, delayed and in-flight
// jobs): flushing Redis would also drop the server's token.
func (k *kairosPeer) clean(ctx context.Context) error {
	k.mu.Lock()
	qs := k.queues
	k.queues = map[string]bool{}
	k.mu.Unlock()
	for q := range qs {
		if err := k.c.DestroyQueue(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (k *kairosPeer) storeBytes(ctx context.Context) (int64, error) { return usedMemory(ctx, k.rdb) }

func (k *kairosPeer) close() { _ = k.rdb.Close() }

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var v int64
	for _, line := range splitLines(info) {
		if _, err := fmt.Sscanf(line, "used_memory:%d", &v); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("INFO memory has no used_memory")
}
