package engine

import (
	"context"
	"errors"
	"fmt"
)

// Serial is the generic form of Batcher, Pipeliner and Watcher over an
// engine's Core operations: each request on its own, the steps of a pass
// one after the other, and no watch (the event loops then wait with
// Consume). It is correct for any engine, and fast for none: an engine
// that can batch, pipeline or watch does better itself. Engines without
// that (a fake, a decorator over engines of different stores) implement
// those methods by calling Serial's:
//
//	func (f *fake) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
//		engine.Serial{E: f}.PublishEach(ctx, reqs, ids, errs)
//	}
type Serial struct {
	// E serves the requests; Together and Watch do not use it.
	E Core
}

// PublishEach implements Batcher with one Publish per request.
func (s Serial) PublishEach(ctx context.Context, reqs []*PublishRequest, ids []string, errs []error) {
	for i, r := range reqs {
		ids[i], errs[i] = s.E.Publish(ctx, r)
	}
}

// ConsumeEach implements Batcher with one Consume per request, none of
// which waits.
func (s Serial) ConsumeEach(ctx context.Context, reqs []*ConsumeRequest, jobs [][]*Job, errs []error) {
	for i, r := range reqs {
		if r == nil {
			jobs[i], errs[i] = s.E.Consume(ctx, nil)
			continue
		}
		now := *r
		now.Timeout = 0
		jobs[i], errs[i] = s.E.Consume(ctx, &now)
	}
}

// DeleteEach implements Batcher with one Delete (or Ack, with a receipt)
// per job.
func (s Serial) DeleteEach(ctx context.Context, refs []JobRef, errs []error) {
	for i, r := range refs {
		if r.Receipt != "" {
			a, ok := s.E.(interface {
				Ack(ctx context.Context, namespace, queue, jobID, receipt string) error
			})
			if !ok {
				errs[i] = fmt.Errorf("ack %s/%s/%s: receipts: %w", r.Namespace, r.Queue, r.ID, errors.ErrUnsupported)
				continue
			}
			errs[i] = a.Ack(ctx, r.Namespace, r.Queue, r.ID, r.Receipt)
			continue
		}
		errs[i] = s.E.Delete(ctx, r.Namespace, r.Queue, r.ID)
	}
}

// Together implements Pipeliner: the steps run one after the other, on
// the calling goroutine.
func (Serial) Together(ctx context.Context, steps ...func(context.Context)) {
	for _, f := range steps {
		f(ctx)
	}
}

// Watch implements Watcher: it cannot watch (ok is false).
func (Serial) Watch(string, []string, func()) (stop func(), look, ok bool) {
	return nil, false, false
}
