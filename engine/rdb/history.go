package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// History keeps per-queue counters at minute resolution in Redis, for the
// dashboard (doc/dashboard.md). The hot paths only add to atomic counters
// in memory (one set per queue, found through the queue's names); every
// HistoryFlush the engine writes what changed since its last flush into
// the current minute's fields of the hash of its block of historyBlock
// minutes (HINCRBY per non-zero field, EXPIREAT), for the queue, its
// namespace and the pool, in pipelines. Every server adds its own counts
// to the same hashes, so they hold the sums of all.
//
// A block's hash has the fields "<minute in block><counter>": "3p" is the
// jobs published in its 4th minute; counters p, c, a, r, d and l0…l14 (the
// latency buckets). Only non-zero fields exist, so that a block has at
// most 6 × 20 = 120 fields and stays a listpack (Redis's compact encoding,
// up to hash-max-listpack-entries = 128 by default): one hash per minute
// would cost twice the memory in per-key overhead.

const (
	// historyRetention is how long a minute's hashes live after their
	// minute: the 24 hours the dashboard shows, and an hour to spare.
	historyRetention = 25 * time.Hour
	// HistoryMaxMinutes is the longest window History reads: a day, and
	// an hour on each side for windows aligned to hour-long steps.
	HistoryMaxMinutes = 26 * 60
	// A queue's counters leave memory (they come back at its next event)
	// after historyIdleFlushes flushes and historyIdleTime without a
	// change; the flushes look at them for historyRetireGrace more, for a
	// hot path that took them just before.
	historyIdleFlushes = 12
	historyIdleTime    = 5 * time.Minute
	historyRetireGrace = time.Minute
	// historyPipeline is the most commands of one flush or read pipeline.
	historyPipeline = 2000
	// historyBlock is the minutes of one hash.
	historyBlock = 6
)

// The hash fields of each minute of a block: the counters, then the
// latency buckets.
var (
	historyFields [historyBlock][5]string
	latencyFields [historyBlock][engine.LatencyBuckets]string
)

func init() {
	for m := range historyBlock {
		d := strconv.Itoa(m)
		for i, c := range []string{"p", "c", "a", "r", "d"} {
			historyFields[m][i] = d + c
		}
		for i := range engine.LatencyBuckets {
			latencyFields[m][i] = d + "l" + strconv.Itoa(i)
		}
	}
}

// Indexes of histCounters.n.
const (
	hPublished = iota
	hConsumed
	hAcked
	hRetried
	hDead
)

// histCounters are one queue's counters since the server started (or
// since they were last retired): they only grow, and a flush writes their
// difference from what it wrote before.
type histCounters struct {
	n   [5]atomic.Int64
	lat [engine.LatencyBuckets]atomic.Int64
	// retired is set when the flusher dropped these counters from its
	// map: the hot paths then look the queue's counters up again.
	retired atomic.Bool
}

func (c *histCounters) load() (out engine.Counts) {
	out.Published = c.n[hPublished].Load()
	out.Consumed = c.n[hConsumed].Load()
	out.Acked = c.n[hAcked].Load()
	out.Retried = c.n[hRetried].Load()
	out.Dead = c.n[hDead].Load()
	for i := range c.lat {
		out.Latency[i] = c.lat[i].Load()
	}
	return out
}

// histEntry is the flusher's view of one queue's counters.
type histEntry struct {
	ns, q string
	c     *histCounters
	// written is what flushes have written so far to the queue's,
	// namespace's and pool's hashes (histQueue, histNamespace, histPool):
	// on a cluster they are on different nodes, and a flush may write one
	// and not another.
	written [3]engine.Counts
	idle    int       // flushes in a row with nothing to write
	changed time.Time // the flush that last wrote something
	retired time.Time // when it left the map
}

// history is an engine's in-memory side of the history.
type history struct {
	interval time.Duration

	mu       sync.Mutex
	queues   map[[2]string]*histEntry
	retiring []*histEntry

	flushMu sync.Mutex // one flush at a time
}

func newHistory(interval time.Duration) *history {
	return &history{interval: interval, queues: make(map[[2]string]*histEntry)}
}

// counters returns the queue's counters, cached in qn.
func (h *history) counters(ns, q string, qn *queueNames) *histCounters {
	if c := qn.hist.Load(); c != nil && !c.retired.Load() {
		return c
	}
	q = logicalQueue(q) // a shard's counts are its queue's
	k := [2]string{ns, q}
	h.mu.Lock()
	en := h.queues[k]
	if en == nil {
		en = &histEntry{ns: strings.Clone(ns), q: strings.Clone(q), c: &histCounters{}}
		h.queues[k] = en
	}
	h.mu.Unlock()
	qn.hist.Store(en.c)
	return en.c
}

// published counts n jobs published to ns/q.
func (e *Engine) histPublished(ns, q string, qn *queueNames, n int) {
	if e.hist == nil || n <= 0 {
		return
	}
	e.hist.counters(ns, q, qn).n[hPublished].Add(int64(n))
}

