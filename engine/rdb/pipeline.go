package rdb

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Auto-pipelining: concurrent script calls of one pool are sent to Redis
// together, as one pipeline (one write and one read on one connection for
// many calls), instead of one round trip each. Under light load a call goes
// alone and costs one channel hand-off more; under heavy load Redis and the
// server both make far fewer system calls. Order between concurrent callers
// was never defined, so batching changes no semantics: each script is still
// one atomic step.

type pipeCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []interface{}
	cmd    *redis.Cmd
	done   chan struct{}
	rank   int // the step's place, for calls of a pass (pass.go)
}

// autoPipeline batches concurrent calls over a few sender goroutines.
type autoPipeline struct {
	c        redis.UniversalClient
	retryFor time.Duration // cluster errors are retried this long (retry.go)
	calls    chan *pipeCall
	maxBatch int
	wg       sync.WaitGroup
	stop     chan struct{}
	mu       sync.RWMutex // held for reading while enqueueing
	closed   bool

	// nCalls and nSends count the calls and the round trips (pipelines or
	// lone calls) that carried them, for benchmarks: nCalls/nSends is the
	// mean batch size.
	nCalls, nSends atomic.Int64
}

// newAutoPipeline starts senders goroutines; close stops them. Callers
// block until their call's reply is read.
func newAutoPipeline(c redis.UniversalClient, senders, maxBatch int, retryFor time.Duration) *autoPipeline {
	p := &autoPipeline{c: c, retryFor: retryFor, calls: make(chan *pipeCall, senders*maxBatch), maxBatch: maxBatch, stop: make(chan struct{})}
	for i := 0; i < senders; i++ {
		p.wg.Add(1)
		go p.send()
	}
	return p
}

var callPool = sync.Pool{New: func() any { return &pipeCall{done: make(chan struct{}, 1)} }}

func (p *autoPipeline) run(ctx context.Context, s *redis.Script, keys []string, args ...interface{}) *redis.Cmd {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return runRetry(ctx, p.c, s, p.retryFor, keys, args...)
	}
	c := newCall(ctx, s, keys, args, 0)
	p.calls <- c
	p.mu.RUnlock()
	return c.wait()
}

// newCall takes a call from the pool.
func newCall(ctx context.Context, s *redis.Script, keys []string, args []interface{}, rank int) *pipeCall {
	c := callPool.Get().(*pipeCall)
	c.ctx, c.script, c.keys, c.args, c.rank = ctx, s, keys, args, rank
	return c
}

// wait waits for the call's reply, returns it and gives the call back to
// the pool.
func (c *pipeCall) wait() *redis.Cmd {
	<-c.done
	cmd := c.cmd
	c.ctx, c.script, c.keys, c.args, c.cmd = nil, nil, nil, nil, nil
	callPool.Put(c)
	return cmd
}

func (p *autoPipeline) send() {
	defer p.wg.Done()
	batch := make([]*pipeCall, 0, p.maxBatch)
	for {
		select {
		case c := <-p.calls:
			batch = append(batch[:0], c)
		case <-p.stop:
			// Every enqueue happened before close took the lock: finish them.
			for {
				select {
				case c := <-p.calls:
					p.exec([]*pipeCall{c})
				default:
					return
				}
			}
		}
	gather:
		for len(batch) < p.maxBatch {
			select {
			case c := <-p.calls:
				batch = append(batch, c)
			default:
				break gather
			}
		}
		p.exec(batch)
	}
}

func (p *autoPipeline) exec(batch []*pipeCall) {
	p.nSends.Add(1)
	p.nCalls.Add(int64(len(batch)))
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = runRetry(c.ctx, p.c, c.script, p.retryFor, c.keys, c.args...)
		c.done <- struct{}{}
		return
	}
	// The pipeline runs under the first caller's context with cancellation
	// removed: one caller going away must not fail the others' calls.
	ctx := context.WithoutCancel(batch[0].ctx)
	pipe := p.c.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range batch {
		// Scripts are loaded at New, but a SCRIPT FLUSH or a restarted Redis
		// (a new master after a failover) empties the cache: fall back to
		// Run (EVALSHA, then EVAL). A call a cluster answered TRYAGAIN or
		// CLUSTERDOWN did not run: it goes again alone (runRetry).
		if err := c.cmd.Err(); err != nil && (isNoScript(err) || p.retryFor > 0 && clusterRetryable(err)) {
			c.cmd = runRetry(ctx, p.c, c.script, p.retryFor, c.keys, c.args...)
		}
		c.done <- struct{}{}
	}
}

func isNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// close stops the senders after the calls in flight.
func (p *autoPipeline) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
}
