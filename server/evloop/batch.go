package evloop

import (
	"context"

	"github.com/kairos-dev/kairos/engine"
)

// runBatch makes the engine calls of a batch. The kinds run in the order
// ACKs, publishes, consumes; with one engine that can, their calls share
// round trips (engine.Pipeliner). A step of a Pipeliner may make several
// calls, and a consume's call may then run before an ACK or a publish made
// by a later call of an earlier step: so the consumes that follow requests
// of their own connection (after) run once the rest of the batch is done,
// so that they see what their connection did before them.
func runBatch(ctx context.Context, items []*Item) {
	var after []*Item
	for _, it := range items {
		if it.Refused {
			it.ran = true // no engine call to make
		}
		if it.after && !it.ran {
			it.ran = true // not yet: runKind skips it
			after = append(after, it)
		}
	}
	var present [Ack + 1]bool
	var eng engine.Engine
	oneEngine := true
	for _, it := range items {
		if it.ran {
			continue
		}
		if eng == nil {
			eng = it.Eng
		}
		present[it.Kind] = true
		oneEngine = oneEngine && it.Eng == eng
	}
	var kinds []Kind
	for _, kind := range [...]Kind{Ack, Publish, Consume} {
		if present[kind] {
			kinds = append(kinds, kind)
		}
	}
	if oneEngine && len(kinds) > 1 {
		steps := make([]func(context.Context), len(kinds))
		for i, kind := range kinds {
			steps[i] = func(ctx context.Context) { runKind(ctx, items, kind) }
		}
		eng.Together(ctx, steps...)
	} else {
		for _, kind := range kinds {
			runKind(ctx, items, kind)
		}
	}
	if len(after) > 0 {
		for _, it := range after {
			it.ran = false
		}
		runKind(ctx, after, Consume)
	}
}

// runKind makes the engine calls for the items of one kind.
func runKind(ctx context.Context, items []*Item, kind Kind) {
	for {
		var eng engine.Engine
		var mine []*Item
		for _, it := range items {
			if it.Kind != kind || it.ran {
				continue
			}
			if eng == nil {
				eng = it.Eng
			}
			if it.Eng == eng {
				mine = append(mine, it)
				it.ran = true
			}
		}
		if eng == nil {
			return
		}
		errs := make([]error, len(mine))
		switch kind {
		case Publish:
			reqs, ids := make([]*engine.PublishRequest, len(mine)), make([]string, len(mine))
			for i, it := range mine {
				reqs[i] = &it.Pub
			}
			eng.PublishEach(ctx, reqs, ids, errs)
			for i, it := range mine {
				it.ID, it.Err = ids[i], errs[i]
			}
		case Consume:
			reqs, jobs := make([]*engine.ConsumeRequest, len(mine)), make([][]*engine.Job, len(mine))
			for i, it := range mine {
				reqs[i] = &it.Con
			}
			eng.ConsumeEach(ctx, reqs, jobs, errs)
			for i, it := range mine {
				it.Jobs, it.Err = jobs[i], errs[i]
			}
		case Ack:
			refs := make([]engine.JobRef, len(mine))
			for i, it := range mine {
				refs[i] = engine.JobRef{Namespace: it.NS, Queue: it.Q, ID: it.JobID, Receipt: it.Receipt}
			}
			eng.DeleteEach(ctx, refs, errs)
			for i, it := range mine {
				it.Err = errs[i]
			}
		}
	}
}
