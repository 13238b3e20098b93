package rdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reclaimer removes the entries of jobs that are gone — their TTL ran
// out, or they were deleted while waiting — from queues that nobody
// consumes: consume, peek and the pump drop such entries only when they
// meet them, so an unconsumed queue kept them for ever (doc/design.md,
// "Stale entries"). Once a second it runs reclaimScript on the queues of
// lmstfy's registries (m/ns, m/ns/NS): every queue's consume ends first
// (cheap, and where the entries of a queue with one TTL collect), then
// windows of the whole structures at a cursor per queue, within a budget
// of entries looked at per pass. Each call touches one queue's keys, all
// passed in KEYS. Several servers reclaiming one pool each do the work;
// it stays bounded per server.

const (
	reclaimEvery = time.Second
	// reclaimQueues is the most queues whose consume ends one pass looks
	// at; a pool with more is covered over several passes.
	reclaimQueues = 1000
	// reclaimChunk is the most script calls per pipeline.
	reclaimChunk = 100
	// reclaimEndBudget is the most entries one call looks at at a queue's
	// consume ends.
	reclaimEndBudget = 1000
	// reclaimScanBudget is the most entries one pass looks at in windows.
	reclaimScanBudget = 20000
	// reclaimWindow is the window of one call per structure.
	reclaimWindow = 256
	// reclaimWalk is the most entries one LREM may walk (~1 ms).
	reclaimWalk = 25000
)

// reclaimer is the state of the engine's reclaim passes: the queues and
// where each pass stopped. Only its loop uses it.
type reclaimer struct {
	queues  [][2]string            // ns, q
	ends    int                    // next queue for the consume-end part
	next    int                    // next queue to start a window scan of
	active  [][2]string            // queues whose window scan is under way
	cursors map[[2]string][4]int64 // window cursors per queue
}

// ReclaimStats is what a reclaim pass did.
type ReclaimStats struct {
	Queues     int   // queues looked at
	Removed    int64 // entries of gone jobs removed
	Looked     int64 // entries looked at
	Tombstones int64 // stale entries left as tombstones (beyond LREM's reach)
}

func (e *Engine) runReclaim(ctx context.Context) {
	t := time.NewTicker(reclaimEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := e.ReclaimOnce(ctx); err != nil && ctx.Err() == nil {
			e.log.WithError(err).Warn("reclaim failed; retrying at the next pass")
		}
	}
}

// ReclaimOnce runs one reclaim pass: the consume ends of up to
// reclaimQueues queues, then windows of the queues' structures for up to
// reclaimScanBudget entries looked at. Tests call it instead of waiting
// for the loop.
func (e *Engine) ReclaimOnce(ctx context.Context) (ReclaimStats, error) {
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	r := &e.reclaim
	var st ReclaimStats
	if r.ends == 0 || r.ends >= len(r.queues) {
		qs, err := e.registeredQueues(ctx)
		if err != nil {
			return st, err
		}
		r.queues, r.ends = qs, 0
		if r.next >= len(qs) {
			r.next = 0
		}
		live := make(map[[2]string][4]int64, len(qs))
		for _, q := range qs {
			live[q] = r.cursors[q]
		}
		r.cursors = live
		active := r.active[:0]
		for _, q := range r.active {
			if _, ok := live[q]; ok {
				active = append(active, q)
			}
		}
		r.active = active
	}
	// The consume ends: queues whose call used its whole budget get
	// another call in the same pass.
	for n := 0; n < reclaimQueues && r.ends < len(r.queues); {
		chunk := r.queues[r.ends:min(len(r.queues), r.ends+reclaimChunk, r.ends+reclaimQueues-n)]
		res, err := e.reclaimCalls(ctx, chunk, 0)
		if err != nil {
			return st, err
		}
		again := 0
		for _, x := range res {
			st.add(x)
			if x[1] >= reclaimEndBudget {
				again++
			}
		}
		st.Queues += len(chunk)
		n += len(chunk)
		if again == 0 {
			r.ends += len(chunk)
		}
	}
	if r.ends >= len(r.queues) {
		r.ends = 0
	}
	// The windows, within the pass's budget: a queue's scan goes on from
	// call to call (and pass to pass) until each of its structures has
	// been scanned to its end; then the next queue's starts.
	started := 0
	for spent := int64(0); spent < reclaimScanBudget; {
		for len(r.active) < reclaimChunk && started < len(r.queues) {
			r.active = append(r.active, r.queues[r.next])
			r.next = (r.next + 1) % len(r.queues)
			started++
		}
		if len(r.active) == 0 {
			break
		}
		n := min(len(r.active), max(1, int((reclaimScanBudget-spent)/(4*reclaimWindow))))
		chunk := r.active[:n]
		res, err := e.reclaimCalls(ctx, chunk, reclaimWindow)
		if err != nil {
			return st, err
		}
		var keep [][2]string
		for i, x := range res {
			st.add(x)
			spent += x[1]
			c := [4]int64{x[3], x[4], x[5], x[6]}
			r.cursors[chunk[i]] = c
			if c != [4]int64{} {
				keep = append(keep, chunk[i])
			}
		}
		r.active = append(keep, r.active[n:]...)
		if len(keep) == n && started >= len(r.queues) && spent == 0 {
			break // nothing looked at and nothing done: do not spin
		}
	}
	e.metrics.reclaimed(e.pool, st.Removed)
	return st, nil
}

func (s *ReclaimStats) add(x [7]int64) {
	s.Removed += x[0]
	s.Looked += x[1]
	s.Tombstones += x[2]
}

// reclaimCalls runs reclaimScript on queues in one pipeline (window 0: the
// consume ends only) and returns each call's reply.
func (e *Engine) reclaimCalls(ctx context.Context, queues [][2]string, window int) ([][7]int64, error) {
	cmds := make([]*redis.Cmd, len(queues))
	_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, nq := range queues {
			ns, q := nq[0], nq[1]
			c := e.reclaim.cursors[nq]
			keys := []string{readyKey(ns, q), prioKey(ns, q), timerKey(ns, q), deadKey(ns, q)}
			cmds[i] = reclaimScript.EvalSha(ctx, p, keys, jobKeyPrefix(ns, q), reclaimEndBudget, window, c[0], c[1], c[2], c[3], reclaimWalk)
		}
		return nil
	})
	if err != nil {
		if strings.Contains(err.Error(), "NOSCRIPT") {
			// The script cache was flushed: load it for the next pass.
			_ = reclaimScript.Load(ctx, e.rdb).Err()
		}
		return nil, fmt.Errorf("reclaim pool %s: %w", e.pool, err)
	}
	out := make([][7]int64, len(queues))
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 7 {
			return nil, fmt.Errorf("reclaim pool %s: unexpected reply %v: %v", e.pool, v, err)
		}
		copy(out[i][:], v)
	}
	return out, nil
}

// registeredQueues lists the queues of lmstfy's registries, the queues the
// reclaimer looks after.
func (e *Engine) registeredQueues(ctx context.Context) ([][2]string, error) {
	info, err := e.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reclaim pool %s: %w", e.pool, err)
	}
	var out [][2]string
	for ns, qs := range info {
		for _, q := range qs {
			out = append(out, [2]string{ns, q})
		}
	}
	// One order from pass to pass, so that the window part's round robin
	// goes round.
	slices.SortFunc(out, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return out, nil
}
