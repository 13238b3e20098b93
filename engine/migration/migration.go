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
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Engine serves one pool that is migrating from Old to New.
type Engine struct {
	Old, New engine.Extended
}

var _ engine.Extended = (*Engine)(nil)

// New returns an Engine migrating from old to new.
func New(old, new engine.Extended) *Engine { return &Engine{Old: old, New: new} }

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

// PublishBatch implements engine.Engine.
func (e *Engine) PublishBatch(ctx context.Context, reqs []*engine.PublishRequest) ([]string, error) {
	return e.New.PublishBatch(ctx, reqs)
}

// Consume implements engine.Engine: the old pool first without waiting,
// then the new one with the caller's timeout (lmstfy's order: an old
// pool's low-priority queue beats the new pool's high-priority one).
func (e *Engine) Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	now := *req
	now.Timeout = 0
	jobs, err := e.Old.Consume(ctx, &now)
	if err != nil || len(jobs) > 0 {
		return jobs, err
	}
	return e.New.Consume(ctx, req)
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

// Ack implements engine.Extended.
func (e *Engine) Ack(ctx context.Context, ns, q, id, receipt string) error {
	if receipt == "" {
		return e.Delete(ctx, ns, q, id)
	}
	return firstFound(func() error { return e.Old.Ack(ctx, ns, q, id, receipt) }, func() error { return e.New.Ack(ctx, ns, q, id, receipt) })
}

// Release implements engine.Extended: the job goes back to the pool it
// was consumed from.
func (e *Engine) Release(ctx context.Context, r *engine.ReleaseRequest) error {
	return firstFound(func() error { return e.Old.Release(ctx, r) }, func() error { return e.New.Release(ctx, r) })
}

// Touch implements engine.Extended.
func (e *Engine) Touch(ctx context.Context, ns, q, id, receipt string, ttr time.Duration) (due time.Time, err error) {
	err = firstFound(
		func() (err error) { due, err = e.Old.Touch(ctx, ns, q, id, receipt, ttr); return },
		func() (err error) { due, err = e.New.Touch(ctx, ns, q, id, receipt, ttr); return })
	return due, err
}

// CancelKey implements engine.Extended.
func (e *Engine) CancelKey(ctx context.Context, ns, q, key string) (id string, err error) {
	err = firstFound(
		func() (err error) { id, err = e.Old.CancelKey(ctx, ns, q, key); return },
		func() (err error) { id, err = e.New.CancelKey(ctx, ns, q, key); return })
	return id, err
}

// QueueConfig implements engine.Extended: the new pool's settings.
func (e *Engine) QueueConfig(ctx context.Context, ns, q string) (engine.QueueConfig, error) {
	return e.New.QueueConfig(ctx, ns, q)
}

// SetQueueConfig implements engine.Extended: both pools, so that jobs
// still in the old one follow the same rules.
func (e *Engine) SetQueueConfig(ctx context.Context, ns, q string, cfg engine.QueueConfig) error {
	if err := e.Old.SetQueueConfig(ctx, ns, q, cfg); err != nil {
		return err
	}
	return e.New.SetQueueConfig(ctx, ns, q, cfg)
}

// ListDeadLetter implements engine.Extended: the old pool's dead jobs,
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

// RespawnDeadJob implements engine.Extended.
func (e *Engine) RespawnDeadJob(ctx context.Context, ns, q, id string, ttl time.Duration) error {
	return firstFound(func() error { return e.Old.RespawnDeadJob(ctx, ns, q, id, ttl) }, func() error { return e.New.RespawnDeadJob(ctx, ns, q, id, ttl) })
}

// DeleteDeadJob implements engine.Extended.
func (e *Engine) DeleteDeadJob(ctx context.Context, ns, q, id string) error {
	return firstFound(func() error { return e.Old.DeleteDeadJob(ctx, ns, q, id) }, func() error { return e.New.DeleteDeadJob(ctx, ns, q, id) })
}
