package rdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine/tracing"
)

// The pump moves due timer entries (delayed jobs and in-flight jobs whose
// TTR passed) to ready lists or dead letters. It sleeps until the pool's
// earliest due time, never longer than MaxPumpSleep, and is woken early when
// a publish or consume on any server makes an earlier entry (in process
// through wakePump, across servers through the timer channel).

// wakePump asks the pump to look at the timer index again now.
func (e *Engine) wakePump() {
	select {
	case e.pumpWake <- struct{}{}:
	default:
	}
}

func (e *Engine) runPump(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.pumpWake:
		}
		next, err := e.PumpOnce(ctx)
		var sleep time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			e.log.WithError(err).Warn("pump failed; retrying")
			sleep = 100 * time.Millisecond
		case next < 0:
			sleep = e.maxWait
		default:
			sleep = time.Duration(next-ms(e.now())) * time.Millisecond
			if sleep > e.maxWait {
				sleep = e.maxWait
			}
			if sleep < 0 {
				sleep = 0
			}
		}
		t.Reset(sleep)
	}
}

// PumpOnce moves every entry due now, in batches of PumpBatch, and returns
// the pool's next due time in Unix milliseconds, or -1 when the timers are
// empty. Several servers may pump one pool at once: each batch is atomic.
func (e *Engine) PumpOnce(ctx context.Context) (int64, error) {
	report := "0"
	if e.tracer != nil {
		report = "1"
	}
	for {
		start := time.Now()
		res, err := pumpScript.Run(ctx, e.rdb, []string{timerIndexKey}, ms(e.now()), e.batch, rand.Uint32(), report).Slice()
		if err != nil {
			return 0, fmt.Errorf("pump pool %s: %w", e.pool, err)
		}
		if len(res) != 4 {
			return 0, fmt.Errorf("pump pool %s: unexpected reply %v", e.pool, res)
		}
		handled, ok1 := res[0].(int64)
		next, ok2 := res[1].(int64)
		expired, ok3 := res[2].([]interface{})
		moved, ok4 := res[3].([]interface{})
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return 0, fmt.Errorf("pump pool %s: unexpected reply %v", e.pool, res)
		}
		e.histExpired(expired)
		e.metrics.pumped(handled, handled >= int64(e.batch))
		if e.tracer != nil {
			e.tracePump(ctx, start, moved)
		}
		if handled < int64(e.batch) {
			return next, nil
		}
	}
}

// histExpired counts the jobs of expired TTRs the pump retried or killed:
// triples {"ns/q", retried, dead} of its reply.
func (e *Engine) histExpired(triples []interface{}) {
	if e.hist == nil {
		return
	}
	for i := 0; i+2 < len(triples); i += 3 {
		m, _ := triples[i].(string)
		retried, _ := triples[i+1].(int64)
		dead, _ := triples[i+2].(int64)
		ns, q, ok := strings.Cut(m, "/")
		if !ok {
			continue
		}
		qn := e.names.get([3]string{ns, q})
		e.histAdd(ns, q, qn, hRetried, retried)
		e.histAdd(ns, q, qn, hDead, dead)
	}
}

// tracePump makes one span per queue of a pump batch that started at
// start: moved holds each queue's member (ns/q) and the IDs of its timer
// entries the batch handled (made ready, retried later, sent to the dead
// letter, or dropped when their job was gone).
func (e *Engine) tracePump(ctx context.Context, start time.Time, moved []interface{}) {
	end := time.Now()
	for i := 0; i+1 < len(moved); i += 2 {
		m, _ := moved[i].(string)
		raw, _ := moved[i+1].([]interface{})
		ids := make([]string, 0, len(raw))
		for _, v := range raw {
			if id, ok := v.(string); ok {
				ids = append(ids, id)
			}
		}
		ns, q, _ := strings.Cut(m, "/")
		attrs := append(tracing.Queue(ns, q), tracing.AttrPool.String(e.pool), tracing.AttrMoved.Int(len(ids)))
		attrs = append(attrs, tracing.JobIDs(ids)...)
		_, span := e.tracer.Start(ctx, tracing.SpanPump, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		span.End(trace.WithTimestamp(end))
	}
}