// histConsumed counts the jobs of one consume (all of namespace ns) and
// their publish→consume latencies.
func (e *Engine) histConsumed(ns string, jobs []*engine.Job, now time.Time) {
	if e.hist == nil || len(jobs) == 0 {
		return
	}
	var c *histCounters
	q := ""
	for _, j := range jobs {
		if c == nil || j.Queue != q {
			q = j.Queue
			c = e.hist.counters(ns, q, e.names.get([3]string{ns, q}))
		}
		c.n[hConsumed].Add(1)
		c.lat[engine.LatencyBucket(engine.ElapsedMS(j.ID, now))].Add(1)
	}
}

// histAdd adds n to counter i of ns/q.
func (e *Engine) histAdd(ns, q string, qn *queueNames, i int, n int64) {
	if e.hist == nil || n <= 0 {
		return
	}
	if qn == nil {
		qn = e.names.get([3]string{ns, q})
	}
	e.hist.counters(ns, q, qn).n[i].Add(n)
}

// runHistory flushes every interval, at multiples of it in wall time so
// that a flush's counts fall in one minute, and once more at the end.
func (e *Engine) runHistory(ctx context.Context) {
	iv := e.hist.interval
	for {
		now := time.Now()
		next := now.Truncate(iv).Add(iv)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			fctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			if err := e.flushHistory(fctx, e.now()); err != nil {
				e.log.WithError(err).Warn("history: last flush failed")
			}
			cancel()
			return
		case <-t.C:
		}
		// The counts since the last flush belong to the minute before
		// the tick (a tick on a minute boundary closes that minute).
		if err := e.flushHistory(ctx, e.now().Add(-time.Millisecond)); err != nil && ctx.Err() == nil {
			e.log.WithError(err).Warn("history: flush failed; its counts go with the next one")
		}
	}
}

// FlushHistory writes the counts since the last flush into the current
// minute now (the engine flushes by itself while Run runs; tests call it).
func (e *Engine) FlushHistory(ctx context.Context) error {
	if e.hist == nil {
		return nil
	}
	return e.flushHistory(ctx, e.now())
}

// The hashes a queue's counts go to: written's indexes.
const (
	histQueue = iota
	histNamespace
	histPool
)

// histWrite is one key's increments of a flush, and the HINCRBYs that
// carried them.
type histWrite struct {
	key  string
	c    engine.Counts
	cmds []redis.Cmder
}

// ok reports whether every increment of w ran.
func (w *histWrite) ok() bool {
	if len(w.cmds) == 0 {
		return false
	}
	for _, c := range w.cmds {
		if c.Err() != nil {
			return false
		}
	}
	return true
}

// blockOf is the block of Unix minute m and m's place in it.
func blockOf(m int64) (block int64, at int) {
	block = m / historyBlock
	if m < 0 && m%historyBlock != 0 {
		block--
	}
	return block, int(m - block*historyBlock)
}

func (e *Engine) flushHistory(ctx context.Context, at time.Time) error {
	h := e.hist
	h.flushMu.Lock()
	defer h.flushMu.Unlock()
	minute := at.Unix() / 60
	if at.Unix() < 0 {
		minute = 0
	}
	block, inBlock := blockOf(minute)

	type pending struct {
		en  *histEntry
		now engine.Counts
		w   *histWrite // its queue's hash, nil when nothing to write there
	}
	var todo []pending
	var writes []*histWrite
	nsWrites := make(map[string]*histWrite)
	pool := &histWrite{key: poolHistoryKey(block)}

	h.mu.Lock()
	visit := func(en *histEntry) {
		cur := en.c.load()
		dq := diffCounts(&cur, &en.written[histQueue])
		dn := diffCounts(&cur, &en.written[histNamespace])
		dp := diffCounts(&cur, &en.written[histPool])
		if dq.Zero() && dn.Zero() && dp.Zero() {
			en.idle++
			return
		}
		en.idle, en.changed = 0, at
		pd := pending{en: en, now: cur}
		if !dq.Zero() {
			pd.w = &histWrite{key: queueHistoryKey(en.ns, en.q, block), c: dq}
			writes = append(writes, pd.w)
		}
		todo = append(todo, pd)
		nw := nsWrites[en.ns]
		if nw == nil {
			nw = &histWrite{key: namespaceHistoryKey(en.ns, block)}
			nsWrites[en.ns] = nw
		}
		nw.c.Add(&dn)
		pool.c.Add(&dp)
	}
	for k, en := range h.queues {
		if en.changed.IsZero() {
			en.changed = at
		}
		visit(en)
		if en.idle >= historyIdleFlushes && at.Sub(en.changed) >= historyIdleTime {
			en.c.retired.Store(true)
			en.retired = at
			h.retiring = append(h.retiring, en)
			delete(h.queues, k)
		}
	}
	kept := h.retiring[:0]
	for _, en := range h.retiring {
		visit(en)
		if at.Sub(en.retired) < historyRetireGrace {
			kept = append(kept, en)
		}
	}
	clear(h.retiring[len(kept):])
	h.retiring = kept
	h.mu.Unlock()

	if len(todo) == 0 {
		return nil
	}
	for _, w := range nsWrites {
		if !w.c.Zero() {
			writes = append(writes, w)
		}
	}
	if !pool.c.Zero() {
		writes = append(writes, pool)
	}

	// Each hash's increments count as written when all of them ran: on a
	// cluster one node may refuse its part (after ClusterRetry) while the
	// others run theirs, and the next flush writes only what was refused.
	expireAt := time.Unix((block+1)*historyBlock*60, 0).Add(historyRetention)
	var err error
	p := e.rdb.Pipeline()
	for i, w := range writes {
		w.cmds = addIncrements(ctx, p, w.key, inBlock, &w.c)
		p.ExpireAt(ctx, w.key, expireAt) // set again by the next flush of the key if refused
		if p.Len() >= historyPipeline || i == len(writes)-1 {
			if _, err = e.exec(ctx, p); err != nil {
				err = fmt.Errorf("history: flush pool %s: %w", e.pool, err)
				break
			}
		}
	}
	done := func(w *histWrite) bool { return w == nil || w.ok() }
	h.mu.Lock()
	for _, t := range todo {
		if done(t.w) {
			t.en.written[histQueue] = t.now
		}
		if nw := nsWrites[t.en.ns]; nw.c.Zero() || nw.ok() {
			t.en.written[histNamespace] = t.now
		}
		if pool.c.Zero() || pool.ok() {
			t.en.written[histPool] = t.now
		}
	}
	h.mu.Unlock()
	return err
}

