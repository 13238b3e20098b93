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
// "Stale entries and the reclaimer"). Once a second it runs reclaimScript
// on the queues of the groups' registries (m/{T}): the consume ends of
// each queue when they are due — when the live job found at an end last
// time may have expired (its PTTL), 30 s after finding a structure empty,
// 60 s behind a job without TTL — which is where the entries of a queue
// with one TTL collect; then windows of the whole structures at a cursor
// per queue, within a budget of entries and calls per pass. Each call
// touches one queue's keys, all passed in KEYS. Several servers reclaiming
// one pool each do the work; it stays bounded per server.

const (
	reclaimEvery = time.Second
	// reclaimRefresh is how often the queue list is read again from the
	// registries.
	reclaimRefresh = 10 * time.Second
	// reclaimQueues is the most consume-end calls of one pass.
	reclaimQueues = 500
	// reclaimChunk is the most script calls per pipeline.
	reclaimChunk = 100
	// reclaimEndBudget is the most entries one call looks at.
	reclaimEndBudget = 1000
	// reclaimScanBudget is the most entries one pass looks at in windows,
	// and reclaimScanCalls the most window calls of one pass.
	reclaimScanBudget = 2000
	reclaimScanCalls  = 50
	// reclaimWindow is the window of one call per structure.
	reclaimWindow = 256
	// reclaimWalk is the most entries one LREM may walk (~1 ms).
	reclaimWalk = 25000
)

// reclaimer is the state of the engine's reclaim passes: the queues, when
// each one's consume ends are due, and where the window scans are. Only
// ReclaimOnce uses it.
type reclaimer struct {
	queues  [][2]string // ns, q, sorted
	read    time.Time   // when queues was read
	ends    int         // next queue to consider for the consume ends
	due     map[[2]string]time.Time
	next    int         // next queue to start a window scan of
	active  [][2]string // queues whose window scan is under way
	cursors map[[2]string][4]int64
}

// ReclaimStats is what a reclaim pass did.
type ReclaimStats struct {
	Calls      int   // script calls
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

// ReclaimOnce runs one reclaim pass: the consume ends of the queues whose
// ends are due (at most reclaimQueues calls), then windows of the queues'
// structures (at most reclaimScanCalls calls and reclaimScanBudget entries
// looked at). Tests call it instead of waiting for the loop.
func (e *Engine) ReclaimOnce(ctx context.Context) (ReclaimStats, error) {
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	r := &e.reclaim
	var st ReclaimStats
	now := time.Now()
	if r.queues == nil || now.Sub(r.read) >= reclaimRefresh {
		if err := r.refresh(ctx, e, now); err != nil {
			return st, err
		}
	}
	if len(r.queues) == 0 {
		return st, nil
	}
	// The consume ends of the due queues, going round from where the last
	// pass stopped; a call that used its whole budget makes its queue due
	// again at once.
	for seen, calls := 0, 0; seen < len(r.queues) && calls < reclaimQueues; {
		var chunk [][2]string
		for ; seen < len(r.queues) && len(chunk) < min(reclaimChunk, reclaimQueues-calls); seen++ {
			q := r.queues[r.ends]
			if !r.due[q].After(now) {
				chunk = append(chunk, q)
			}
			r.ends = (r.ends + 1) % len(r.queues)
		}
		if len(chunk) == 0 {
			break
		}
		res, err := e.reclaimCalls(ctx, chunk, 0)
		if err != nil {
			return st, err
		}
		calls += len(chunk)
		for i, x := range res {
			st.add(x)
			r.due[chunk[i]] = now.Add(time.Duration(x[7]) * time.Millisecond)
		}
	}
	// The windows: a queue's scan goes on from call to call (and pass to
	// pass) until each of its structures has been scanned to its end; then
	// the next queue's starts.
	started := 0
	for spent, calls := int64(0), 0; spent < reclaimScanBudget && calls < reclaimScanCalls; {
		for len(r.active) < reclaimChunk && started < len(r.queues) {
			r.active = append(r.active, r.queues[r.next])
			r.next = (r.next + 1) % len(r.queues)
			started++
		}
		if len(r.active) == 0 {
			break
		}
		n := min(len(r.active), reclaimScanCalls-calls, max(1, int((reclaimScanBudget-spent)/(4*reclaimWindow))))
		chunk := r.active[:n]
		res, err := e.reclaimCalls(ctx, chunk, reclaimWindow)
		if err != nil {
			return st, err
		}
		calls += n
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
	}
	e.metrics.reclaimed(st.Removed)
	return st, nil
}

// refresh reads the queue list again and forgets the state of queues that
// left it.
func (r *reclaimer) refresh(ctx context.Context, e *Engine, now time.Time) error {
	qs, err := e.registeredQueues(ctx)
	if err != nil {
		return err
	}
	r.read = now
	r.queues = qs
	if r.ends >= len(qs) {
		r.ends = 0
	}
	if r.next >= len(qs) {
		r.next = 0
	}
	due := make(map[[2]string]time.Time, len(qs))
	cursors := make(map[[2]string][4]int64, len(qs))
	for _, q := range qs {
		due[q] = r.due[q]
		if c, ok := r.cursors[q]; ok {
			cursors[q] = c
		}
	}
	r.due, r.cursors = due, cursors
	active := r.active[:0]
	for _, q := range r.active {
		if _, ok := due[q]; ok {
			active = append(active, q)
		}
	}
	r.active = active
	return nil
}

func (s *ReclaimStats) add(x [8]int64) {
	s.Calls++
	s.Removed += x[0]
	s.Looked += x[1]
	s.Tombstones += x[2]
}

// reclaimCalls runs reclaimScript on queues in one pipeline (window 0: the
// consume ends only) and returns each call's reply.
func (e *Engine) reclaimCalls(ctx context.Context, queues [][2]string, window int) ([][8]int64, error) {
	cmds := make([]*redis.Cmd, len(queues))
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for i, nq := range queues {
			ns, q := nq[0], nq[1]
			c := e.reclaim.cursors[nq]
			qn := e.names.get([3]string{ns, q})
			keys := []string{qn.ready, qn.prio, qn.timer, qn.dead, qn.jobPrefix, qn.usage, qn.config}
			cmds[i] = reclaimScript.EvalSha(ctx, p, keys, reclaimEndBudget, window, c[0], c[1], c[2], c[3], reclaimWalk, e.pub, qn.argChannel)
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
	out := make([][8]int64, len(queues))
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 8 {
			return nil, fmt.Errorf("reclaim pool %s: unexpected reply %v: %v", e.pool, v, err)
		}
		copy(out[i][:], v)
	}
	return out, nil
}

// registeredQueues lists the queues of the groups' registries, the queues the
// reclaimer looks after.
func (e *Engine) registeredQueues(ctx context.Context) ([][2]string, error) {
	info, err := e.physicalQueues(ctx) // every shard of a sharded queue
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
