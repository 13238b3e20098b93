package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kairos "github.com/kairos-dev/kairos/client"
)

// The *Go scenarios measure the same work as their bare counterparts
// (Publish, BulkPublish, ConsumeAck, Delayed) through the official Go
// client (package client) and its Worker, as doc/client.md tells users to
// use them, against the same server: `make bench-check` holds their
// ratio to the bare client's figures (issue #34), so that what a user of
// the client gets stays what the server can give.

// goClient is a kairos.Client of cfg's server, namespace and token.
func goClient(cfg Config) (*kairos.Client, error) {
	opts := []kairos.Option{kairos.WithNamespace(cfg.Namespace), kairos.WithToken(cfg.Token)}
	if cfg.TLS != nil {
		opts = append(opts, kairos.WithTLSConfig(cfg.TLS))
	}
	return kairos.New(cfg.Addr, opts...)
}

// goSetup starts every scenario through the Go client: cfg's defaults,
// the bare client (which fills, drains and marks CPU), the Go client, and
// the run's queue for scenario, prepared.
func goSetup(ctx context.Context, cfg *Config, scenario string) (*client, *kairos.Client, string, error) {
	cfg.defaults()
	c, err := newClient(*cfg)
	if err != nil {
		return nil, nil, "", err
	}
	gc, err := goClient(*cfg)
	if err != nil {
		return nil, nil, "", err
	}
	queue := runQueue(cfg.Queue, scenario)
	if err := cfg.prepare(ctx, queue); err != nil {
		return nil, nil, "", err
	}
	return c, gc, queue, nil
}

// PublishGo is Publish through kairos.Client.Publish.
func PublishGo(ctx context.Context, cfg Config) (Result, error) {
	c, gc, queue, err := goSetup(ctx, &cfg, "publish-go")
	if err != nil {
		return Result{}, err
	}
	body := c.body(0)
	return timed(ctx, cfg, c, "publish_go", func(ctx context.Context, _ *conn) (int, error) {
		_, err := gc.Publish(ctx, queue, body)
		return 1, err
	}), nil
}

// BulkPublishGo is BulkPublish through kairos.Client.BatchPublish.
func BulkPublishGo(ctx context.Context, cfg Config) (Result, error) {
	c, gc, queue, err := goSetup(ctx, &cfg, "bulk-go")
	if err != nil {
		return Result{}, err
	}
	// The same JSON strings as the bare client's bulk body (bulkBody).
	jobs := make([]any, cfg.BulkSize)
	for i := range jobs {
		jobs[i] = string(c.body(int64(i)))
	}
	r := timed(ctx, cfg, c, "bulk_publish_go", func(ctx context.Context, _ *conn) (int, error) {
		_, err := gc.BatchPublish(ctx, queue, jobs)
		return len(jobs), err
	})
	r.Note = addNote(fmt.Sprintf("%d jobs per request", cfg.BulkSize), r.Note)
	return r, nil
}

// ConsumeAckGo is ConsumeAck through a client.Worker of Concurrency slots
// whose handler does nothing: the Worker consumes (with receipts) and ACKs
// each job (of that delivery). It ends when the queue is empty or
// Duration ends.
func ConsumeAckGo(ctx context.Context, cfg Config) (Result, error) {
	c, gc, queue, err := goSetup(ctx, &cfg, "consume-go")
	if err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	if err := fill(ctx, c, queue, cfg.Jobs, 0); err != nil {
		return Result{}, err
	}
	var acked, errs atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	w, err := kairos.NewWorker(gc, kairos.WorkerConfig{
		Queues: []string{queue}, Concurrency: cfg.Concurrency, PollTimeout: time.Second,
		OnError: func(*kairos.Job, error) { errs.Add(1) },
	}, func(ctx context.Context, job *kairos.Job) error {
		if acked.Add(1) >= int64(cfg.Jobs) {
			once.Do(func() { close(all) })
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	cfg.settle(ctx)
	mark := cfg.cpuMark(ctx)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	if err := w.Start(wctx); err != nil {
		return Result{}, err
	}
	select {
	case <-all:
	case <-wctx.Done():
	}
	// Handled counts jobs handed to the handler; the last ACKs finish
	// as the worker stops.
	_ = w.Stop(context.WithoutCancel(ctx))
	elapsed := time.Since(start)
	st := w.Stats()
	r := Result{Scenario: "consume_ack_go", Ops: st.Acked, Errors: errs.Load(), Seconds: elapsed.Seconds()}
	r.PerSec = float64(r.Ops) / r.Seconds
	r.setCPU(context.WithoutCancel(ctx), &cfg, mark)
	return r, nil
}

// DelayedGo is Delayed with the jobs published through kairos.Client
// (kairos.Delay) and consumed by a client.Worker of Concurrency slots with
// its default poll timeout: lateness is delivery to the handler minus due
// time.
func DelayedGo(ctx context.Context, cfg Config) (Result, error) {
	c, gc, queue, err := goSetup(ctx, &cfg, "delayed-go")
	if err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	var errs, ops atomic.Int64
	var lat samples
	var mu sync.Mutex
	seen := make(map[string]bool)
	cfg.settle(ctx)
	mark := cfg.cpuMark(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kairos.NewWorker(gc, kairos.WorkerConfig{Queues: []string{queue}, Concurrency: cfg.Concurrency},
		func(ctx context.Context, job *kairos.Job) error {
			got := time.Now()
			mu.Lock()
			dup := seen[job.ID]
			seen[job.ID] = true
			mu.Unlock()
			if dup {
				return nil
			}
			if at, ok := bodyTime(job.Body); ok {
				lat.add(got.Sub(at))
			}
			ops.Add(1)
			return nil
		})
	if err != nil {
		return Result{}, err
	}
	if err := w.Start(wctx); err != nil {
		return Result{}, err
	}
	start := time.Now()
	var pwg sync.WaitGroup
	next := atomic.Int64{}
	for p := 0; p < 16; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			var buf []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Jobs) || ctx.Err() != nil {
					return
				}
				delay := time.Duration(1+i%5) * time.Second
				buf = c.appendBody(buf[:0], time.Now().Add(delay).UnixNano())
				if _, err := gc.Publish(ctx, queue, buf, kairos.Delay(delay)); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for ops.Load()+errs.Load() < int64(cfg.Jobs) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	_ = w.Stop(context.WithoutCancel(ctx))
	r := Result{Scenario: "delayed_lateness_go", Ops: ops.Load(), Errors: errs.Load(), Seconds: time.Since(start).Seconds(),
		Note: "latency columns are lateness (delivery - due); min < 0 means early"}
	r.PerSec = float64(r.Ops) / r.Seconds
	lat.fill(&r)
	r.setCPU(ctx, &cfg, mark)
	return r, nil
}
