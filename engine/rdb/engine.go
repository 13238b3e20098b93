// Package rdb is the Redis implementation of engine.Engine: one Engine per
// pool. Every state change is one Lua script (scripts.go) over keys built in
// keys.go, every call on the keys of one slot group, so that a Redis
// Cluster runs them as well as one Redis; a timer-driven pump (pump.go)
// moves due jobs; waiting consumers are multiplexed over one Pub/Sub
// connection per pool, one sharded one per slot group on a cluster
// (waiters.go).
package rdb

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/redisretry"
)

var _ engine.Engine = (*Engine)(nil)

// Options tune an Engine. The zero value is usable.
type Options struct {
	// Pool is the pool's name, for logs and metrics.
	Pool string
	// Logger receives the engine's logs; nil discards them.
	Logger logrus.FieldLogger
	// Now is the clock; nil means time.Now. Tests move it.
	Now func() time.Time
	// PumpBatch is the most due entries one pump script moves (default 1000).
	PumpBatch int
	// MaxPumpSleep bounds how long the pump sleeps when nothing is due, so
	// that jobs scheduled by a server that died are still pumped (default 1s).
	MaxPumpSleep time.Duration
	// Metrics receives the engine's counters; nil means none.
	Metrics *Metrics
	// NoAutoPipeline sends every publish, consume and ACK in its own round
	// trip and script call, instead of batching concurrent ones into
	// pipelines and coalescing concurrent publishes (of a publish lane),
	// single-job consumes and ACKs (of a queue) into one script call.
	NoAutoPipeline bool
	// WaitReplicas, when > 0, makes every publish wait (Redis WAIT, on the
	// same connection, in the same round trip) until that many replicas
	// have the job, for at most WaitTimeout (default 100 ms); otherwise the
	// publish fails with engine.ErrNotReplicated.
	WaitReplicas int
	WaitTimeout  time.Duration
	// ClusterRetry bounds how long a script call, a command or the
	// refused commands of a pipeline on a cluster pool are retried while
	// Redis answers TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, MOVED or
	// ASK (a slot migration, a failover), errors answered before anything
	// ran (retry.go). Default 5 s; negative: no retry beyond go-redis's
	// own.
	ClusterRetry time.Duration
	// HistoryFlush, when > 0, keeps the queues' history (history.go):
	// counters in memory, written to Redis this often (a divisor of a
	// minute, e.g. 5s). 0 keeps no history.
	HistoryFlush time.Duration
	// MemoryReserve is the fraction of each Redis node's maxmemory (0 to
	// 0.5) kept for the namespaces holding less than their share: once a
	// node is that close to maxmemory, the others' publishes to it are
	// refused with engine.ErrPoolFull (reserve.go). 0 keeps no reserve.
	MemoryReserve float64
	// Tracer makes a span of each batch the pump moves, per queue
	// (tracing.Provider's Tracer); nil means tracing is off, and the pump
	// script then reports nothing more than before.
	Tracer trace.Tracer
	// DefaultQuota limits every namespace that has no quota of its own
	// (tenancy.go); the zero value limits nothing.
	DefaultQuota engine.Quota
}

// Engine is the Redis engine of one pool.
type Engine struct {
	rdb     redis.UniversalClient
	pool    string
	log     logrus.FieldLogger
	now     func() time.Time
	batch   int
	maxWait time.Duration
	metrics *poolMetrics
	tracer  trace.Tracer // nil: tracing off

	pumpWake chan struct{}
	waiters  *waiters

	// schedWake wakes the scheduler (schedule.go) after a change here.
	schedWake chan struct{}

	// stepWorkers run the steps of event-loop passes (pass.go).
	stepWorkers workers
	// pipe batches hot-path scripts while Run runs (nil otherwise, or
	// with NoAutoPipeline): see pipeline.go.
	pipe     atomic.Pointer[autoPipeline]
	autoPipe bool
	// pubs, acks and cons coalesce concurrent plain publishes (per publish
	// lane, across queues), ACKs and single-job consumes (per queue) into
	// one script call (nil with NoAutoPipeline): coalesce.go.
	pubs *coalescer[pubOp]
	acks *coalescer[ackOp]
	cons *coalescer[consumeOp]

	waitReplicas int
	waitTimeout  time.Duration

	// cluster: the pool is a Redis Cluster. Every pool has the same
	// layout and scripts; on a cluster, calls never mix slot groups
	// (publish lanes are groups, a consume over queues of several groups
	// is one call per group), and messages go out with SPUBLISH.
	cluster  bool
	pub      string        // PUBLISH, or SPUBLISH on a cluster
	argPub   interface{}   // pub boxed once, for the ACK's arguments
	retryFor time.Duration // Options.ClusterRetry on a cluster, else 0

	names *memo[*queueNames] // {ns, q, ""} → the queue's key names

	shards     shardMemo    // the pool's sharded queues (shards.go)
	shardGrace atomic.Int64 // shardDrainGrace (ns); tests shorten it

	reclaimMu sync.Mutex
	reclaim   reclaimer // reclaim.go

	hist *history // nil without Options.HistoryFlush

	ten tenancy // usage and quotas (tenancy.go)

	reserve *reserve // nil without Options.MemoryReserve (reserve.go)
}

// Limits on the work of one script call.
const (
	consumeScanBudget = 1000 // entries one consume call may pop
	peekScanBudget    = 1000 // entries one peek may look at
	sizeScanBudget    = 1000 // stale entries one size may look past
	deadBatch         = 1000 // dead-letter entries per respawn/delete call
	destroyBatch      = 1000 // entries per destroy call
	maxPublishRetries = 3    // fresh IDs tried when a generated ID collides

	autoPipelineSenders = 4   // pipelines in flight at once per pool
	autoPipelineBatch   = 128 // most calls in one pipeline
	coalesceMax         = 128 // most publishes, consumes or ACKs in one script call
)

