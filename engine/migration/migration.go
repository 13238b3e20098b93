// Package migration moves a pool to another Redis without stopping
// clients, as lmstfy's MigrateTo promises (and, at lmstfy's HEAD, no longer
// does: its API bypasses the migration engine). A pool configured with
// MigrateTo = "new" is served by an Engine that publishes to the new pool
// only, consumes from the old pool first, and reads, acknowledges and
// manages jobs in both, until the old pool is empty and the operator
// renames the new pool.
package migration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Engine serves one pool that is migrating from Old to New.
type Engine struct {
	Old, New engine.Engine
}

var _ engine.Engine = (*Engine)(nil)

// New returns an Engine migrating from old to new.
func New(old, new engine.Engine) *Engine { return &Engine{Old: old, New: new} }

// Publish implements engine.Engine: new jobs go to the new pool only.
func (e *Engine) Publish(ctx context.Context, req *engine.PublishRequest) (string, error) {
	if req.Replaces != "" {
		// The replaced job may live in the old pool.
		if err := e.Old.Delete(ctx, req.Namespace, req.Queue, req.Replaces); err != nil {
			return "", err
		}
	}
	return e.New.Publish(ctx, req)
}

// RefusesPublish implements engine.PublishRefuser: the new pool's, where
// publishes go.
func (e *Engine) RefusesPublish(ns, q string) error {
	if r, ok := e.New.(engine.PublishRefuser); ok {
		return r.RefusesPublish(ns, q)
	}
	return nil
}

// PublishBatch implements engine.Engine.
func (e *Engine) PublishBatch(ctx context.Context, reqs []*engine.PublishRequest) ([]string, error) {
	return e.New.PublishBatch(ctx, reqs)
}

// Consume implements engine.Engine: the old pool first, then the new one
// (lmstfy's order: an old pool's low-priority queue beats the new pool's
// high-priority one). A consumer that waits is woken by a job made ready
// in either pool: a delayed, released or timed-out job of the old pool
// comes back there, not in the new one.
func (e *Engine) Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	if req == nil || req.Timeout <= 0 {
		return e.consumeNow(ctx, req)
	}
	deadline := time.NewTimer(req.Timeout)
	defer deadline.Stop()
	jobs, err := e.consumeNow(ctx, req)
	if err != nil || len(jobs) > 0 {
		return jobs, err
	}
	for {
		fired := make(chan struct{}, 1)
		stop, look, ok := e.Watch(req.Namespace, req.Queues, func() { fired <- struct{}{} })
		if !ok {
			// The pools cannot watch (not running): wait on the new one.
			return e.New.Consume(ctx, req)
		}
		if look {
			jobs, err := e.consumeNow(ctx, req)
			if err != nil || len(jobs) > 0 {
				stop()
				return jobs, err
			}
		}
		select {
		case <-fired: // the watch is used up: look again
		case <-deadline.C:
			stop()
			return nil, nil
		case <-ctx.Done():
			stop()
			return nil, nil
		}
	}
}

// consumeNow takes the jobs ready now: the old pool's, else the new
// pool's.
func (e *Engine) consumeNow(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	var now engine.ConsumeRequest
	if req != nil {
		now = *req
		now.Timeout = 0
	}
	jobs, err := e.Old.Consume(ctx, &now)
	if err != nil || len(jobs) > 0 {
		return jobs, err
	}
	return e.New.Consume(ctx, &now)
}

// PublishEach implements engine.Batcher: to the new pool, as Publish.
func (e *Engine) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	var plain []int
	for i, r := range reqs {
		if r.Replaces != "" {
			ids[i], errs[i] = e.Publish(ctx, r) // the replaced job may be old
			continue
		}
		plain = append(plain, i)
	}
	if len(plain) == len(reqs) {
		e.New.PublishEach(ctx, reqs, ids, errs)
		return
	}
	sub := make([]*engine.PublishRequest, len(plain))
	for k, i := range plain {
		sub[k] = reqs[i]
	}
	subIDs, subErrs := make([]string, len(plain)), make([]error, len(plain))
	e.New.PublishEach(ctx, sub, subIDs, subErrs)
	for k, i := range plain {
		ids[i], errs[i] = subIDs[k], subErrs[k]
	}
}

