package rdb

import (
	"context"
	"errors"
	"sync"
)

// Coalescing (group commit): concurrent operations of one kind on one key —
// a queue (ACKs), a queue list and TTR (consumes), or one of a pool's
// publish lanes (publishes, across queues) — run as one script call. Redis 7 spends about 10 µs setting up every script
// call whatever it does (doc/performance.md), more than the few commands a
// publish or an ACK makes; one call for many jobs pays that once, and the
// server builds and decodes one command instead of many.
//
// No timer and no added wait: the first caller for a queue runs its
// operation at once. Callers that arrive while it runs queue up; when it
// ends, the first of them runs them all as the next batch, and so on. When
// the server is idle every batch has one operation; under load a batch has
// about as many as there are concurrent callers, and each waits at most for
// the batch before its own. Each batch is still one atomic script, so
// nothing changes for a caller but the CPU its operation costs.

// errBatchAborted is the result of an operation whose batch ended without
// setting one (the batch function panicked).
var errBatchAborted = errors.New("rdb: batched operation did not complete")

// batchCall is one operation waiting in a coalescer: its input, its result
// and the channel that tells it that the result is set or that it must run
// the next batch (lead).
type batchCall[T any] struct {
	in   T
	err  error
	done chan struct{} // one signal per call
	lead []*batchCall[T]
}

// coalescer batches the calls made with the same key (a queue).
type coalescer[T any] struct {
	max int // most calls in one batch; later callers wait for the next
	// run performs a batch and sets each call's result (in and err).
	run func(ctx context.Context, batch []*batchCall[T])

	mu sync.Mutex
	// pending holds, for each key with a batch running, the calls that
	// will make up the next batch.
	pending map[string][]*batchCall[T]
	pool    sync.Pool
}

func newCoalescer[T any](max int, run func(context.Context, []*batchCall[T])) *coalescer[T] {
	return &coalescer[T]{max: max, run: run, pending: make(map[string][]*batchCall[T])}
}

// do runs in on key, alone or with concurrent calls, and returns in (with
// its results set) and the error.
func (c *coalescer[T]) do(ctx context.Context, key string, in T) (T, error) {
	// A batch led from a pass step must not wait for the pass's round:
	// others wait for it.
	ctx = outsidePass(ctx)
	call, _ := c.pool.Get().(*batchCall[T])
	if call == nil {
		call = &batchCall[T]{done: make(chan struct{}, 1)}
	}
	call.in, call.err = in, nil
	defer func() {
		var zero T
		call.in, call.err, call.lead = zero, nil, nil
		c.pool.Put(call)
	}()

	c.mu.Lock()
	next, busy := c.pending[key]
	switch {
	case !busy:
		c.pending[key] = nil
		c.mu.Unlock()
		c.exec(ctx, key, []*batchCall[T]{call})
	case len(next) < c.max:
		c.pending[key] = append(next, call)
		c.mu.Unlock()
		<-call.done
		if batch := call.lead; batch != nil {
			c.exec(ctx, key, batch)
		}
	default:
		// The next batch is full: run alone, beside the batches.
		c.mu.Unlock()
		c.runBatch(ctx, []*batchCall[T]{call})
	}
	return call.in, call.err
}

// doAll runs calls on key in order, joined with concurrent callers' calls
// as do joins one: in batches of at most max, each batch waiting for the
// one before it on key. The calls of one batch stay together and in
// order, and a batch ends before the next starts, so calls of one queue
// run in the order given. A call's done channel must be buffered (one
// signal).
func (c *coalescer[T]) doAll(ctx context.Context, key string, calls []*batchCall[T]) {
	ctx = outsidePass(ctx)
	for len(calls) > 0 {
		n := min(len(calls), c.max)
		chunk := calls[:n]
		calls = calls[n:]
		c.mu.Lock()
		next, busy := c.pending[key]
		switch {
		case !busy:
			c.pending[key] = nil
			c.mu.Unlock()
			c.exec(ctx, key, chunk)
			// exec signalled the chunk's other calls: take the signals.
			for _, o := range chunk[1:] {
				<-o.done
			}
		case len(next)+n <= c.max:
			// The whole chunk goes into the next batch, after the calls
			// already waiting; its first call may lead that batch.
			c.pending[key] = append(next, chunk...)
			c.mu.Unlock()
			for _, o := range chunk {
				<-o.done
				if batch := o.lead; batch != nil {
					o.lead = nil
					c.exec(ctx, key, batch)
				}
			}
		default:
			// No room in the next batch: run beside the batches.
			c.mu.Unlock()
			c.runBatch(ctx, chunk)
		}
	}
}

// exec runs batch, whose first call is the caller's own, wakes the others,
// and hands the calls that queued meanwhile to the first of them.
func (c *coalescer[T]) exec(ctx context.Context, key string, batch []*batchCall[T]) {
	defer func() {
		for _, o := range batch[1:] {
			o.done <- struct{}{}
		}
		c.mu.Lock()
		next := c.pending[key]
		if len(next) == 0 {
			delete(c.pending, key)
			c.mu.Unlock()
			return
		}
		c.pending[key] = nil
		c.mu.Unlock()
		next[0].lead = next
		next[0].done <- struct{}{}
	}()
	// One caller leaving must not fail the others' operations.
	c.runBatch(context.WithoutCancel(ctx), batch)
}

func (c *coalescer[T]) runBatch(ctx context.Context, batch []*batchCall[T]) {
	for _, o := range batch {
		o.err = errBatchAborted
	}
	c.run(ctx, batch)
}