// diffCounts returns a - b.
func diffCounts(a, b *engine.Counts) (d engine.Counts) {
	d.Published = a.Published - b.Published
	d.Consumed = a.Consumed - b.Consumed
	d.Acked = a.Acked - b.Acked
	d.Retried = a.Retried - b.Retried
	d.Dead = a.Dead - b.Dead
	for i := range d.Latency {
		d.Latency[i] = a.Latency[i] - b.Latency[i]
	}
	return d
}

// addIncrements queues one HINCRBY per non-zero counter of c, in the
// fields of minute at of the block.
func addIncrements(ctx context.Context, p redis.Pipeliner, key string, at int, c *engine.Counts) []redis.Cmder {
	var cmds []redis.Cmder
	for i, n := range [5]int64{c.Published, c.Consumed, c.Acked, c.Retried, c.Dead} {
		if n != 0 {
			cmds = append(cmds, p.HIncrBy(ctx, key, historyFields[at][i], n))
		}
	}
	for i, n := range c.Latency {
		if n != 0 {
			cmds = append(cmds, p.HIncrBy(ctx, key, latencyFields[at][i], n))
		}
	}
	return cmds
}

// parseBlock reads a block's hash into the counts of its minutes.
func parseBlock(m map[string]string) (out [historyBlock]engine.Counts) {
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || len(k) < 2 || k[0] < '0' || k[0] >= '0'+historyBlock {
			continue
		}
		c := &out[k[0]-'0']
		switch k[1:] {
		case "p":
			c.Published = n
		case "c":
			c.Consumed = n
		case "a":
			c.Acked = n
		case "r":
			c.Retried = n
		case "d":
			c.Dead = n
		default:
			if k[1] == 'l' {
				if i, err := strconv.Atoi(k[2:]); err == nil && i >= 0 && i < engine.LatencyBuckets {
					c.Latency[i] = n
				}
			}
		}
	}
	return out
}

// History implements engine.Dashboard.
func (e *Engine) History(ctx context.Context, ns, q string, from time.Time, minutes int) ([]engine.Counts, error) {
	if minutes <= 0 || minutes > HistoryMaxMinutes {
		return nil, fmt.Errorf("history: %d minutes: %w", minutes, engine.ErrInvalid)
	}
	if q != "" && ns == "" {
		return nil, fmt.Errorf("history: a queue without a namespace: %w", engine.ErrInvalid)
	}
	if ns != "" && !engine.ValidName(ns) || q != "" && !engine.ValidQueueName(q) {
		return nil, fmt.Errorf("history: invalid name: %w", engine.ErrInvalid)
	}
	first := from.Unix() / 60
	if from.Unix() < 0 && from.Unix()%60 != 0 {
		first--
	}
	key := func(b int64) string {
		switch {
		case q != "":
			return queueHistoryKey(ns, q, b)
		case ns != "":
			return namespaceHistoryKey(ns, b)
		default:
			return poolHistoryKey(b)
		}
	}
	b0, _ := blockOf(first)
	b1, _ := blockOf(first + int64(minutes) - 1)
	out := make([]engine.Counts, minutes)
	cmds := make([]*redis.MapStringStringCmd, b1-b0+1)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, key(b0+int64(i)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: read pool %s: %w", e.pool, err)
	}
	for i, c := range cmds {
		mins := parseBlock(c.Val())
		for k := range mins {
			if j := (b0+int64(i))*historyBlock + int64(k) - first; j >= 0 && j < int64(minutes) {
				out[j] = mins[k]
			}
		}
	}
	return out, nil
}
