package rdb

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Passes: the steps of one event-loop pass (its ACKs, its publishes, its
// consumes) run side by side, and their script calls go to Redis together,
// one pipeline per round, in step order. A round is sent when every step
// that has not finished is waiting on a call, so the calls of a pass that
// would have been sequential round trips share one: Redis runs them in the
// order the steps were given, as it ran the sequential calls, in one read
// and one write.

// pass gathers the script calls of the steps of one Together.
type pass struct {
	e      *Engine // whose pass: only its calls join the rounds
	pipe   *autoPipeline
	mu     sync.Mutex
	active int         // steps not finished
	calls  []*pipeCall // this round's calls, one per waiting step
}

// step is what a step's context carries: its pass and its place.
type step struct {
	p    *pass
	rank int
}

type stepKey struct{}

// Together implements engine.Pipeliner: it runs the steps concurrently,
// the first on the calling goroutine, and returns when all have returned.
// A step must not wait for another step except through its own Redis calls.
func (e *Engine) Together(ctx context.Context, steps ...func(context.Context)) {
	p := e.pipe.Load()
	if p == nil || len(steps) < 2 {
		for _, f := range steps {
			f(ctx)
		}
		return
	}
	ps := &pass{e: e, pipe: p, active: len(steps), calls: make([]*pipeCall, 0, len(steps))}
	var wg sync.WaitGroup
	for i := 1; i < len(steps); i++ {
		wg.Add(1)
		e.stepWorkers.run(func() {
			defer wg.Done()
			ps.runStep(ctx, i, steps[i])
		})
	}
	ps.runStep(ctx, 0, steps[0])
	wg.Wait()
}

// stepWorkerIdle is how long a step worker waits for work before it ends.
const stepWorkerIdle = 10 * time.Second

// workers run pass steps on goroutines that stay for the next pass: a
// fresh goroutine per step spent more on growing its stack (go-redis's
// calls are deep) than on the step.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to an idle worker
}

func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	f()
	idle := time.NewTimer(stepWorkerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-w.tasks:
			f()
			idle.Reset(stepWorkerIdle)
		case <-idle.C:
			return
		}
	}
}

func (ps *pass) runStep(ctx context.Context, rank int, f func(context.Context)) {
	defer ps.leave()
	f(context.WithValue(ctx, stepKey{}, &step{p: ps, rank: rank}))
}

// stepOf returns the pass step ctx belongs to, or nil.
func stepOf(ctx context.Context) *step {
	s, _ := ctx.Value(stepKey{}).(*step)
	return s
}

// outsidePass returns ctx without its pass step, for work done on behalf
// of others (a coalesced batch's leader), which must never wait for a
// pass's other steps.
func outsidePass(ctx context.Context) context.Context {
	if stepOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, stepKey{}, (*step)(nil))
}

// detach takes ctx's pass step, if any, out of its pass's rounds while it
// waits on work of its own outside the pass (calls it makes on other
// goroutines, with the returned context), so that the other steps' rounds
// go without it; attach puts it back before it makes calls of the pass
// again.
func detach(ctx context.Context) (out context.Context, attach func()) {
	s := stepOf(ctx)
	if s == nil {
		return ctx, func() {}
	}
	s.p.leave()
	return outsidePass(ctx), func() {
		s.p.mu.Lock()
		s.p.active++
		s.p.mu.Unlock()
	}
}

// run adds a step's call to the round and waits for its reply; the step
// that completes the round sends it.
func (s *step) run(ctx context.Context, sc *redis.Script, keys []string, args []interface{}) *redis.Cmd {
	ps := s.p
	c := newCall(ctx, sc, keys, args, s.rank)
	ps.mu.Lock()
	ps.calls = append(ps.calls, c)
	round := ps.roundLocked()
	ps.mu.Unlock()
	if round != nil {
		ps.pipe.exec(round)
	}
	return c.wait()
}

// leave marks a step finished; the round may now be complete.
func (ps *pass) leave() {
	ps.mu.Lock()
	ps.active--
	round := ps.roundLocked()
	ps.mu.Unlock()
	if round != nil {
		ps.pipe.exec(round)
	}
}

// roundLocked takes the round's calls, in step order, once every step
// still running waits on one; else it returns nil.
func (ps *pass) roundLocked() []*pipeCall {
	if len(ps.calls) == 0 || len(ps.calls) < ps.active {
		return nil
	}
	round := ps.calls
	ps.calls = make([]*pipeCall, 0, ps.active)
	slices.SortFunc(round, func(a, b *pipeCall) int { return a.rank - b.rank })
	return round
}