// New returns an Engine for the pool behind client. It loads every script,
// so that a Redis that cannot run them fails here; it starts nothing: call
// Run.
func New(ctx context.Context, client redis.UniversalClient, opts Options) (*Engine, error) {
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = discard{}
		opts.Logger = l
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PumpBatch <= 0 {
		opts.PumpBatch = 1000
	}
	if opts.MaxPumpSleep <= 0 {
		opts.MaxPumpSleep = time.Second
	}
	if opts.Pool == "" {
		opts.Pool = "default"
	}
	e := &Engine{
		rdb:      client,
		pool:     opts.Pool,
		log:      opts.Logger.WithField("pool", opts.Pool),
		now:      opts.Now,
		batch:    opts.PumpBatch,
		maxWait:  opts.MaxPumpSleep,
		metrics:  opts.Metrics.forPool(opts.Pool),
		tracer:   opts.Tracer,
		pumpWake: make(chan struct{}, 1),
		names:    newMemo(func(k [3]string) *queueNames { return newQueueNames(k[0], k[1]) }),

		stepWorkers: workers{tasks: make(chan func())},
	}
	e.schedWake = make(chan struct{}, 1)
	e.shardGrace.Store(int64(shardDrainGrace))
	for _, s := range append(allScripts[:len(allScripts):len(allScripts)], scheduleScripts...) {
		if err := s.Load(ctx, client).Err(); err != nil {
			return nil, fmt.Errorf("rdb: load scripts into pool %s: %w", opts.Pool, err)
		}
	}
	if _, ok := client.(*redis.ClusterClient); ok {
		e.cluster = true
		e.pub = "SPUBLISH"
		e.retryFor = opts.ClusterRetry
		if e.retryFor == 0 {
			e.retryFor = 5 * time.Second
		}
	} else {
		e.pub = "PUBLISH"
	}
	e.argPub = e.pub
	if n, err := e.checkLayout(ctx); err != nil {
		var le *LayoutError
		if errors.As(err, &le) {
			return nil, err
		}
		return nil, fmt.Errorf("rdb: move pool %s to the slot-group layout: %w", opts.Pool, err)
	} else if n > 0 {
		// n counts the queues the upgrade script ran for: each held data
		// of the old layout (a key tagged {ns/q} or an old index entry).
		e.log.WithField("queues", n).Warn("moved queues holding data of the layout before slot groups to the slot-group layout (doc/keys.md)")
	}
	e.loadShards(ctx, nil)
	e.ten.def = opts.DefaultQuota
	if err := e.countOnce(ctx); err != nil {
		// Not fatal: the reconciler corrects the queues it can, and the
		// next start counts again. (A server on a replica, which answers
		// READONLY, leaves it to the master's.)
		e.log.WithError(err).Warn("usage: cannot count the jobs of a pool written before usage counts; the next start tries again")
	}
	e.loadQuotas(ctx)
	e.waiters = newWaiters(e)
	e.autoPipe = !opts.NoAutoPipeline
	if e.autoPipe {
		e.pubs = newCoalescer(coalesceMax, e.publishCoalesced)
		e.acks = newCoalescer(coalesceMax, e.ackCoalesced)
		e.cons = newCoalescer(coalesceMax, e.consumeCoalesced)
	}
	if opts.HistoryFlush > 0 {
		e.hist = newHistory(opts.HistoryFlush)
	}
	e.reserve = newReserve(e, opts.MemoryReserve)
	e.waitReplicas = opts.WaitReplicas
	e.waitTimeout = opts.WaitTimeout
	if e.waitTimeout <= 0 {
		e.waitTimeout = 100 * time.Millisecond
	}
	return e, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Run runs the pump, the reclaimer and the waiters' Pub/Sub loop until ctx
// is done. It returns nil after a clean stop.
func (e *Engine) Run(ctx context.Context) error {
	if e.autoPipe {
		e.pipe.Store(newAutoPipeline(e.rdb, autoPipelineSenders, autoPipelineBatch, e.retryFor))
	}
	var wg sync.WaitGroup
	wg.Add(7)
	go func() { defer wg.Done(); e.runReserve(ctx) }()
	go func() { defer wg.Done(); e.runTenancy(ctx) }()
	go func() { defer wg.Done(); e.runShards(ctx) }()
	go func() { defer wg.Done(); e.runSchedules(ctx) }()
	go func() { defer wg.Done(); e.runPump(ctx) }()
	go func() { defer wg.Done(); e.runReclaim(ctx) }()
	go func() { defer wg.Done(); e.waiters.run(ctx) }()
	if e.hist != nil {
		wg.Add(1)
		go func() { defer wg.Done(); e.runHistory(ctx) }()
	}
	wg.Wait()
	if p := e.pipe.Swap(nil); p != nil {
		p.close()
	}
	return nil
}

// runScript runs a hot-path script: with the other calls of its pass
// (pass.go) or through the auto-pipeline while Run runs, else in its own
// round trip. A step of another engine's pass (a decorator over two pools
// calls both with one context) is no pass here: its pipeline goes to the
// other engine's Redis.
func (e *Engine) runScript(ctx context.Context, s *redis.Script, keys []string, args ...interface{}) *redis.Cmd {
	if st := stepOf(ctx); st != nil && st.p.e == e {
		return st.run(ctx, s, keys, args)
	}
	if p := e.pipe.Load(); p != nil {
		return p.run(ctx, s, keys, args...)
	}
	return e.run(ctx, s, keys, args...)
}

// ms is t in Unix milliseconds, rounded down: the pump moves entries whose
// due time is <= ms(now), so an entry never fires before its due time.
func ms(t time.Time) int64 { return t.UnixMilli() }

// ceilMS is t in Unix milliseconds, rounded up: due times are computed from
// it so that a delay is never cut short by the rounding.
func ceilMS(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

func durMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	m := d.Milliseconds()
	if m == 0 {
		m = 1 // a positive duration under 1 ms still counts
	}
	return m
}

func checkNames(ns, q string) error {
	if !engine.ValidName(ns) || !validQueue(q) {
		return fmt.Errorf("queue %q/%q: %w", ns, q, engine.ErrInvalid)
	}
	return nil
}

// Publish implements engine.Engine. A plain publish (server-made ID, no
// job it replaces, no idempotency key) is coalesced with concurrent ones of
// its publish lane, whatever their queues, into one script call
// (publishCoalesced).
func (e *Engine) Publish(ctx context.Context, req *engine.PublishRequest) (_ string, err error) {
	defer e.fullOn(&err)
	plain := e.pubs != nil && req != nil && req.ID == "" && req.Replaces == "" && req.Key == ""
	if req != nil {
		if sp := e.shardsOf(req.Namespace, req.Queue); sp != nil {
			if !plain {
				return e.publishSharded(ctx, sp, req)
			}
			if req.Group != "" {
				// A grouped job goes to its group's shard, coalesced on
				// that shard's lane.
				if err := checkPublish(req.Namespace, req.Queue, req); err != nil {
					return "", err
				}
				c := *req
				c.Queue = sp.names[e.publishShard(ctx, sp, req)]
				op, err := e.pubs.do(ctx, e.publishLane(c.Namespace, c.Queue), pubOp{req: &c})
				return op.id, err
			}
			// The plain publishes to a sharded queue coalesce on a lane of
			// the queue's own; each batch goes to one shard, in turn
			// (publishCoalesced).
			if err := checkPublish(req.Namespace, req.Queue, req); err != nil {
				return "", err
			}
			op, err := e.pubs.do(ctx, "s:"+req.Namespace+"/"+req.Queue, pubOp{req: req, sp: sp})
			return op.id, err
		}
	}
	if plain {
		if err := checkPublish(req.Namespace, req.Queue, req); err != nil {
			return "", err
		}
		op, err := e.pubs.do(ctx, e.publishLane(req.Namespace, req.Queue), pubOp{req: req})
		return op.id, err
	}
	ids, err := e.PublishBatch(ctx, []*engine.PublishRequest{req})
	if len(ids) == 0 {
		return "", err
	}
	// With ErrKeyExists, ids[0] is the first job's ID.
	return ids[0], err
}

// PublishEach implements engine.Batcher: the plain publishes among
// reqs run as coalesced batches of up to coalesceMax jobs (one script call
// each, whatever their queues; on a cluster, of one slot group), the
// others one by one through Publish.
//
// On a cluster, where a script touches one slot group, reqs are split by
// their queue's group and the groups run concurrently, outside the pass
// (their calls go to the nodes together through the auto-pipeline), each
// joining the concurrent publishes of its group in the coalescer; within
// a group they run in order, so the jobs of one queue keep theirs.
func (e *Engine) PublishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error) {
	defer e.fullOnEach(errs)
	reqs = e.routePublishes(ctx, reqs)
	if e.cluster && e.pubs != nil && len(reqs) > 1 {
		// One part per slot group, in the order the groups first appear;
		// requests with a bad queue name (only errors) in part -1.
		var order []int
		byGroup := map[int][]int{}
		for i, r := range reqs {
			g := -1
			if r != nil && checkNames(r.Namespace, r.Queue) == nil {
				g = slotGroup(r.Namespace, r.Queue)
			}
			if _, ok := byGroup[g]; !ok {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], i)
		}
		if len(order) > 1 {
			e.publishGroups(ctx, reqs, ids, errs, order, byGroup)
			return
		}
	}
	e.publishEach(ctx, reqs, ids, errs, "")
}

// publishGroups runs PublishEach's parts (byGroup[g] for g in order)
// concurrently, the first on the calling goroutine, each outside the pass.
func (e *Engine) publishGroups(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error, order []int, byGroup map[int][]int) {
	ctx, attach := detach(ctx)
	defer attach()
	part := func(g int) { // part g's goroutine alone writes its indexes of ids and errs
		at := byGroup[g]
		sub := make([]*engine.PublishRequest, len(at))
		for k, i := range at {
			sub[k] = reqs[i]
		}
		subIDs, subErrs := make([]string, len(at)), make([]error, len(at))
		lane := ""
		if g >= 0 {
			lane = laneKeys[g]
		}
		e.publishEach(ctx, sub, subIDs, subErrs, lane)
		for k, i := range at {
			ids[i], errs[i] = subIDs[k], subErrs[k]
		}
	}
	e.concurrently(len(order), func(i int) { part(order[i]) })
}

// concurrently runs f(0), ..., f(n-1) at once, f(0) on the calling
// goroutine, and returns when all have returned. The calls are made
// outside ctx's pass, if any (their script calls go through the
// auto-pipeline, together), and the pass's other steps go on without
// this one meanwhile.
func (e *Engine) concurrently(n int, f func(int)) {
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		e.stepWorkers.run(func() {
			defer wg.Done()
			f(i)
		})
	}
	if n > 0 {
		f(0)
	}
	wg.Wait()
}

// publishEach publishes reqs, the plain ones in coalesced batches: on lane
// when it is set (joining the lane's concurrent publishes), else as
// batches of their own.
func (e *Engine) publishEach(ctx context.Context, reqs []*engine.PublishRequest, ids []string, errs []error, lane string) {
	var calls []*batchCall[pubOp]
	var at []int // calls[k] is reqs[at[k]]
	for i, r := range reqs {
		if e.pubs == nil || r == nil || r.ID != "" || r.Replaces != "" || r.Key != "" {
			ids[i], errs[i] = e.Publish(ctx, r)
			continue
		}
		if err := checkPublish(r.Namespace, r.Queue, r); err != nil {
			ids[i], errs[i] = "", err
			continue
		}
		c := &batchCall[pubOp]{in: pubOp{req: r}}
		if lane != "" {
			c.done = make(chan struct{}, 1)
		}
		calls = append(calls, c)
		at = append(at, i)
	}
	if lane != "" && len(calls) > 0 {
		e.pubs.doAll(ctx, lane, calls)
	} else {
		for k := 0; k < len(calls); k += coalesceMax {
			e.pubs.runBatch(ctx, calls[k:min(len(calls), k+coalesceMax)])
		}
	}
	for k, c := range calls {
		// A publish not replicated was written: its ID goes with the
		// error, as Publish returns it.
		if ids[at[k]], errs[at[k]] = c.in.id, c.err; c.err != nil && !errors.Is(c.err, engine.ErrNotReplicated) {
			ids[at[k]] = ""
		}
	}
}

// pubOp is one coalesced publish: the request and the ID it got. sp is
// set when req is a plain publish to sharded queue req.Queue, coalesced
// on a lane of that queue alone: its batch picks the shard.
type pubOp struct {
	req *engine.PublishRequest
	id  string
	sp  *shardSpec
}

// publishLanes is how many publish batches of a pool on one Redis may be
// in flight at once: publishes are coalesced across queues within a lane,
// and a queue always uses the same lane. On a cluster a lane is a slot
// group, as one script call touches one slot.
const publishLanes = 4