// ConsumeEach implements engine.Batcher as Consume looks: the old pool
// first, then the new one for the requests the old one left without a job
// or an error. Skipping a look at queues known to be empty is left to each
// pool: Watch watches both.
func (e *Engine) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	e.Old.ConsumeEach(ctx, reqs, jobs, errs)
	var rest []int
	for i := range reqs {
		if errs[i] == nil && len(jobs[i]) == 0 {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return
	}
	sub := make([]*engine.ConsumeRequest, len(rest))
	for k, i := range rest {
		sub[k] = reqs[i]
	}
	subJobs, subErrs := make([][]*engine.Job, len(rest)), make([]error, len(rest))
	e.New.ConsumeEach(ctx, sub, subJobs, subErrs)
	for k, i := range rest {
		jobs[i], errs[i] = subJobs[k], subErrs[k]
	}
}

// DeleteEach implements engine.Batcher as Delete does: in both pools.
func (e *Engine) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	if slices.ContainsFunc(refs, func(r engine.JobRef) bool { return r.Receipt != "" }) {
		// Receipt ACKs look for their delivery in one pool then the
		// other (Ack): one at a time, as the migration lasts.
		for i, r := range refs {
			errs[i] = e.Ack(ctx, r.Namespace, r.Queue, r.ID, r.Receipt)
		}
		return
	}
	e.Old.DeleteEach(ctx, refs, errs)
	var rest []int
	for i := range refs {
		if errs[i] == nil {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return
	}
	sub := make([]engine.JobRef, len(rest))
	for k, i := range rest {
		sub[k] = refs[i]
	}
	subErrs := make([]error, len(rest))
	e.New.DeleteEach(ctx, sub, subErrs)
	for k, i := range rest {
		errs[i] = subErrs[k]
	}
}

// Together implements engine.Pipeliner: the steps run one after the other.
// A step's calls go to two pools, and a pass of one pool's engine cannot
// carry the other's calls, so there is nothing to send together.
func (e *Engine) Together(ctx context.Context, steps ...func(context.Context)) {
	engine.Serial{}.Together(ctx, steps...)
}

// Watch implements engine.Watcher: a watch on both pools. The first
// wake-up calls fn and ends the other pool's watch (a wake-up that the
// other got meanwhile goes to another consumer). ok is false unless both
// pools can watch.
func (e *Engine) Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	var (
		fired   atomic.Bool           // a pool's wake-up won
		stopped atomic.Bool           // stop was called
		watched = make(chan struct{}) // closed once stops and live are set
		stops   [2]func()
		live    bool
	)
	wake := func(other int) func() {
		return func() {
			if !fired.CompareAndSwap(false, true) {
				return // the other pool's wake-up won; stopping this watch passes this one on
			}
			// Not on this goroutine: the pool calls wake with its lock
			// held, and ending the other pool's watch may wake another
			// consumer, whose wake ends a watch of this pool.
			go func() {
				<-watched
				if !live || stopped.Load() {
					return // the watches are stopped, which passes the wake-up on
				}
				fn()
				stops[other]()
			}()
		}
	}
	stopOld, lookOld, okOld := e.Old.Watch(ns, queues, wake(1))
	if !okOld {
		close(watched)
		return nil, false, false
	}
	stopNew, lookNew, okNew := e.New.Watch(ns, queues, wake(0))
	if !okNew {
		stopOld()
		close(watched)
		return nil, false, false
	}
	stops = [2]func(){sync.OnceFunc(stopOld), sync.OnceFunc(stopNew)}
	live = true
	close(watched)
	return func() {
		stopped.Store(true)
		stops[0]()
		stops[1]()
	}, lookOld || lookNew, true
}

// firstFound runs op on the old pool and, when the job is not there, on
// the new one.
func firstFound(old, new func() error) error {
	err := old()
	if errors.Is(err, engine.ErrJobNotFound) {
		return new()
	}
	return err
}

