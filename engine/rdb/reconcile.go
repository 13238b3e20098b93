package rdb

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The usage reconciler (issue #31; doc/design.md "Usage and quotas"). The
// scripts change the usage counts in the same step as the jobs, so neither
// a server killed mid-pipeline nor a lost connection can make them drift:
// a script ran whole or not at all. What changes jobs without a script is
// Redis itself: a job whose TTL runs out. The pump and the reclaimer count
// such a job when they find its timer entry (one job less: its bytes are
// gone with its key); one whose entry is in a ready list, priority set or
// dead letter cannot be told from a job deleted by ID (whose entry also
// stays, and which was counted then), so it is counted here. The
// reconciler recounts each queue in one script (recountScript) and
// corrects the queue's and its namespace's fields by the difference, a
// bounded number of queues and entries per step, like the reclaimer (a
// queue too big for one script in chunks: reconcile_big.go);
// every queue that holds counted jobs has fields in its group's usage
// hash, so it finds them all (and the registries' queues besides).

const (
	// reconcileEvery is how often a step runs (every quotaRefresh'th
	// refresh of runTenancy).
	reconcileEvery = time.Second
	// reconcileRefresh is how often the list of queues is read again.
	reconcileRefresh = 10 * time.Second
	// reconcileQueues bounds the queues one step recounts.
	reconcileQueues = 200
	// reconcileEntries bounds the entries one step reads, over its calls.
	reconcileEntries = 50000
	// reconcileMax is the most entries one recount reads: under 3 ms of
	// Redis time (recountScript: 6-8 ms for 5,000 entries measured on a
	// machine at load average 22). Bigger queues are recounted in chunks
	// (reconcile_big.go).
	reconcileMax = 2000
	// reconcileChunk is the most recounts in one pipeline.
	reconcileChunk = 50
)

// usageMarker is set once every queue of the pool was counted: a pool
// written by a version without usage counts holds jobs no script counted.
const usageMarker = "kairos/usage"

// countOnce counts every queue of a pool that has no usage marker, each
// in one recountScript call whatever its size (blocking its Redis for
// about a microsecond an entry, once, as the layout upgrade does), then
// sets the marker. New runs it before the engine serves.
func (e *Engine) countOnce(ctx context.Context) error {
	n, err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.Exists(ctx, usageMarker) }).Result()
	if err != nil || n == 1 {
		return err
	}
	qs, err := e.countedQueues(ctx)
	if err != nil {
		return err
	}
	var jobs int64
	groups := map[int]bool{}
	for i := 0; i < len(qs); i += reconcileChunk {
		chunk := qs[i:min(i+reconcileChunk, len(qs))]
		res, err := e.recountAll(ctx, chunk, math.MaxInt32)
		if err != nil {
			return err
		}
		for k, x := range res {
			jobs += x[2]
			groups[slotGroup(chunk[k][0], chunk[k][1])] = true
		}
	}
	if _, err := e.resum(ctx, groups); err != nil {
		return err
	}
	if len(qs) > 0 {
		e.log.WithField("queues", len(qs)).WithField("jobs", jobs).Info("usage: counted the jobs of a pool written before usage counts")
	}
	return retried(ctx, e, func() *redis.StatusCmd { return e.rdb.Set(ctx, usageMarker, "1", 0) }).Err()
}

// reconciler is the state of an engine's walk over the pool's queues.
type reconciler struct {
	queues [][2]string // ns, q (physical names), sorted
	read   time.Time
	next   int
	// The queues found too big for recountScript, recounted in chunks
	// (reconcile_big.go) in turn from bigNext, and the pass under way.
	big     [][2]string
	bigNext int
	pass    *bigPass
	bigAt   map[[2]string]time.Time // when each big queue's pass last applied
	// The rounds and the sweep of the expiry ledgers (reconcile_ledger.go).
	ledger ledgerState
	// bigBudget, when set (tests), replaces reconcileBigEntries.
	bigBudget int
	// gate lets the periodic steps skip their reads while no key was
	// removed by Redis itself (reconcile_gate.go).
	gate reconGate
}