var laneKeys = func() (k [slotGroups]string) {
	for g := range k {
		k[g] = strconv.Itoa(g)
	}
	return k
}()

// publishLane returns the coalescing key of publishes to ns/q: its slot
// group on a cluster, else the group modulo publishLanes.
func (e *Engine) publishLane(ns, q string) string {
	g := slotGroup(ns, q)
	if !e.cluster {
		g %= publishLanes
	}
	return laneKeys[g]
}

// publishCoalesced runs coalesced publishes, of one or several queues, as
// one publishManyScript call: they are all published or none is, and share
// the outcome.
func (e *Engine) publishCoalesced(ctx context.Context, batch []*batchCall[pubOp]) {
	if sp := batch[0].in.sp; sp != nil {
		// A batch of one sharded queue's plain publishes: all to one
		// shard, the next in turn, so that it stays one script call.
		r0 := batch[0].in.req
		name := sp.names[e.publishShard(ctx, sp, r0)]
		for _, c := range batch {
			r := *c.in.req
			r.Queue = name
			c.in.req, c.in.sp = &r, nil
		}
	}
	if batch = e.admitMemoryBatch(batch); len(batch) == 0 {
		return
	}
	now := e.now()
	nowMS := ceilMS(now)
	type queue struct {
		ns, q  string
		names  *queueNames
		record bool
		jobs   int
		full   bool // a job is delayed, has a priority or a group (publishManyScript's kind "f")
		bytes  int  // the argument that carries size
		size   int  // the bytes of its jobs' values
	}
	// Group the jobs by queue. A linear search is enough: a batch holds at
	// most coalesceMax jobs, and a map (with its growth) cost more than the
	// search over 10,000 queues, where a batch has as many queues as jobs.
	queues := make([]queue, 0, len(batch))
	group := make([]int, len(batch))
	for i, c := range batch {
		r := c.in.req
		qn := e.names.get([3]string{r.Namespace, r.Queue})
		g := 0
		for g < len(queues) && queues[g].names != qn {
			g++
		}
		if g == len(queues) {
			queues = append(queues, queue{ns: r.Namespace, q: r.Queue, names: qn, record: !qn.recorded.Load()})
		}
		queues[g].jobs++
		if r.Priority != 0 || !readyNow(r, nowMS) || r.Group != "" {
			queues[g].full = true
		}
		group[i] = g
	}
	// The script takes the jobs grouped by queue, in arrival order within
	// each: pos is a job's place in the script's order, at its inverse.
	m, n := len(queues), len(batch)
	buf := make([]int, 2*n+m)
	pos, at, next := buf[:n], buf[n:2*n], buf[2*n:]
	for g := 1; g < m; g++ {
		next[g] = next[g-1] + queues[g-1].jobs
	}
	for i, g := range group {
		pos[i], at[next[g]] = next[g], i
		next[g]++
	}
	keys := make([]string, 0, 7*m+n)
	args := make([]interface{}, 5, 5+8*m+5*n)
	anyQuota := "0"
	for g := range queues {
		qu := &queues[g]
		qn := qu.names
		aj, ab := e.allowance(qu.ns, qn.group)
		quota := aj != "" || ab != ""
		kind := pubKinds[b2i(qu.full)][b2i(qu.record)][b2i(quota)]
		qu.bytes = len(args) + 3
		args = append(args, kind, qu.jobs, qn.argChannel, 0)
		keys = append(keys, qn.ready)
		if qu.full || qu.record {
			args = append(args, qn.argMember)
		}
		if qu.full {
			args = append(args, qn.argWake)
			keys = append(keys, qn.timer, qn.prio, qn.config, qn.index)
		}
		if quota {
			args = append(args, aj, ab)
			anyQuota = "1"
		}
		if qu.record {
			keys = append(keys, qn.registry)
		}
		keys = append(keys, qn.usage)
	}
	k0, e0, v0 := len(keys), len(args), len(args)+n // a job's key, ready entry, other arguments
	args[0], args[1], args[2], args[3], args[4] = e.pub, m, k0, e0, anyQuota
	keys = keys[:k0+n]
	args = args[:v0+4*n]
	fail := func(err error) {
		for _, c := range batch {
			c.err = err
		}
	}
	delayed := 0 // jobs into a timer rather than a ready queue
	for i, c := range batch {
		r := c.in.req
		value, due, err := jobValue(r, nowMS)
		if err != nil {
			// Cannot happen for a request checkPublish passed; fail the
			// batch rather than publish some of it.
			fail(fmt.Errorf("publish %s/%s: %w", r.Namespace, r.Queue, err))
			return
		}
		c.in.id = newJobID(queues[group[i]].names, now, jobDelay(r, now), r.Versioned)
		p := pos[i]
		keys[k0+p] = queues[group[i]].names.jobPrefix + c.in.id
		args[e0+p] = packEntry(r.Tries, c.in.id)
		b := v0 + 4*p
		args[b], args[b+1], args[b+2], args[b+3] = value, durMS(r.TTL), scriptDue(due, nowMS), r.Priority
		queues[group[i]].size += len(value)
		if due > nowMS {
			delayed++
		}
	}
	for _, qu := range queues {
		args[qu.bytes] = qu.size
	}
	// published does what follows a batch stored: wake the pump when a
	// job went to a timer, record the queues, count, and report the
	// replicas that confirmed it.
	published := func(wake bool, replicas waited) {
		if wake {
			e.wakePump()
		}
		for _, qu := range queues {
			if qu.record {
				qu.names.recorded.Store(true)
			}
			e.notePublished(qu.ns, qu.names.group, qu.jobs, qu.size)
			e.metrics.publishedQueue(qu.ns, qu.q, qu.names, qu.jobs)
			e.histPublished(qu.ns, qu.q, qu.names, qu.jobs)
		}
		e.metrics.publishedPool(len(batch), delayed)
		fail(e.replicaShortfall("publish", replicas))
	}
	for attempt := 0; ; attempt++ {
		res, replicas, err := e.runPublish(ctx, publishManyScript, keys, args)
		if lost, ok := lostReply(err); ok {
			fail(e.replicaShortfall("publish", waited{err: lost}))
			return
		}
		if err != nil {
			fail(fmt.Errorf("publish: %w", err))
			return
		}
		code, _ := res[0].(int64)
		if code == 0 && len(res) == 3 {
			earliest, _ := res[2].(int64)
			published(earliest > 0, replicas)
			return
		}
		if g := int64(0); code == -3 && len(res) == 3 {
			g, _ = res[1].(int64)
			if g < 1 || int(g) > m {
				fail(fmt.Errorf("publish: unexpected reply %v", res))
				return
			}
			// Queue g's jobs would take its namespace over its quota:
			// the others go in a call of their own, and g's (separate
			// publishes) one by one, so that those that fit go in.
			qu := queues[g-1]
			var rest, over []*batchCall[pubOp]
			for i, c := range batch {
				if group[i] == int(g)-1 {
					over = append(over, c)
				} else {
					rest = append(rest, c)
				}
			}
			if len(rest) > 0 {
				e.publishCoalesced(ctx, rest)
			}
			if len(over) == 1 {
				over[0].err = e.quotaErr(qu.ns, res[2])
				return
			}
			for k, c := range over {
				e.publishCoalesced(ctx, over[k:k+1])
				if qe := (*engine.QuotaError)(nil); errors.As(c.err, &qe) && qe.Limit == "max_jobs" {
					for _, later := range over[k+1:] { // as many jobs each: none fits
						later.err = c.err
					}
					return
				}
			}
			return
		}
		p := int(code) - 1
		if p < 0 || p >= n {
			fail(fmt.Errorf("publish: unexpected reply %v", res))
			return
		}
		k := at[p]
		r := batch[k].in.req
		if p == 0 && e.ownEarlierWrite(ctx, keys[k0], args[v0]) {
			// The script ran already (atomic: every job is there).
			published(delayed > 0, replicas)
			return
		}
		if attempt >= maxPublishRetries {
			fail(fmt.Errorf("publish %s/%s job %s: %w", r.Namespace, r.Queue, batch[k].in.id, engine.ErrJobExists))
			return
		}
		// A generated ID collided (48 random bits per millisecond): retry
		// with a fresh one for that job.
		batch[k].in.id = newJobID(queues[group[k]].names, now, jobDelay(r, now), r.Versioned)
		keys[k0+p] = queues[group[k]].names.jobPrefix + batch[k].in.id
		args[e0+p] = packEntry(r.Tries, batch[k].in.id)
	}
}

// pubKinds are publishManyScript's queue kinds: [full][record][quota].
var pubKinds = [2][2][2]interface{}{{{"p", "pq"}, {"pr", "prq"}}, {{"f", "fq"}, {"fr", "frq"}}}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readyNow reports whether job r published at nowMS is ready at once
// (jobValue's due time is not after nowMS).
func readyNow(r *engine.PublishRequest, nowMS int64) bool {
	if !r.DueAt.IsZero() {
		return ceilMS(r.DueAt) <= nowMS
	}
	return r.Delay <= 0
}