// Delete implements engine.Engine: in both pools.
func (e *Engine) Delete(ctx context.Context, ns, q, id string) error {
	if err := e.Old.Delete(ctx, ns, q, id); err != nil {
		return err
	}
	return e.New.Delete(ctx, ns, q, id)
}

// PeekQueue implements engine.Engine: the old pool's head first.
func (e *Engine) PeekQueue(ctx context.Context, ns, q string) (*engine.Job, error) {
	j, err := e.Old.PeekQueue(ctx, ns, q)
	if errors.Is(err, engine.ErrQueueEmpty) {
		return e.New.PeekQueue(ctx, ns, q)
	}
	return j, err
}

// PeekJob implements engine.Engine.
func (e *Engine) PeekJob(ctx context.Context, ns, q, id string) (j *engine.Job, err error) {
	err = firstFound(
		func() (err error) { j, err = e.Old.PeekJob(ctx, ns, q, id); return },
		func() (err error) { j, err = e.New.PeekJob(ctx, ns, q, id); return })
	return j, err
}

// sum adds an int64 answer of both pools.
func sum(a, b func() (int64, error)) (int64, error) {
	x, err := a()
	if err != nil {
		return 0, err
	}
	y, err := b()
	return x + y, err
}

// Size implements engine.Engine: both pools.
func (e *Engine) Size(ctx context.Context, ns, q string) (int64, error) {
	return sum(func() (int64, error) { return e.Old.Size(ctx, ns, q) }, func() (int64, error) { return e.New.Size(ctx, ns, q) })
}

// Destroy implements engine.Engine: both pools.
func (e *Engine) Destroy(ctx context.Context, ns, q string) (int64, error) {
	return sum(func() (int64, error) { return e.Old.Destroy(ctx, ns, q) }, func() (int64, error) { return e.New.Destroy(ctx, ns, q) })
}

// PeekDeadLetter implements engine.Engine: sizes added, the head from the
// old pool while it has dead jobs.
func (e *Engine) PeekDeadLetter(ctx context.Context, ns, q string) (engine.DeadLetter, error) {
	o, err := e.Old.PeekDeadLetter(ctx, ns, q)
	if err != nil {
		return o, err
	}
	n, err := e.New.PeekDeadLetter(ctx, ns, q)
	if err != nil {
		return n, err
	}
	head := o.Head
	if o.Size == 0 {
		head = n.Head
	}
	return engine.DeadLetter{Size: o.Size + n.Size, Head: head}, nil
}

// DeadLetterSize implements engine.Engine.
func (e *Engine) DeadLetterSize(ctx context.Context, ns, q string) (int64, error) {
	return sum(func() (int64, error) { return e.Old.DeadLetterSize(ctx, ns, q) }, func() (int64, error) { return e.New.DeadLetterSize(ctx, ns, q) })
}

// RespawnDeadLetter implements engine.Engine: the old pool up to limit,
// then the new one with the rest.
func (e *Engine) RespawnDeadLetter(ctx context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error) {
	n, err := e.Old.RespawnDeadLetter(ctx, ns, q, limit, ttl)
	if err != nil || n >= limit {
		return n, err
	}
	m, err := e.New.RespawnDeadLetter(ctx, ns, q, limit-n, ttl)
	return n + m, err
}

// DeleteDeadLetter implements engine.Engine, like RespawnDeadLetter.
func (e *Engine) DeleteDeadLetter(ctx context.Context, ns, q string, limit int64) (int64, error) {
	n, err := e.Old.DeleteDeadLetter(ctx, ns, q, limit)
	if err != nil || n >= limit {
		return n, err
	}
	m, err := e.New.DeleteDeadLetter(ctx, ns, q, limit-n)
	return n + m, err
}

// Info implements engine.Engine: the queues of both pools.
func (e *Engine) Info(ctx context.Context) (map[string][]string, error) {
	o, err := e.Old.Info(ctx)
	if err != nil {
		return nil, err
	}
	n, err := e.New.Info(ctx)
	if err != nil {
		return nil, err
	}
	for ns, qs := range o {
		seen := make(map[string]bool, len(n[ns]))
		for _, q := range n[ns] {
			seen[q] = true
		}
		for _, q := range qs {
			if !seen[q] {
				n[ns] = append(n[ns], q)
			}
		}
	}
	return n, nil
}