// ReconcileStats says what one reconcile step did.
type ReconcileStats struct {
	Queues    int   // queues recounted in one script
	Skipped   int   // queues too big for one script (more than reconcileMax entries): recounted in chunks
	Passes    int   // chunked recounts of big queues finished and applied
	Aborted   int   // chunked recounts given up because their queue changed meanwhile
	Corrected int   // queues whose counts were wrong
	Expired   int64 // jobs the expiry ledgers' sweep found expired uncounted (in Jobs too)
	Jobs      int64 // the corrections, summed
	Bytes     int64
	// Namespaces counts the namespaces' fields set to the sum of their
	// queues' (resumScript), in the groups of the queues recounted.
	Namespaces int
}

// ReconcileOnce runs one step of the reconciler: the next queues in turn,
// at most reconcileQueues of them and reconcileEntries entries.
func (e *Engine) ReconcileOnce(ctx context.Context) (ReconcileStats, error) {
	e.ten.reconMu.Lock()
	defer e.ten.reconMu.Unlock()
	r := &e.ten.recon
	var st ReconcileStats
	now := time.Now()
	if r.queues == nil || now.Sub(r.read) >= reconcileRefresh {
		qs, err := e.countedQueues(ctx)
		if err != nil {
			return st, err
		}
		r.queues, r.read = qs, now
		if r.next >= len(qs) {
			r.next = 0
		}
		listed := make(map[[2]string]bool, len(qs))
		for _, q := range qs {
			listed[q] = true
		}
		e.keepBig(listed)
		r.gate.listed(listed)
	}
	spent := 0
	groups := map[int]bool{} // the groups of the queues recounted
	for seen := 0; seen < len(r.queues) && seen < reconcileQueues && spent < reconcileEntries; {
		n := min(reconcileChunk, len(r.queues)-seen, reconcileQueues-seen)
		chunk := make([][2]string, n)
		for i := range chunk {
			chunk[i] = r.queues[(r.next+i)%len(r.queues)]
			groups[slotGroup(chunk[i][0], chunk[i][1])] = true
		}
		res, err := e.recount(ctx, chunk)
		if err != nil {
			return st, err
		}
		for i, x := range res {
			if x[0] == 0 {
				st.Skipped++
				r.noteBig(chunk[i])
				continue
			}
			spent += int(x[1])
			st.Queues++
			r.gate.recounted(chunk[i])
			if x[2] != 0 || x[3] != 0 {
				st.Corrected++
				st.Jobs += x[2]
				st.Bytes += x[3]
			}
		}
		seen += n
		r.next = (r.next + n) % len(r.queues)
	}
	budget := reconcileBigEntries
	if r.bigBudget > 0 {
		budget = r.bigBudget
	}
	if err := e.bigStep(ctx, budget, now.Add(-reconcileBigAgain), &st, groups); err != nil {
		return st, err
	}
	if err := e.ledgerStep(ctx, &st, groups); err != nil {
		return st, err
	}
	if len(groups) > 0 {
		n, err := e.resum(ctx, groups)
		if err != nil {
			return st, err
		}
		st.Namespaces = n
	}
	if r.gate.finish(&r.ledger) {
		e.closePass()
	}
	if st.Corrected > 0 || st.Namespaces > 0 || st.Expired > 0 {
		e.log.WithField("queues", st.Corrected).WithField("expired", st.Expired).WithField("jobs", st.Jobs).WithField("bytes", st.Bytes).Debug("usage: counts corrected")
	}
	return st, nil
}