// flag is a boolean script argument: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// checkPublish validates one job of a publish to ns/q.
func checkPublish(ns, q string, r *engine.PublishRequest) error {
	if r == nil {
		return fmt.Errorf("publish: nil job: %w", engine.ErrInvalid)
	}
	if err := checkNames(r.Namespace, r.Queue); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if r.Namespace != ns || r.Queue != q {
		return fmt.Errorf("publish: batch spans queues: %w", engine.ErrInvalid)
	}
	if r.Tries == 0 {
		return fmt.Errorf("publish: tries must be >= 1: %w", engine.ErrInvalid)
	}
	if r.TTL < 0 || r.Delay < 0 || r.Priority < 0 || r.Priority > engine.MaxPriority {
		return fmt.Errorf("publish: negative ttl or delay, or priority out of 0..%d: %w", engine.MaxPriority, engine.ErrInvalid)
	}
	if !r.DueAt.IsZero() && r.Delay != 0 {
		return fmt.Errorf("publish: a due time and a delay: %w", engine.ErrInvalid)
	}
	if len(r.Key) > 256 {
		return fmt.Errorf("publish: a job key needs a single job and at most 256 bytes: %w", engine.ErrInvalid)
	}
	if r.Group != "" && !engine.ValidGroup(r.Group) {
		return fmt.Errorf("publish: group %q: 1..%d characters of [-_A-Za-z0-9]: %w", r.Group, engine.MaxGroupLength, engine.ErrInvalid)
	}
	return nil
}