// Ack implements engine.Engine.
func (e *Engine) Ack(ctx context.Context, ns, q, id, receipt string) error {
	if receipt == "" {
		return e.Delete(ctx, ns, q, id)
	}
	return firstFound(func() error { return e.Old.Ack(ctx, ns, q, id, receipt) }, func() error { return e.New.Ack(ctx, ns, q, id, receipt) })
}

// Release implements engine.Engine: the job goes back to the pool it
// was consumed from.
func (e *Engine) Release(ctx context.Context, r *engine.ReleaseRequest) error {
	return firstFound(func() error { return e.Old.Release(ctx, r) }, func() error { return e.New.Release(ctx, r) })
}

// Touch implements engine.Engine.
func (e *Engine) Touch(ctx context.Context, ns, q, id, receipt string, ttr time.Duration) (due time.Time, err error) {
	err = firstFound(
		func() (err error) { due, err = e.Old.Touch(ctx, ns, q, id, receipt, ttr); return },
		func() (err error) { due, err = e.New.Touch(ctx, ns, q, id, receipt, ttr); return })
	return due, err
}

// CancelKey implements engine.Engine.
func (e *Engine) CancelKey(ctx context.Context, ns, q, key string) (id string, err error) {
	err = firstFound(
		func() (err error) { id, err = e.Old.CancelKey(ctx, ns, q, key); return },
		func() (err error) { id, err = e.New.CancelKey(ctx, ns, q, key); return })
	return id, err
}

// QueueConfig implements engine.Engine: the new pool's settings.
func (e *Engine) QueueConfig(ctx context.Context, ns, q string) (engine.QueueConfig, error) {
	return e.New.QueueConfig(ctx, ns, q)
}

// SetQueueConfig implements engine.Engine: both pools, so that jobs
// still in the old one follow the same rules.
func (e *Engine) SetQueueConfig(ctx context.Context, ns, q string, cfg engine.QueueConfig) error {
	if err := e.Old.SetQueueConfig(ctx, ns, q, cfg); err != nil {
		return err
	}
	return e.New.SetQueueConfig(ctx, ns, q, cfg)
}

// ListDeadLetter implements engine.Engine: the old pool's dead jobs,
// then the new pool's, as one list.
func (e *Engine) ListDeadLetter(ctx context.Context, ns, q string, offset, limit int64) ([]*engine.Job, error) {
	oldN, err := e.Old.DeadLetterSize(ctx, ns, q)
	if err != nil {
		return nil, err
	}
	if offset >= oldN {
		return e.New.ListDeadLetter(ctx, ns, q, offset-oldN, limit)
	}
	jobs, err := e.Old.ListDeadLetter(ctx, ns, q, offset, limit)
	if err != nil || int64(len(jobs)) >= limit || offset+limit <= oldN {
		return jobs, err
	}
	more, err := e.New.ListDeadLetter(ctx, ns, q, 0, limit-int64(len(jobs)))
	return append(jobs, more...), err
}

// ListDeadLetterPage implements engine.Engine: the old pool's dead
// letter, then the new pool's, as one (the reverse with Newest).
func (e *Engine) ListDeadLetterPage(ctx context.Context, ns, q string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
	var parts []engine.DeadLetterPart
	for _, x := range []engine.Engine{e.Old, e.New} {
		n, err := x.DeadLetterSize(ctx, ns, q)
		if err != nil {
			return engine.DeadLetterPage{}, err
		}
		parts = append(parts, engine.DeadLetterPart{Size: n, List: func(ctx context.Context, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
			return x.ListDeadLetterPage(ctx, ns, q, dq)
		}})
	}
	return engine.ListDeadLetterParts(ctx, parts, dq)
}