// Reconcile recounts every queue of the pool once (tests, tools): the
// steps of ReconcileOnce until the walk went round, then a whole chunked
// pass over each big queue that none of those steps recounted (a pass
// applies nothing when its queue changed meanwhile: Aborted counts them).
func (e *Engine) Reconcile(ctx context.Context) (ReconcileStats, error) {
	start := time.Now()
	e.ten.reconMu.Lock()
	e.ten.recon.queues = nil // read the queues now
	e.ten.reconMu.Unlock()
	var all ReconcileStats
	for done := 0; ; {
		st, err := e.ReconcileOnce(ctx)
		if err != nil {
			return all, err
		}
		all.Queues += st.Queues
		all.Skipped += st.Skipped
		all.Passes += st.Passes
		all.Aborted += st.Aborted
		all.Corrected += st.Corrected
		all.Expired += st.Expired
		all.Jobs += st.Jobs
		all.Bytes += st.Bytes
		all.Namespaces += st.Namespaces
		done += st.Queues + st.Skipped
		e.ten.reconMu.Lock()
		total := len(e.ten.recon.queues)
		e.ten.reconMu.Unlock()
		if done >= total || st.Queues+st.Skipped == 0 {
			break
		}
	}
	e.ten.reconMu.Lock()
	defer e.ten.reconMu.Unlock()
	groups := map[int]bool{}
	var st ReconcileStats
	err := e.bigStep(ctx, math.MaxInt32, start, &st, groups)
	if err == nil && e.ten.recon.ledger.at != nil {
		// The expiry ledgers to their ends, after the passes: a pass
		// counts a record whose job expired uncounted as a job still.
		err = e.sweepAll(ctx, &st, groups)
	}
	all.Expired += st.Expired
	all.Passes += st.Passes
	all.Aborted += st.Aborted
	all.Corrected += st.Corrected
	all.Jobs += st.Jobs
	all.Bytes += st.Bytes
	if err != nil {
		return all, err
	}
	if len(groups) > 0 {
		n, err := e.resum(ctx, groups)
		all.Namespaces += n
		return all, err
	}
	return all, nil
}

// recount runs recountScript on queues, pipelined.
func (e *Engine) recount(ctx context.Context, queues [][2]string) ([][4]int64, error) {
	return e.recountAll(ctx, queues, reconcileMax)
}

// recountAll is recount of queues of at most most entries.
func (e *Engine) recountAll(ctx context.Context, queues [][2]string, most int) ([][4]int64, error) {
	cmds := make([]*redis.Cmd, len(queues))
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for i, nq := range queues {
			qn := e.names.get([3]string{nq[0], nq[1]})
			keys := []string{qn.ready, qn.prio, qn.timer, qn.dead, qn.jobPrefix, qn.usage, qn.config}
			cmds[i] = recountScript.EvalSha(ctx, p, keys, most)
		}
		return nil
	})
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		_ = recountScript.Load(ctx, e.rdb).Err()
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	out := make([][4]int64, len(queues))
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 4 {
			return nil, fmt.Errorf("reconcile pool %s: unexpected reply %v: %v", e.pool, v, err)
		}
		copy(out[i][:], v)
	}
	return out, nil
}

// resum runs resumScript on the usage hashes of groups, pipelined, and
// returns the fields it corrected.
func (e *Engine) resum(ctx context.Context, groups map[int]bool) (int, error) {
	var cmds []*redis.Cmd
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := range groups {
			cmds = append(cmds, resumScript.EvalSha(ctx, p, []string{usageKey(g)}))
		}
		return nil
	})
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		_ = resumScript.Load(ctx, e.rdb).Err()
	}
	if err != nil {
		return 0, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	n := 0
	for _, c := range cmds {
		v, _ := c.Int()
		n += v
	}
	return n, nil
}

// countedQueues returns the queues of the 64 registries and those with
// fields in the 64 usage hashes (a queue whose registry entry went, by
// Destroy, still has counted dead jobs), sorted.
func (e *Engine) countedQueues(ctx context.Context) ([][2]string, error) {
	regs := make([]*redis.StringSliceCmd, slotGroups)
	uses := make([]*redis.StringSliceCmd, slotGroups)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := 0; g < slotGroups; g++ {
			regs[g] = p.HKeys(ctx, registryKey(g))
			uses[g] = p.HKeys(ctx, usageKey(g))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile pool %s: %w", e.pool, err)
	}
	set := map[[2]string]bool{}
	for g := 0; g < slotGroups; g++ {
		for _, m := range regs[g].Val() {
			if ns, q, ok := strings.Cut(m, "/"); ok && checkNames(ns, q) == nil {
				set[[2]string{ns, q}] = true
			}
		}
		for _, f := range uses[g].Val() {
			if rest, ok := strings.CutPrefix(f, "j:"); ok {
				if ns, q, ok := strings.Cut(rest, "/"); ok && checkNames(ns, q) == nil {
					set[[2]string{ns, q}] = true
				}
			}
		}
	}
	out := make([][2]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return out, nil
}