// PublishBatch implements engine.Engine: all jobs must name the same queue.
// A Key (idempotency key) is honoured on a batch of one job only.
func (e *Engine) PublishBatch(ctx context.Context, reqs []*engine.PublishRequest) (_ []string, err error) {
	defer e.fullOn(&err)
	if len(reqs) == 0 || reqs[0] == nil {
		return nil, fmt.Errorf("publish: no jobs: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(reqs[0].Namespace, reqs[0].Queue); sp != nil {
		return e.publishBatchSharded(ctx, sp, reqs)
	}
	for _, r := range reqs {
		if err := checkPublish(reqs[0].Namespace, reqs[0].Queue, r); err != nil {
			return nil, err
		}
		if r.Key != "" && len(reqs) > 1 {
			return nil, fmt.Errorf("publish: a job key needs a single job and at most 256 bytes: %w", engine.ErrInvalid)
		}
	}
	return e.publishValid(ctx, reqs)
}

// publishValid publishes jobs checked by checkPublish, all or none.
func (e *Engine) publishValid(ctx context.Context, reqs []*engine.PublishRequest) ([]string, error) {
	ns, q := reqs[0].Namespace, reqs[0].Queue
	if err := e.admitMemory(ns, q, publishBytes(reqs)); err != nil {
		return nil, err
	}
	now := e.now()
	nowMS := ceilMS(now)
	ids := make([]string, len(reqs))
	generated := make([]bool, len(reqs))
	qn := e.names.get([3]string{ns, q})
	// The first publish to the queue through this engine also records it
	// in its group's registry, in the same round trip.
	record := !qn.recorded.Load()
	keys := make([]string, 9+len(reqs))
	keys[0], keys[1], keys[2], keys[3], keys[4] = qn.ready, qn.timer, qn.index, qn.prio, qn.config
	keys[7], keys[8+len(reqs)] = qn.registry, qn.usage
	args := make([]interface{}, 9+5*len(reqs))
	args[7+5*len(reqs)], args[8+5*len(reqs)] = e.allowance(ns, qn.group)
	args[0] = qn.argMember
	args[1] = qn.argChannel
	args[2] = qn.argWake
	args[3] = ""
	args[4] = "0"
	args[5] = flag(record)
	args[6] = e.pub
	keys[5], keys[6] = keys[0], keys[0] // unused unless set below; same slot
	// delayed counts the jobs that go to the timer rather than the ready queue.
	delayed := 0
	for i, r := range reqs {
		if r.Replaces != "" {
			keys[5] = jobKey(ns, q, r.Replaces)
			args[3] = r.Replaces
		}
		if r.Key != "" {
			keys[6] = uniqueKey(ns, q, r.Key)
			args[4] = "1"
		}
		id := r.ID
		if id == "" {
			id = newJobID(qn, now, jobDelay(r, now), r.Versioned)
			generated[i] = true
		}
		ids[i] = id
		value, due, err := jobValue(r, nowMS)
		if err != nil {
			return nil, fmt.Errorf("publish %s/%s: %w", ns, q, err)
		}
		keys[8+i] = qn.jobPrefix + id
		b := 7 + 5*i
		args[b] = packEntry(r.Tries, id)
		args[b+1] = value
		args[b+2] = durMS(r.TTL)
		args[b+3] = scriptDue(due, nowMS)
		args[b+4] = r.Priority
		if due > nowMS {
			delayed++
		}
	}
	for attempt := 0; ; attempt++ {
		res, replicas, err := e.runPublish(ctx, publishScript, keys, args)
		if lost, ok := lostReply(err); ok {
			return ids, e.replicaShortfall("publish "+ns+"/"+q, waited{err: lost})
		}
		if err != nil {
			return nil, fmt.Errorf("publish %s/%s: %w", ns, q, err)
		}
		code, _ := res[0].(int64)
		switch {
		case code == 0 && len(res) == 3:
			if earliest, _ := res[2].(int64); earliest > 0 {
				e.wakePump()
			}
			if record {
				qn.recorded.Store(true)
			}
			if err := e.replicaShortfall("publish "+ns+"/"+q, replicas); err != nil {
				return ids, err
			}
			e.metrics.publishedPool(len(reqs), delayed)
			e.metrics.publishedQueue(ns, q, qn, len(reqs))
			e.histPublished(ns, q, qn, len(reqs))
			e.publishedArgs(ns, qn.group, args, len(reqs))
			return ids, nil
		case code == -3 && len(res) == 2:
			return nil, e.quotaErr(ns, res[1])
		case code == -1 && len(res) == 2:
			first, _ := res[1].(string)
			if e.waitReplicas > 0 {
				// The retry of a publish not replicated finds its key: it
				// answers the first job only once replicas have it.
				if err := e.confirmReplicated(ctx, "publish "+ns+"/"+q, keys[6], first); err != nil {
					return []string{first}, err
				}
			}
			return []string{first}, fmt.Errorf("publish %s/%s key %q: %w", ns, q, reqs[0].Key, engine.ErrKeyExists)
		}
		k := int(code) - 1
		if k < 0 || k >= len(reqs) {
			return nil, fmt.Errorf("publish %s/%s: unexpected reply %v", ns, q, res)
		}
		if k == 0 && generated[0] && e.ownEarlierWrite(ctx, keys[8], args[8]) {
			// The script ran already (atomic: every job is there).
			if delayed > 0 {
				e.wakePump()
			}
			if record {
				qn.recorded.Store(true)
			}
			if err := e.replicaShortfall("publish "+ns+"/"+q, replicas); err != nil {
				return ids, err
			}
			e.metrics.publishedPool(len(reqs), delayed)
			e.metrics.publishedQueue(ns, q, qn, len(reqs))
			e.histPublished(ns, q, qn, len(reqs))
			return ids, nil
		}
		if !generated[k] || attempt >= maxPublishRetries {
			return nil, fmt.Errorf("publish %s/%s job %s: %w", ns, q, ids[k], engine.ErrJobExists)
		}
		// A generated ID collided (48 random bits per millisecond): retry
		// that job with a fresh one.
		r := reqs[k]
		ids[k] = newJobID(qn, now, jobDelay(r, now), r.Versioned)
		keys[8+k] = qn.jobPrefix + ids[k]
		args[7+5*k] = packEntry(r.Tries, ids[k])
	}
}

// ownEarlierWrite reports whether the job key a publish found taken holds
// value, the job this very publish wrote: go-redis sends a script again
// after a read timeout or a broken connection (a Redis stalled for longer
// than its read timeout), and the first run may have gone through (not
// with the server's clients, whose redisretry.Dialer stops that re-send). A job
// ID has 64 random bits, so the key of another job is all but impossible;
// a fresh ID would publish the job twice.
func (e *Engine) ownEarlierWrite(ctx context.Context, key string, value interface{}) bool {
	want, ok := value.([]byte)
	if !ok {
		return false
	}
	got, err := retried(ctx, e, func() *redis.StringCmd { return e.rdb.Get(ctx, key) }).Bytes()
	return err == nil && bytes.Equal(got, want)
}

// jobDelay is the delay of job r published at now, for its ID.
func jobDelay(r *engine.PublishRequest, now time.Time) time.Duration {
	if r.DueAt.IsZero() {
		return r.Delay
	}
	return max(r.DueAt.Sub(now), 0)
}

// scriptDue is a job's due time as the publish scripts take it: 0 when
// the job is ready at once (jobValue made it ready), else due (ms).
func scriptDue(due, nowMS int64) int64 {
	if due <= nowMS {
		return 0
	}
	return due
}

// jobValue returns the value stored for job r published at nowMS (header +
// payload) and its due time (ms).
func jobValue(r *engine.PublishRequest, nowMS int64) ([]byte, int64, error) {
	version := 0
	if r.Versioned {
		version = 1
	}
	payload, err := encodePayload(version, r.Body, r.Attributes)
	if err != nil {
		return nil, 0, err
	}
	due := nowMS + durMS(r.Delay)
	if !r.DueAt.IsZero() {
		due = ceilMS(r.DueAt)
	}
	return newGroupedValue(due <= nowMS, r.Tries, r.Priority, due, r.Group, r.TraceParent, r.TraceState, payload), due, nil
}

// waited is what a publish's WAIT answered: the replicas that have the
// write (n), or err, the reply or failure that ended the WAIT before it
// counted them (UNBLOCKED when the master is demoted to a replica during a
// failover or a client runs CLIENT UNBLOCK … ERROR, a connection that
// broke). n is -1 when the publish did not wait.
type waited struct {
	n   int64
	err error
}

// noWait is the waited of a publish without WaitReplicas.
var noWait = waited{n: -1}

// runPublish runs a publish script and, with WaitReplicas, WAIT after it
// (runAndWait).
func (e *Engine) runPublish(ctx context.Context, script *redis.Script, keys []string, args []interface{}) (res []interface{}, w waited, err error) {
	if e.waitReplicas > 0 {
		return e.runAndWait(ctx, script, keys, args)
	}
	res, err = e.runScript(ctx, script, keys, args...).Slice()
	return res, noWait, err
}

// errLostReply marks the error of runAndWait when the connection broke
// after the script and its WAIT were sent (a master demoted or killed
// mid-WAIT closes it): the script may have run, so the publish's jobs may
// exist, as when the replicas were too slow.
type errLostReply struct{ err error }

func (e errLostReply) Error() string { return e.err.Error() }
func (e errLostReply) Unwrap() error { return e.err }

// lostReply returns the cause of an errLostReply.
func lostReply(err error) (error, bool) {
	var l errLostReply
	if errors.As(err, &l) {
		return l.err, true
	}
	return nil, false
}

// replicaShortfall is the error of a publish that fewer than WaitReplicas
// replicas acknowledged in time, or whose WAIT ended without a count (the
// write ran: the job may exist, as when the replicas were too slow), or
// nil (also when the publish did not wait). The cause of an ended WAIT is
// in the message, not wrapped: the answer is ErrNotReplicated's whatever
// the cause.
func (e *Engine) replicaShortfall(what string, w waited) error {
	if w.err != nil {
		return fmt.Errorf("%s: WAIT for %d replicas ended by %q: %w", what, e.waitReplicas, w.err.Error(), engine.ErrNotReplicated)
	}
	if w.n < 0 || w.n >= int64(e.waitReplicas) {
		return nil
	}
	return fmt.Errorf("%s: %d of %d replicas within %v: %w", what, w.n, e.waitReplicas, e.waitTimeout, engine.ErrNotReplicated)
}

// confirmReplicated waits (WAIT) until WaitReplicas replicas have every
// write made so far, the publish of job id with idempotency key key
// included, and returns ErrNotReplicated when they do not within
// WaitTimeout. WAIT counts the writes of its own connection, so it follows
// a write that changes nothing, on the same connection: SET key id XX
// KEEPTTL (the key holds id already). Replication is ordered: a replica
// that has this write has the job.
func (e *Engine) confirmReplicated(ctx context.Context, what, key, id string) error {
	var wait *redis.Cmd
	err := e.retryWait(ctx, func() error {
		pipe, err := e.waitPipeline(ctx, key)
		if err != nil {
			return err
		}
		set := pipe.SetArgs(ctx, key, id, redis.SetArgs{Mode: "XX", KeepTTL: true})
		wait = pipe.Do(ctx, "WAIT", e.waitReplicas, e.waitTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		// Whatever ended the WAIT (read below), the write went through
		// unless the SET failed.
		if serr := set.Err(); serr != nil && !errors.Is(serr, redis.Nil) {
			return serr
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := wait.Int64()
	return e.replicaShortfall(what, waited{n: n, err: err})
}

// waitPipeline returns a pipeline for a write and the WAIT after it, both
// over one connection (WAIT counts that connection's writes). On a cluster
// it is a pipeline of the node that masters key's slot, not of the cluster
// client: that one follows a MOVED or ASK of the write to another node but
// leaves the WAIT on the first, which would then count nothing and
// confirm a write its node's replicas may not have. The node answers MOVED
// or ASK itself when the slot has moved: retryWait reloads the slot map
// and tries again.
func (e *Engine) waitPipeline(ctx context.Context, key string) (redis.Pipeliner, error) {
	if cc, ok := e.rdb.(*redis.ClusterClient); ok && e.cluster {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Pipeline(), nil
	}
	return e.rdb.Pipeline(), nil
}

// retryWait runs try (a write and its WAIT) and, on a cluster, runs it
// again while it fails with a clusterRetryable error (answered before the
// write ran), reloading the slot map after a redirection, with a growing
// pause, for at most Options.ClusterRetry in all, as runRetry does.
func (e *Engine) retryWait(ctx context.Context, try func() error) (err error) {
	cc, _ := e.rdb.(*redis.ClusterClient)
	retried := false
	defer func() {
		// A node that does not answer (a master just killed) is reported,
		// not retried (the write may have run), but the cluster client,
		// which did not send it, must still learn the new slot map.
		if err != nil && cc != nil && e.cluster {
			cc.ReloadState(ctx)
		}
	}()
	return e.retryErr(ctx, func() error {
		if cc != nil && retried {
			cc.ReloadState(ctx)
		}
		retried = true
		return try()
	})
}

// runAndWait runs a publish script and WAIT in one pipeline, so that both
// go over the same connection (WAIT counts that connection's writes):
// waitPipeline.
func (e *Engine) runAndWait(ctx context.Context, script *redis.Script, keys []string, args []interface{}) ([]interface{}, waited, error) {
	run := func(eval bool) (*redis.Cmd, *redis.Cmd, error) {
		pipe, err := e.waitPipeline(ctx, keys[0])
		if err != nil {
			return nil, nil, err
		}
		var cmd *redis.Cmd
		if eval {
			cmd = script.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = script.EvalSha(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", e.waitReplicas, e.waitTimeout.Milliseconds())
		_, err = pipe.Exec(ctx)
		return cmd, wait, err
	}
	var cmd, wait *redis.Cmd
	err := e.retryWait(ctx, func() error {
		var err error
		cmd, wait, err = run(false)
		if cmd != nil && isNoScript(cmd.Err()) {
			cmd, wait, err = run(true)
		}
		if cmd == nil {
			return err
		}
		return cmd.Err()
	})
	if redisretry.Unreachable(err) && !redisretry.Unsent(err) {
		return nil, noWait, errLostReply{err}
	}
	if err != nil {
		return nil, noWait, err
	}
	res, err := cmd.Slice()
	if err != nil {
		return nil, noWait, err
	}
	// The script ran: whatever ended its WAIT (a count, a timeout, or an
	// error reply such as UNBLOCKED from a master demoted mid-WAIT), the
	// publish's jobs exist on that master, and the caller names them.
	n, err := wait.Int64()
	return res, waited{n: n, err: err}, nil
}

// Consume implements engine.Engine.
func (e *Engine) Consume(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	routed := e.routeConsume(req) // over the shards of sharded queues
	if err := checkConsume(routed); err != nil {
		return nil, err
	}
	if routed.Timeout > 0 && e.waiters.listening(routed.Namespace, routed.Queues) {
		// wait registers the waiter and then runs the consume script: one
		// call, no race, where a call before it would find an empty queue
		// just as often as a job. It routes req again at every look.
		return e.waiters.wait(ctx, req)
	}
	jobs, err := e.consumeNow(ctx, routed)
	if err != nil || len(jobs) > 0 || req.Timeout <= 0 {
		return jobs, err
	}
	return e.waiters.wait(ctx, req)
}

// checkConsume validates a consume request.
func checkConsume(req *engine.ConsumeRequest) error {
	if req == nil || len(req.Queues) == 0 || req.Count < 1 || req.Count > engine.MaxBatchConsume || req.TTR < 0 {
		return fmt.Errorf("consume: %w", engine.ErrInvalid)
	}
	for _, q := range req.Queues {
		if err := checkNames(req.Namespace, q); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
	}
	return nil
}

// consumeKey is the coalescing key of a consume: consumes with the same
// namespace, queues and TTR can share one script call.
func consumeKey(req *engine.ConsumeRequest) string {
	var key strings.Builder
	key.WriteString(req.Namespace)
	for _, q := range req.Queues {
		key.WriteByte(0)
		key.WriteString(q)
	}
	key.WriteByte(0)
	key.WriteString(strconv.FormatInt(durMS(req.TTR), 10))
	// One call records one worker name in the histories of its jobs.
	key.WriteByte(0)
	key.WriteString(req.Worker)
	return key.String()
}

// consumeNow takes the jobs req may have now. Concurrent single-job
// consumes of the same queues with the same TTR are coalesced into one script call
// (coalesce.go), which pops the jobs of them all and hands them out in
// order.
func (e *Engine) consumeNow(ctx context.Context, req *engine.ConsumeRequest) ([]*engine.Job, error) {
	// The script's reply must be read even when the caller has gone away:
	// a job taken but never returned would wait for its TTR.
	ctx = context.WithoutCancel(ctx)
	if e.cons == nil || req.Count != 1 {
		// Batch consumes already share one call among their jobs.
		out := [][]*engine.Job{nil}
		err := e.consumeFor(ctx, req, []int{req.Count}, out)
		return out[0], err
	}
	op, err := e.cons.do(ctx, consumeKey(req), consumeOp{req: req})
	return op.jobs, err
}

// ConsumeEach implements engine.Batcher: the requests for the same
// namespace, queues and TTR share one consume script call (as coalesced
// consumes do), and nobody waits. A request with a Timeout whose queues are
// known to be empty (waiters.go) is not looked up.
func (e *Engine) ConsumeEach(ctx context.Context, reqs []*engine.ConsumeRequest, jobs [][]*engine.Job, errs []error) {
	ctx = context.WithoutCancel(ctx) // jobs taken must be handed out
	type group struct {
		at   []int
		want []int
	}
	var order []string
	groups := map[string]*group{}
	routed := reqs
	if e.anySharded() {
		// Requests for the same queues and TTR take the shards from the
		// same start (the next in turn, per batch), so that they still
		// share one call: a start of their own each would split them.
		routed = make([]*engine.ConsumeRequest, len(reqs))
		var starts map[string][]string
		for i, r := range reqs {
			if r == nil {
				continue
			}
			k := consumeKey(r)
			qs, ok := starts[k]
			if !ok {
				if rr := e.routeConsume(r); rr != r {
					qs = rr.Queues
				}
				if starts == nil {
					starts = make(map[string][]string)
				}
				starts[k] = qs
			}
			routed[i] = r
			if qs != nil {
				c := *r
				c.Queues = qs
				routed[i] = &c
			}
		}
	}
	for i, r := range routed {
		jobs[i], errs[i] = nil, checkConsume(r)
		if errs[i] != nil {
			continue
		}
		if r.Timeout > 0 && e.waiters.knownEmpty(r.Namespace, r.Queues) {
			continue // it will wait, and a job made ready will wake it
		}
		key := consumeKey(r)
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.at, g.want = append(g.at, i), append(g.want, r.Count)
	}
	for _, key := range order {
		g := groups[key]
		out := make([][]*engine.Job, len(g.at))
		err := e.consumeFor(ctx, routed[g.at[0]], g.want, out)
		for k, i := range g.at {
			jobs[i], errs[i] = out[k], err
		}
	}
}

// Watch implements engine.Watcher (waiters.go).
func (e *Engine) Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool) {
	if qs := e.expandQueues(ns, queues); qs != nil {
		queues = qs
	}
	return e.waiters.watch(ns, queues, fn)
}

// DeleteEach implements engine.Batcher: the ACKs of one queue run as one
// ackManyScript call per coalesceMax jobs.
func (e *Engine) DeleteEach(ctx context.Context, refs []engine.JobRef, errs []error) {
	var order [][2]string
	groups := map[[2]string][]int{}
	// queues[i] is the queue (the shard) refs[i]'s ACK goes to, when the
	// pool has sharded queues.
	var queues []string
	if e.anySharded() {
		queues = make([]string, len(refs))
	}
	queue := func(i int) string {
		if queues == nil {
			return refs[i].Queue
		}
		return queues[i]
	}
	// nonces[i] is refs[i]'s receipt, decoded (a receipt ACK).
	var nonces []string
	for i, r := range refs {
		errs[i] = nil
		if err := checkNames(r.Namespace, r.Queue); err != nil {
			errs[i] = fmt.Errorf("ack: %w", err)
			continue
		}
		if r.Receipt != "" {
			if queues != nil && e.shardsOf(r.Namespace, r.Queue) != nil {
				// A sharded queue's receipt ACK looks in its shards: Ack's
				// own way, one job at a time.
				errs[i] = e.Ack(ctx, r.Namespace, r.Queue, r.ID, r.Receipt)
				continue
			}
			nonce, err := decodeReceipt(r.Receipt)
			if err != nil {
				errs[i] = fmt.Errorf("ack: %w", err)
				continue
			}
			if nonces == nil {
				nonces = make([]string, len(refs))
			}
			nonces[i] = nonce
		}
		if queues != nil {
			queues[i] = r.Queue
			if sp := e.shardsOf(r.Namespace, r.Queue); sp != nil {
				queues[i] = sp.names[sp.idShard(r.ID)]
			}
		}
		k := [2]string{r.Namespace, queue(i)}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	var mu sync.Mutex
	var missing []int // probed ACKs that found no job
	queueAcks := func(ctx context.Context, k [2]string) {
		at := groups[k]
		for len(at) > 0 {
			n := min(len(at), coalesceMax)
			batch := make([]*batchCall[ackOp], n)
			for j, i := range at[:n] {
				batch[j] = &batchCall[ackOp]{in: ackOp{ns: refs[i].Namespace, q: queue(i), id: refs[i].ID}}
				if nonces != nil && nonces[i] != "" {
					batch[j].in.nonce = nonces[i]
				} else if _, s := splitShard(queue(i)); queues != nil && s > 0 {
					// In the shard its ID names: shard 0 next if it
					// is not there.
					batch[j].in.nonce = ackProbe
				}
			}
			e.ackCoalesced(ctx, batch)
			for j, i := range at[:n] {
				if batch[j].err == nil && batch[j].in.code == 0 && batch[j].in.nonce == ackProbe {
					mu.Lock()
					missing = append(missing, i)
					mu.Unlock()
				}
				op := batch[j].in
				op.q = refs[i].Queue
				errs[i] = ackResult(op, batch[j].err)
			}
			at = at[n:]
		}
	}
	if e.cluster && len(order) > 1 {
		// On a cluster the queues' ACKs (a sharded queue's shards, or
		// queues of several slot groups) go concurrently, their calls to
		// the nodes together, rather than a round trip each in turn.
		dctx, attach := detach(ctx)
		e.concurrently(len(order), func(i int) { queueAcks(dctx, order[i]) })
		attach()
	} else {
		for _, k := range order {
			queueAcks(ctx, k)
		}
	}
	slices.Sort(missing)
	for _, i := range missing {
		sp := e.shardsOf(refs[i].Namespace, refs[i].Queue)
		if sp == nil {
			continue
		}
		errs[i] = e.Ack(ctx, refs[i].Namespace, sp.names[0], refs[i].ID, "")
	}
}

// consumeOp is one coalesced consume: the request and the jobs it got.
type consumeOp struct {
	req  *engine.ConsumeRequest
	jobs []*engine.Job
}

// consumeCoalesced runs coalesced consumes (same namespace, queues and TTR)
// as one: each gets at most its count, in the order they queued.
func (e *Engine) consumeCoalesced(ctx context.Context, batch []*batchCall[consumeOp]) {
	want := make([]int, len(batch))
	out := make([][]*engine.Job, len(batch))
	for i, c := range batch {
		want[i] = c.in.req.Count
	}
	err := e.consumeFor(ctx, batch[0].in.req, want, out)
	for i, c := range batch {
		c.in.jobs, c.err = out[i], err
	}
}

// consumeFor runs the consume script for consumers of req's queues and TTR
// that want want[i] jobs each, and puts each one's jobs in out[i]. It loops
// only while stale entries used up the pop budget of a call. When the
// script leaves the queues empty, waiters learns it (waiters.go).
//
// On a cluster, one call touches one slot group: a consume over queues of
// several groups runs one call per run of consecutive queues of a group,
// in the queues' priority order, until the consumers have their jobs. A
// group whose call fails (its master is down, or the retries of a slot
// move ran out) is passed over: the consume goes on with the next
// groups, and fails only when it gathered no job, so that one master's
// failover does not stop the consumers of queues on the others, nor hold
// back (until their TTR) jobs already taken from an earlier group.
func (e *Engine) consumeFor(ctx context.Context, req *engine.ConsumeRequest, want []int, out [][]*engine.Job) error {
	marks := e.waiters.mark(req.Namespace, req.Queues)
	names := make([]*queueNames, len(req.Queues))
	for i, q := range req.Queues {
		names[i] = e.names.get([3]string{req.Namespace, q})
	}
	total := 0
	for _, w := range want {
		total += w
	}
	next, got := 0, 0 // the consumer served next, jobs handed out
	now := e.now()
	allEmpty := true
	var failed error // the first group's error (cluster)
	for lo := 0; lo < len(names); {
		hi := len(names)
		if e.cluster {
			for hi = lo + 1; hi < len(names) && names[hi].group == names[lo].group; hi++ {
			}
		}
		empty, err := e.consumeRun(ctx, req, names, lo, hi, total, &got, &next, want, out)
		if err != nil {
			if !e.cluster || ctx.Err() != nil {
				return err
			}
			if failed == nil {
				failed = err
			}
			empty = false
		}
		allEmpty = allEmpty && empty
		if got >= total && hi < len(names) {
			allEmpty = false // the queues after hi were not looked at
			break
		}
		lo = hi
	}
	if failed != nil && got == 0 {
		return failed
	}
	if failed != nil {
		e.log.WithError(failed).Debug("consume: a slot group failed; jobs of the others handed out")
	}
	if allEmpty {
		e.waiters.sawEmpty(marks)
	}
	for _, jobs := range out {
		e.metrics.consumed(req.Namespace, jobs, now)
		e.histConsumed(req.Namespace, jobs, now)
	}
	return nil
}

// consumeRun runs the consume script over req's queues lo..hi-1 (one slot
// group on a cluster) until the consumers have total jobs, the queues are
// empty, or a call found nothing; it reports whether the queues are empty.
func (e *Engine) consumeRun(ctx context.Context, req *engine.ConsumeRequest, names []*queueNames, lo, hi, total int, got, next *int, want []int, out [][]*engine.Job) (bool, error) {
	n := hi - lo
	keys := make([]string, 6*n)
	args := make([]interface{}, 7+2*n)
	for i, qn := range names[lo:hi] {
		k := keys[6*i : 6*i+6]
		k[0], k[1], k[2], k[3], k[4], k[5] = qn.ready, qn.timer, qn.prio, qn.config, qn.index, qn.jobPrefix
		args[5+2*i], args[6+2*i] = qn.argMember, qn.argWake
	}
	args[2] = consumeScanBudget
	args[3] = e.pub
	for {
		due := ceilMS(e.now()) + durMS(req.TTR)
		args[0] = due
		args[1] = total - *got
		args[4] = newReceiptBase()
		args[5+2*n] = due - durMS(req.TTR)
		args[6+2*n] = req.Worker
		res, err := e.runScript(ctx, consumeScript, keys, args...).Slice()
		if err != nil {
			return false, fmt.Errorf("consume %s/%v: %w", req.Namespace, req.Queues, err)
		}
		more, empty, earliest, popped, jobs, err := e.decodeConsumed(req, lo, n, res, due)
		if err != nil {
			return false, err
		}
		e.metrics.popped(popped)
		for _, j := range jobs {
			for len(out[*next]) >= want[*next] {
				*next++
			}
			out[*next] = append(out[*next], j)
		}
		*got += len(jobs)
		if earliest > 0 {
			e.wakePump()
		}
		if !more || *got >= total {
			return empty, nil
		}
	}
}

// decodeConsumed decodes the reply of a consume call over the n queues of
// req from lo.
func (e *Engine) decodeConsumed(req *engine.ConsumeRequest, lo, n int, res []interface{}, due int64) (more, empty bool, earliest, popped int64, jobs []*engine.Job, err error) {
	const head, per = 3, 9
	if len(res) < head || (len(res)-head)%per != 0 {
		return false, false, 0, 0, nil, fmt.Errorf("consume: unexpected reply of %d items", len(res))
	}
	m, _ := res[0].(int64)
	earliest, _ = res[1].(int64)
	popped, _ = res[2].(int64)
	for i := head; i < len(res); i += per {
		pos, _ := res[i].(int64)
		id, _ := res[i+1].(string)
		left, _ := res[i+2].(int64)
		payload, _ := res[i+3].(string)
		pttl, _ := res[i+4].(int64)
		deliv, _ := res[i+5].(int64)
		nonce, _ := res[i+6].(string)
		prio, _ := res[i+7].(int64)
		format, _ := res[i+8].(int64)
		if pos < 1 || int(pos) > n {
			return false, false, 0, 0, nil, fmt.Errorf("consume: bad queue position %d", pos)
		}
		j, err := makeJob(req.Namespace, req.Queues[lo+int(pos)-1], id, byte(format), []byte(payload), pttl)
		if err != nil {
			e.log.WithError(err).WithField("job_id", id).Error("consume: undecodable job body")
			continue
		}
		j.Tries = uint16(left)
		j.State = engine.StateInFlight
		j.Deliveries = int(deliv)
		j.Priority = int(prio)
		j.Receipt = hex.EncodeToString([]byte(nonce))
		j.DueAt = time.UnixMilli(due)
		jobs = append(jobs, j)
	}
	// 3: limited (at an in-flight limit): nothing for now, as an empty
	// queue; the ACK or release that frees a slot wakes the waiters.
	return m == 1, m == 2 || m == 3, earliest, popped, jobs, nil
}

// newReceiptBase returns a random number in [0, 2^32): the consume script
// adds the job's position in its reply and appends the delivery's start
// to make each delivery's 8-byte receipt (consumeScript).
func newReceiptBase() uint32 { return rand.Uint32() }

// makeJob decodes a job from what follows its header: its trace context
// (by format, header byte 1) and its payload.
func makeJob(ns, q, id string, format byte, rest []byte, pttl int64) (*engine.Job, error) {
	g, format, rest, err := splitGroup(format, rest)
	if err != nil {
		return nil, err
	}
	tp, ts, payload, err := splitTrace(format, rest)
	if err != nil {
		return nil, err
	}
	body, attrs, err := decodePayload(engine.JobIDVersion(id), payload)
	if err != nil {
		return nil, err
	}
	var ttl time.Duration
	if pttl > 0 {
		ttl = time.Duration(pttl) * time.Millisecond
	}
	return &engine.Job{Namespace: ns, Queue: logicalQueue(q), ID: id, Body: body, TTL: ttl, Attributes: attrs,
		TraceParent: tp, TraceState: ts, Group: g}, nil
}

// makeStoredJob decodes a stored value (header + payload); now decides
// whether a delayed job is already due (ready).
func makeStoredJob(ns, q, id string, value []byte, pttl int64, now time.Time) (*engine.Job, error) {
	h, payload, err := splitValue(value)
	if err != nil {
		return nil, err
	}
	j, err := makeJob(ns, q, id, h.format, payload, pttl)
	if err != nil {
		return nil, err
	}
	h.apply(j, now)
	return j, nil
}

// Delete implements engine.Engine: the ACK. Like lmstfy it deletes the job
// whatever its state; unlike lmstfy it also drops the job's timer entry.
func (e *Engine) Delete(ctx context.Context, ns, q, id string) error {
	return e.Ack(ctx, ns, q, id, "")
}

// PeekQueue implements engine.Engine.
func (e *Engine) PeekQueue(ctx context.Context, ns, q string) (*engine.Job, error) {
	if err := checkNames(ns, q); err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.peekQueueSharded(ctx, sp, ns, q)
	}
	qn := e.names.get([3]string{ns, q})
	res, err := e.run(ctx, peekQueueScript, []string{qn.ready, qn.prio, qn.jobPrefix}, peekScanBudget).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("peek %s/%s: %w", ns, q, engine.ErrQueueEmpty)
	}
	if err != nil {
		return nil, fmt.Errorf("peek %s/%s: %w", ns, q, err)
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("peek %s/%s: unexpected reply", ns, q)
	}
	id, _ := res[0].(string)
	value, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	e.metrics.peeked()
	return makeStoredJob(ns, q, id, []byte(value), pttl, e.now())
}

// PeekJob implements engine.Engine: the job in any state, with its state,
// tries left and due time.
func (e *Engine) PeekJob(ctx context.Context, ns, q, id string) (*engine.Job, error) {
	if err := checkNames(ns, q); err != nil {
		return nil, fmt.Errorf("peek job: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return byID(sp, id, func(n string) (*engine.Job, error) { return e.PeekJob(ctx, ns, n, id) })
	}
	res, err := e.run(ctx, peekJobScript, []string{e.names.get([3]string{ns, q}).jobPrefix + id}).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("peek job %s/%s/%s: %w", ns, q, id, engine.ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("peek job %s/%s/%s: %w", ns, q, id, err)
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("peek job %s/%s/%s: unexpected reply", ns, q, id)
	}
	value, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	e.metrics.peeked()
	j, err := makeStoredJob(ns, q, id, []byte(value), pttl, e.now())
	if err != nil {
		return nil, err
	}
	hist, _ := res[2].([]interface{})
	j.Attempts = make([]engine.Attempt, 0, len(hist)+1)
	if a, ok := currentDelivery(j, value, e.now()); ok && !(len(hist) > 0 && strings.HasPrefix(fmt.Sprint(hist[0]), "f|"+strconv.Itoa(j.Deliveries)+"|")) {
		j.Attempts = append(j.Attempts, a)
	}
	for _, h := range hist {
		s, _ := h.(string)
		if a, ok := parseAttempt(s); ok {
			j.Attempts = append(j.Attempts, a)
			if j.LastError == "" {
				j.LastError = a.Error
			}
		}
	}
	if len(j.Attempts) > engine.MaxAttempts {
		j.Attempts = j.Attempts[:engine.MaxAttempts]
	}
	return j, nil
}

// Size implements engine.Engine: the queue's ready jobs, not counting the
// entries of jobs that are gone (expired or deleted) at its consume end.
// Entries of gone jobs stranded behind live ones count until the reclaimer
// (reclaim.go) removes them.
func (e *Engine) Size(ctx context.Context, ns, q string) (int64, error) {
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.sizeSharded(ctx, sp, ns, q)
	}
	qn := e.names.get([3]string{ns, q})
	n, err := e.run(ctx, sizeScript, []string{qn.ready, qn.prio, qn.jobPrefix, qn.config}, sizeScanBudget).Int64()
	if err != nil {
		return 0, fmt.Errorf("size %s/%s: %w", ns, q, err)
	}
	return n, nil
}

// Destroy implements engine.Engine.
func (e *Engine) Destroy(ctx context.Context, ns, q string) (int64, error) {
	if err := checkNames(ns, q); err != nil {
		return 0, fmt.Errorf("destroy: %w", err)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.destroySharded(ctx, sp, ns, q)
	}
	qn := e.names.get([3]string{ns, q})
	keys := []string{qn.ready, qn.timer, qn.index, qn.prio, qn.jobPrefix, qn.usage, qn.config}
	var total int64
	for {
		n, err := e.run(ctx, destroyScript, keys, destroyBatch, qn.member).Int64()
		if err != nil {
			return total, fmt.Errorf("destroy %s/%s: %w", ns, q, err)
		}
		total += n
		if n < destroyBatch {
			break
		}
	}
	if err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.HDel(ctx, qn.registry, qn.member) }).Err(); err != nil {
		return total, fmt.Errorf("destroy %s/%s: %w", ns, q, err)
	}
	qn.recorded.Store(false)
	return total, nil
}

// PeekDeadLetter implements engine.Engine.
func (e *Engine) PeekDeadLetter(ctx context.Context, ns, q string) (engine.DeadLetter, error) {
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.peekDeadLetterSharded(ctx, sp, ns, q)
	}
	var size *redis.IntCmd
	var head *redis.StringCmd
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		size = p.LLen(ctx, deadKey(ns, q))
		head = p.LIndex(ctx, deadKey(ns, q), -1)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return engine.DeadLetter{}, fmt.Errorf("peek dead letter %s/%s: %w", ns, q, err)
	}
	dl := engine.DeadLetter{Size: size.Val()}
	if h := head.Val(); h != "" {
		_, id, err := unpackEntry(h)
		if err != nil {
			return dl, fmt.Errorf("peek dead letter %s/%s: %w", ns, q, err)
		}
		dl.Head = id
	}
	return dl, nil
}

// DeadLetterSize implements engine.Engine.
func (e *Engine) DeadLetterSize(ctx context.Context, ns, q string) (int64, error) {
	if sp := e.shardsOf(ns, q); sp != nil {
		return e.deadLetterSizeSharded(ctx, sp, ns, q)
	}
	n, err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.LLen(ctx, deadKey(ns, q)) }).Result()
	if err != nil {
		return 0, fmt.Errorf("dead letter size %s/%s: %w", ns, q, err)
	}
	return n, nil
}