// RespawnDeadJob implements engine.Engine.
func (e *Engine) RespawnDeadJob(ctx context.Context, ns, q, id string, ttl time.Duration) error {
	return firstFound(func() error { return e.Old.RespawnDeadJob(ctx, ns, q, id, ttl) }, func() error { return e.New.RespawnDeadJob(ctx, ns, q, id, ttl) })
}

// DeleteDeadJob implements engine.Engine.
func (e *Engine) DeleteDeadJob(ctx context.Context, ns, q, id string) error {
	return firstFound(func() error { return e.Old.DeleteDeadJob(ctx, ns, q, id) }, func() error { return e.New.DeleteDeadJob(ctx, ns, q, id) })
}

// Schedules (engine.Scheduler) are created in the new pool; those made
// before the migration stay in the old pool, where its engine keeps firing
// them into the old queues (consumed first), until replaced or deleted.

var _ engine.Scheduler = (*Engine)(nil)

func schedulers(e *Engine) (old, new engine.Scheduler, err error) {
	o, ok1 := e.Old.(engine.Scheduler)
	n, ok2 := e.New.(engine.Scheduler)
	if !ok1 || !ok2 {
		return nil, nil, engine.ErrNoSchedules
	}
	return o, n, nil
}

// PutSchedule implements engine.Scheduler: the schedule moves to the new
// pool (its copy in the old pool, if any, is deleted, not to fire twice).
func (e *Engine) PutSchedule(ctx context.Context, s *engine.Schedule) (*engine.Schedule, error) {
	o, n, err := schedulers(e)
	if err != nil {
		return nil, err
	}
	out, err := n.PutSchedule(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := o.DeleteSchedule(ctx, s.Namespace, s.Queue, s.Name); err != nil && !errors.Is(err, engine.ErrScheduleNotFound) {
		return nil, err
	}
	return out, nil
}

// GetSchedule implements engine.Scheduler: the new pool's, else the old's.
func (e *Engine) GetSchedule(ctx context.Context, ns, q, name string) (*engine.Schedule, error) {
	o, n, err := schedulers(e)
	if err != nil {
		return nil, err
	}
	s, err := n.GetSchedule(ctx, ns, q, name)
	if errors.Is(err, engine.ErrScheduleNotFound) {
		return o.GetSchedule(ctx, ns, q, name)
	}
	return s, err
}

// ListSchedules implements engine.Scheduler: both pools', by name.
func (e *Engine) ListSchedules(ctx context.Context, ns, q string) ([]*engine.Schedule, error) {
	o, n, err := schedulers(e)
	if err != nil {
		return nil, err
	}
	a, err := n.ListSchedules(ctx, ns, q)
	if err != nil {
		return nil, err
	}
	b, err := o.ListSchedules(ctx, ns, q)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(a))
	for _, s := range a {
		seen[s.Name] = true
	}
	for _, s := range b {
		if !seen[s.Name] {
			a = append(a, s)
		}
	}
	slices.SortFunc(a, func(x, y *engine.Schedule) int { return strings.Compare(x.Name, y.Name) })
	return a, nil
}

// DeleteSchedule implements engine.Scheduler: from both pools.
func (e *Engine) DeleteSchedule(ctx context.Context, ns, q, name string) error {
	o, n, err := schedulers(e)
	if err != nil {
		return err
	}
	errOld := o.DeleteSchedule(ctx, ns, q, name)
	if errOld != nil && !errors.Is(errOld, engine.ErrScheduleNotFound) {
		return errOld
	}
	errNew := n.DeleteSchedule(ctx, ns, q, name)
	if errors.Is(errNew, engine.ErrScheduleNotFound) {
		return errOld
	}
	return errNew
}

// PauseSchedule implements engine.Scheduler, in the pool that has it.
func (e *Engine) PauseSchedule(ctx context.Context, ns, q, name string, paused bool) (*engine.Schedule, error) {
	o, n, err := schedulers(e)
	if err != nil {
		return nil, err
	}
	s, err := n.PauseSchedule(ctx, ns, q, name, paused)
	if errors.Is(err, engine.ErrScheduleNotFound) {
		return o.PauseSchedule(ctx, ns, q, name, paused)
	}
	return s, err
}