// RespawnDeadLetter implements engine.Engine.
func (e *Engine) RespawnDeadLetter(ctx context.Context, ns, q string, limit int64, ttl time.Duration) (int64, error) {
	if err := checkNames(ns, q); err != nil {
		return 0, fmt.Errorf("respawn: %w", err)
	}
	if limit <= 0 || ttl < 0 {
		return 0, fmt.Errorf("respawn: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return limitShards(sp, limit, func(n string, limit int64) (int64, error) { return e.RespawnDeadLetter(ctx, ns, n, limit, ttl) })
	}
	keys := []string{deadKey(ns, q), readyKey(ns, q), prioKey(ns, q), configKey(ns, q), jobKeyPrefix(ns, q)}
	var total int64
	for total < limit {
		want := limit - total
		if want > deadBatch {
			want = deadBatch
		}
		res, err := e.run(ctx, respawnScript, keys, want, durMS(ttl), e.pub, readyChannel(ns, q), deadBatch).Int64Slice()
		if err != nil {
			return total, fmt.Errorf("respawn %s/%s: %w", ns, q, err)
		}
		e.metrics.respawned(res[0])
		total += res[0]
		if res[1] == 1 {
			break
		}
	}
	return total, nil
}

// DeleteDeadLetter implements engine.Engine.
func (e *Engine) DeleteDeadLetter(ctx context.Context, ns, q string, limit int64) (int64, error) {
	if err := checkNames(ns, q); err != nil {
		return 0, fmt.Errorf("delete dead letter: %w", err)
	}
	if limit <= 0 {
		return 0, fmt.Errorf("delete dead letter: %w", engine.ErrInvalid)
	}
	if sp := e.shardsOf(ns, q); sp != nil {
		return limitShards(sp, limit, func(n string, limit int64) (int64, error) { return e.DeleteDeadLetter(ctx, ns, n, limit) })
	}
	var total int64
	for total < limit {
		want := limit - total
		if want > deadBatch {
			want = deadBatch
		}
		n, err := e.run(ctx, deleteDeadScript, []string{deadKey(ns, q), jobKeyPrefix(ns, q), usageKey(slotGroup(ns, q))}, want).Int64()
		if err != nil {
			return total, fmt.Errorf("delete dead letter %s/%s: %w", ns, q, err)
		}
		total += n
		if n < want {
			break
		}
	}
	return total, nil
}

// Info implements engine.Engine: the queues of the groups' registries
// (one HKEYS per group, in one pipeline: one round trip per node), a
// sharded queue once, under its own name.
func (e *Engine) Info(ctx context.Context) (map[string][]string, error) {
	out, err := e.physicalQueues(ctx)
	if err != nil {
		return nil, err
	}
	for ns, qs := range out {
		out[ns] = logicalQueues(qs)
	}
	return out, nil
}

// physicalQueues returns the queues of the groups' registries, the shards
// of sharded queues each on its own ("q~i"; shard 0 is "q").
func (e *Engine) physicalQueues(ctx context.Context) (map[string][]string, error) {
	cmds := make([]*redis.StringSliceCmd, slotGroups)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := range cmds {
			cmds[g] = p.HKeys(ctx, registryKey(g))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("info: %w", err)
	}
	out := make(map[string][]string)
	for _, c := range cmds {
		for _, m := range c.Val() {
			ns, q, ok := strings.Cut(m, "/")
			if !ok {
				continue
			}
			out[ns] = append(out[ns], q)
		}
	}
	for _, qs := range out {
		slices.Sort(qs)
	}
	return out, nil
}

// Stats returns the sizes of every queue this pool knows, and when its
// ready head became ready, for metrics: per namespace, one pipeline of
// plain commands for the sizes, then one of readyHeadsScript for the
// queues that have ready jobs (about 8 µs of Redis time each, against
// 0.25 µs per size command), so that idle queues cost what they did. A
// sharded queue's sizes are summed over its shards, its OldestReady the
// earliest of theirs.
func (e *Engine) Stats(ctx context.Context) ([]engine.QueueStats, error) {
	info, err := e.physicalQueues(ctx)
	if err != nil {
		return nil, err
	}
	var out []engine.QueueStats
	for ns, qs := range info {
		cmds := make([][4]*redis.IntCmd, len(qs))
		grouped := make([]*redis.SliceCmd, len(qs)) // the entries of the queue's groups (groups_scripts.go); HMGET: no redis.Nil
		_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range qs {
				cmds[i] = [4]*redis.IntCmd{p.LLen(ctx, readyKey(ns, q)), p.ZCard(ctx, timerKey(ns, q)), p.LLen(ctx, deadKey(ns, q)), p.ZCard(ctx, prioKey(ns, q))}
				grouped[i] = p.HMGet(ctx, configKey(ns, q), "gn")
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("stats %s: %w", ns, err)
		}
		stats := make([]engine.QueueStats, len(qs))
		var ready []int // indexes of the queues with ready jobs
		for i, q := range qs {
			var gn int64
			if v := grouped[i].Val(); len(v) == 1 {
				if s, ok := v[0].(string); ok {
					gn, _ = strconv.ParseInt(s, 10, 64)
				}
			}
			stats[i] = engine.QueueStats{Namespace: ns, Queue: q, Ready: cmds[i][0].Val() + cmds[i][3].Val() + gn, Timer: cmds[i][1].Val(), DeadLetter: cmds[i][2].Val()}
			if stats[i].Ready > 0 {
				ready = append(ready, i)
			}
		}
		if err := e.readyHeads(ctx, ns, stats, ready); err != nil {
			return nil, err
		}
		at := map[string]int{} // a sharded queue's place in out
		for _, st := range stats {
			st.Queue = logicalQueue(st.Queue)
			if k, ok := at[st.Queue]; ok {
				o := &out[k]
				o.Ready += st.Ready
				o.Timer += st.Timer
				o.DeadLetter += st.DeadLetter
				if !st.OldestReady.IsZero() && (o.OldestReady.IsZero() || st.OldestReady.Before(o.OldestReady)) {
					o.OldestReady = st.OldestReady
				}
				continue
			}
			at[st.Queue] = len(out)
			out = append(out, st)
		}
	}
	return out, nil
}

// readyHeads sets the OldestReady of stats[i] (physical queues of ns) for
// each i of which: one readyHeadsScript each, in one pipeline.
func (e *Engine) readyHeads(ctx context.Context, ns string, stats []engine.QueueStats, which []int) error {
	if len(which) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(which))
	run := func() error {
		_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for k, i := range which {
				q := stats[i].Queue
				cmds[k] = readyHeadsScript.EvalSha(ctx, p, []string{readyKey(ns, q), prioKey(ns, q), jobKeyPrefix(ns, q)})
			}
			return nil
		})
		return err
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The Redis lost its scripts (restarted, SCRIPT FLUSH): load and
		// try once more.
		if err = readyHeadsScript.Load(ctx, e.rdb).Err(); err == nil {
			err = run()
		}
	}
	if err != nil {
		return fmt.Errorf("stats %s: ready heads: %w", ns, err)
	}
	for k, i := range which {
		res, err := cmds[k].Slice()
		if err != nil || len(res) < 2 {
			return fmt.Errorf("stats %s/%s: unexpected reply %v: %v", ns, stats[i].Queue, res, err)
		}
		for _, v := range res {
			id, _ := v.(string)
			if t, ok := readySince(id); ok && (stats[i].OldestReady.IsZero() || t.Before(stats[i].OldestReady)) {
				stats[i].OldestReady = t
			}
		}
	}
	return nil
}

// Pool returns the pool's name.
func (e *Engine) Pool() string { return e.pool }

// publishMsg publishes a Pub/Sub message outside a script: SPUBLISH on a
// cluster, so that it stays on the node of the channel's slot.
func (e *Engine) publishMsg(ctx context.Context, channel string, msg interface{}) error {
	if e.cluster {
		return retried(ctx, e, func() *redis.IntCmd { return e.rdb.SPublish(ctx, channel, msg) }).Err()
	}
	return e.rdb.Publish(ctx, channel, msg).Err()
}
