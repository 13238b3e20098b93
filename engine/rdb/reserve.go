package rdb

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// The memory reserve of a pool (issue #31): the last Options.MemoryReserve
// of each Redis node's maxmemory is kept for the namespaces holding less
// than their share, so that the namespace that fills a pool is refused
// first and the others keep publishing (doc/config.md, "The memory
// reserve").
//
// Every engine polls each master of its pool for INFO memory every
// memoryPollEvery (one small command per node; every memoryPollIdle while
// no master has a maxmemory). A node whose used memory
// (as Redis counts it against maxmemory) is at least (1 − reserve) ×
// maxmemory is in its reserve: a publish to a queue of that node's slot
// groups from a namespace holding at least its share is refused before
// its script runs, with the 507 of a full pool (engine.PoolFullError,
// Reserve set); the other namespaces publish into the reserve until Redis
// itself refuses (OOM, the same 507). A node without maxmemory, or with an
// evicting policy (Redis evicts rather than refuses), has no reserve.
//
// Between two polls an engine adds what it publishes to the node's last
// figure (each job's body plus jobOverhead, scaled by what the node grew
// per such byte), so that a fast publisher meets the threshold within a
// few jobs of it rather than a poll late; what other servers publish
// meanwhile is seen at the next poll. So that this estimate never runs
// far on counted bytes alone (on a loaded machine a poll may come late,
// and a fast namespace fills a small reserve within one poll interval),
// a publish that takes it past half the room left at the last poll asks
// for a poll at once (the node's wake point): polls come closer as the
// node fills.
//
// A namespace's share, on a node: the namespaces weigh their stored bytes
// in the node's slot groups (the engine's usage counts, tenancy.go) plus
// jobOverhead per job, and a namespace holding jobs there holds at least
// its share when it weighs at least the average of those holding jobs
// there (their weight divided by their number). The heaviest namespace
// always does, so a node in its reserve always refuses someone; a
// namespace with no job never does. On one Redis the node's groups are
// all 64 (the pool's usage); on a cluster each master's share is among
// the namespaces holding jobs on it, so that the namespace that filled a
// master is refused there even when others hold more on other masters.
// The usage is read at each poll while a node is within twice its
// reserve of maxmemory (or two poll intervals of its last growth) and,
// once read, until it is four reserves below; not otherwise. A publish
// that finds a node in its reserve before the usage was read asks for a
// poll at once and waits for it (memoryWaitMax at most): nobody is let
// into the reserve, nor refused, on a guess.

const (
	// memoryPollEvery is how often an engine reads INFO memory from each
	// master of its pool.
	memoryPollEvery = 250 * time.Millisecond
	// memoryPollIdle is how often it reads it while no master has a
	// maxmemory under noeviction (no reserve): a limit set later
	// (CONFIG SET) applies within it.
	memoryPollIdle = 2 * time.Second
	// memoryPollMin is the least time between two polls.
	memoryPollMin = 25 * time.Millisecond
	// memoryPollTimeout bounds one poll (INFO memory of every master,
	// then the usage): well beyond a poll interval, so that a loaded
	// machine, on which a reply may take a few hundred milliseconds, still
	// gets its figures rather than keep stale ones.
	memoryPollTimeout = 2 * time.Second
	// memoryWaitMax bounds how long a publish meeting a node in its
	// reserve before the usage was read there waits for a poll that reads
	// it; it is then admitted.
	memoryWaitMax = time.Second
	// scaleUnknown is a node's scale until a poll measured it: what Redis
	// grows by per byte counted is about 1.25 for 4 KB bodies (allocator
	// size classes) and more for small ones; counting more until it is
	// measured makes the first polls come early rather than late.
	scaleUnknown = 2 << 10
	// jobOverhead estimates what a stored job costs Redis beyond its body
	// (its key, its queue or timer entry, allocator rounding), in bytes.
	jobOverhead = 256
)

// errInReserve is the cause of a publish refused by the reserve.
var errInReserve = errors.New("rdb: the node is in its memory reserve and the namespace holds at least its share")

// memNode is one Redis node's memory as the engine last saw it.
type memNode struct {
	addr      string
	max       atomic.Int64 // maxmemory; 0: no reserve (none, or an evicting policy)
	threshold atomic.Int64 // (1 − reserve) × max
	used      atomic.Int64 // used memory counted against maxmemory, at the last poll
	pending   atomic.Int64 // bytes published through this engine since that poll
	refused   atomic.Int64 // when this engine last refused a publish for the reserve (Unix ns)
	// scale is what Redis's memory grew by per pending byte over the last
	// poll interval, ×1024 (1024 to 4096): a job costs more than its body
	// and jobOverhead (allocator size classes), and other servers publish
	// too.
	scale atomic.Int64
	// wakeAt is the estimate at which a publish asks for a poll at once:
	// half way from the estimate at the last poll to the threshold, so
	// that polls come closer together as the node nears its reserve and
	// the estimate never runs far on pending bytes alone; the threshold
	// itself once the node is within reserve/16 of it or in it.
	wakeAt atomic.Int64
	// growth is how much the memory grew over the last poll interval.
	growth atomic.Int64
	polled bool // the node was read once (its used is a figure to grow from)
}

// estimate is the node's memory now, as far as this engine knows.
func (n *memNode) estimate() int64 { return n.used.Load() + n.pending.Load()*n.scale.Load()>>10 }

// memState is the result of one poll: immutable but for the nodes'
// counters.
type memState struct {
	group [slotGroups]*memNode // each slot group's node; nil: no reserve
	nodes []*memNode
	// heavy are, for each slot group, the namespaces holding at least
	// their share on the group's node (usage read at this poll; nil when
	// no node was near its reserve, or the group has none).
	heavy [slotGroups]map[string]bool
	// known: heavy holds figures (read at this poll, or kept from an
	// earlier one when this poll's read failed).
	known bool
	// usageFailed: this poll could not read the usage and no earlier
	// figures stand; publishes in the reserve are admitted rather than
	// wait for it.
	usageFailed bool
	// next is closed when a poll replaces this state: a publish waiting
	// for the usage waits on it.
	next chan struct{}
}

// reserve is an engine's view of its pool's memory.
type reserve struct {
	frac  float64
	state atomic.Pointer[memState]
	// usage returns every namespace's usage in each slot group (the
	// engine's counts, tenancy.go).
	usage func(ctx context.Context) ([slotGroups]map[string]engine.Usage, error)

	// wake asks for a poll before the next tick.
	wake chan struct{}
	// waitMax is memoryWaitMax (a test waits longer).
	waitMax time.Duration

	mu    sync.Mutex
	nodes map[string]*memNode // by address ("" on a single Redis)
	warn  string              // the last poll problem logged
}

// newReserve returns the reserve of a pool keeping frac of maxmemory, or
// nil when frac is 0 (no reserve).
func newReserve(e *Engine, frac float64) *reserve {
	if frac <= 0 {
		return nil
	}
	return &reserve{frac: frac, nodes: make(map[string]*memNode), wake: make(chan struct{}, 1), waitMax: memoryWaitMax, usage: e.usageByGroup}
}

// runReserve polls the pool's memory until ctx is done.
func (e *Engine) runReserve(ctx context.Context) {
	if e.reserve == nil {
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.reserve.wake:
			t.Stop()
			// Publishes wake it while the usage is unknown: at most one
			// poll per memoryPollMin however many.
			if d := memoryPollMin - time.Since(last); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		last = time.Now()
		e.pollMemory(ctx)
		every := memoryPollEvery
		if e.reserve.state.Load() == nil {
			every = memoryPollIdle // no node has a maxmemory to keep a reserve of
		}
		t.Reset(every)
	}
}

// wakeUp asks for a poll now.
func (r *reserve) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pollMemory reads INFO memory from every master of the pool and, when a
// node is near its reserve, every namespace's usage; then publishes the
// new state.
func (e *Engine) pollMemory(ctx context.Context) {
	r := e.reserve
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, memoryPollTimeout)
	defer cancel()
	type polled struct {
		addr string
		c    redis.UniversalClient
	}
	var masters []polled
	cc, cluster := e.rdb.(*redis.ClusterClient)
	if cluster {
		var mu sync.Mutex
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			masters = append(masters, polled{c.Options().Addr, c})
			mu.Unlock()
			return nil
		})
	} else {
		masters = []polled{{"", e.rdb}}
	}
	st := &memState{next: make(chan struct{})}
	prev := r.state.Load()
	byAddr := make(map[string]*memNode, len(masters))
	var wg sync.WaitGroup
	var problem atomic.Pointer[string]
	for _, m := range masters {
		n := r.node(m.addr)
		byAddr[m.addr] = n
		st.nodes = append(st.nodes, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// What this engine published until now is in the figure read
			// below, and taken off pending once it is stored (what it
			// publishes during the call is counted twice until the next
			// poll: the safe side). Until then the estimate still counts
			// it: a reply that takes long does not let it drop.
			pending := n.pending.Load()
			info, err := m.c.Info(ctx, "memory").Result()
			if err != nil {
				msg := "read INFO memory of node " + m.addr + ": " + err.Error()
				problem.Store(&msg)
				return
			}
			used, max := memoryFigures(info)
			n.calibrate(used, pending)
			threshold := int64(float64(max) * (1 - r.frac))
			n.max.Store(max)
			n.threshold.Store(threshold)
			n.used.Store(used)
			n.pending.Add(-pending)
			wakeAt := threshold
			if room := threshold - n.estimate(); room > (max-threshold)/16 {
				wakeAt -= room / 2
			}
			n.wakeAt.Store(wakeAt)
		}()
	}
	wg.Wait()
	msg := "" // this poll's problem: "" lets the next one be logged, even the same again
	if p := problem.Load(); p != nil {
		msg = *p
	}
	near, reserved := false, false
	for g := range st.group {
		var n *memNode
		if cluster {
			c, err := cc.MasterForKey(ctx, timerIndexKey(g))
			if err != nil {
				continue
			}
			n = byAddr[c.Options().Addr]
		} else {
			n = byAddr[""]
		}
		if n == nil || n.max.Load() <= 0 {
			continue
		}
		st.group[g], reserved = n, true
		// Usage is read from twice the reserve below maxmemory on, and
		// earlier when two intervals at the last growth would get there;
		// once read, until the node is four reserves below maxmemory (a
		// poll interval of slow growth must not drop it).
		max, est := n.max.Load(), n.estimate()
		res := max - n.threshold.Load()
		if est+2*n.growth.Load() >= max-2*res || prev != nil && prev.heavy[g] != nil && est >= max-4*res {
			near = true
		}
	}
	if near {
		per, err := r.usage(ctx)
		if err == nil {
			st.heavy, st.known = heavyByNode(&st.group, &per), true
		} else {
			msg = "read the namespaces' usage: " + err.Error()
			if prev != nil && prev.known {
				// Keep the last figures rather than let everyone in.
				st.heavy, st.known = prev.heavy, true
			} else {
				st.usageFailed = true
			}
		}
	}
	if parent.Err() == nil { // not stopping: a poll that timed out is logged
		r.logOnce(e, msg)
	}
	if !reserved {
		st = nil // no node has a reserve: publishes skip the check
	}
	if old := r.state.Swap(st); old != nil && old.next != nil {
		close(old.next) // publishes waiting for the usage look again
	}
}

// calibrate sets the node's growth and scale from a poll that read used
// after this engine published pending bytes since the previous one.
func (n *memNode) calibrate(used, pending int64) {
	prev, polled := n.used.Load(), n.polled
	n.polled = true
	if !polled || used <= prev {
		n.growth.Store(0)
		return
	}
	n.growth.Store(used - prev)
	if pending >= 64<<10 {
		n.scale.Store(min(max((used-prev)<<10/pending, 1<<10), 4<<10))
	}
}

// node returns the memNode of addr, the same across polls (its pending
// bytes carry over).
func (r *reserve) node(addr string) *memNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[addr]
	if n == nil {
		n = &memNode{addr: addr}
		n.scale.Store(scaleUnknown)
		r.nodes[addr] = n
	}
	return n
}

// logOnce logs a poll problem, not again while it stays the same.
func (r *reserve) logOnce(e *Engine, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg != r.warn {
		r.warn = msg
		if msg == "" {
			return
		}
		e.log.Warn("memory reserve: " + msg + " (the last figures stand)")
	}
}

// memoryFigures reads INFO memory: the memory Redis counts against
// maxmemory (used_memory less what it does not count for eviction), and
// maxmemory, 0 when there is no limit or the policy evicts (no reserve).
func memoryFigures(info string) (used, max int64) {
	var notCounted int64
	var policy string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			used, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory":
			max, _ = strconv.ParseInt(v, 10, 64)
		case "mem_not_counted_for_evict":
			notCounted, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			policy = v
		}
	}
	if policy != "noeviction" || max < 0 {
		max = 0
	}
	return used - notCounted, max
}

// weight is what a namespace's usage weighs against the others'.
func weight(u engine.Usage) int64 { return u.Bytes + u.Jobs*jobOverhead }

// heavyByNode returns, for each slot group with a node in group, the
// namespaces holding at least their share on that node: heavyNamespaces
// of their usage summed over the node's groups (per).
func heavyByNode(group *[slotGroups]*memNode, per *[slotGroups]map[string]engine.Usage) (heavy [slotGroups]map[string]bool) {
	byNode := make(map[*memNode]map[string]engine.Usage)
	for g, n := range group {
		if n == nil {
			continue
		}
		sum := byNode[n]
		if sum == nil {
			sum = make(map[string]engine.Usage)
			byNode[n] = sum
		}
		for ns, u := range per[g] {
			t := sum[ns]
			t.Jobs += u.Jobs
			t.Bytes += u.Bytes
			sum[ns] = t
		}
	}
	of := make(map[*memNode]map[string]bool, len(byNode))
	for n, sum := range byNode {
		of[n] = heavyNamespaces(sum)
	}
	for g, n := range group {
		if n != nil {
			heavy[g] = of[n]
		}
	}
	return heavy
}

// heavyNamespaces returns the namespaces holding at least their share:
// those holding jobs whose weight is at least the average weight of the
// namespaces holding jobs.
func heavyNamespaces(all map[string]engine.Usage) map[string]bool {
	var total, holders int64
	for _, u := range all {
		if u.Jobs > 0 {
			total += weight(u)
			holders++
		}
	}
	heavy := make(map[string]bool)
	for ns, u := range all {
		if u.Jobs > 0 && weight(u)*holders >= total {
			heavy[ns] = true
		}
	}
	return heavy
}

// admitMemory refuses a publish of jobs weighing bytes into queue ns/q
// when its node is in its reserve and ns holds at least its share (a
// *engine.PoolFullError whose Reserve is set); otherwise it counts the
// bytes as pending on the node and returns nil. It runs on every publish:
// below the node's wake point it costs a few atomic operations.
func (e *Engine) admitMemory(ns, q string, bytes int64) error {
	if e.reserve == nil {
		return nil
	}
	st := e.reserve.state.Load()
	if st == nil {
		return nil
	}
	g := slotGroup(ns, q)
	n := st.group[g]
	if n == nil {
		return nil
	}
	if n.used.Load()+n.pending.Add(bytes)*n.scale.Load()>>10 < n.wakeAt.Load() {
		return nil
	}
	return e.admitNear(st, g, n, ns, bytes)
}

// admitNear is admitMemory past the node's wake point, bytes counted as
// pending: below the threshold the publish is admitted and a poll asked
// for; in the reserve the namespaces holding at least their share are
// refused, and while the usage is not known there (not read at the last
// poll) the publish waits, its bytes not counted, for a poll that reads
// it (at most memoryWaitMax, then it is admitted): nobody is let in, nor
// refused, on a guess.
func (e *Engine) admitNear(st *memState, g int, n *memNode, ns string, bytes int64) error {
	r := e.reserve
	var wait *time.Timer
	for {
		threshold := n.threshold.Load()
		if n.estimate() < threshold {
			if w := n.wakeAt.Load(); w < threshold && n.wakeAt.CompareAndSwap(w, threshold) {
				r.wakeUp() // once per poll: the poll sets the next wake point
			}
			return nil
		}
		if st.known {
			if !st.heavy[g][ns] {
				return nil
			}
			n.pending.Add(-bytes)
			n.refused.Store(time.Now().UnixNano())
			return &engine.PoolFullError{Pool: e.pool, Reserve: true, Err: errInReserve}
		}
		// In the reserve before a poll read the usage: poll now.
		if st.usageFailed {
			r.wakeUp()
			return nil
		}
		n.pending.Add(-bytes)
		r.wakeUp()
		if wait == nil {
			wait = time.NewTimer(r.waitMax)
			defer wait.Stop()
		}
		select {
		case <-st.next:
		case <-wait.C:
			n.pending.Add(bytes)
			return nil
		}
		if st = r.state.Load(); st == nil {
			return nil
		}
		if n = st.group[g]; n == nil {
			return nil
		}
		n.pending.Add(bytes)
	}
}

// RefusesPublish implements engine.PublishRefuser: the refusal admitMemory
// would give any publish of ns into q now, without counting its bytes. It
// reads the same state as admitMemory (the last poll, and what this engine
// published since), so it refuses exactly what admitMemory would refuse a
// job of no body, until the next poll (memoryPollEvery) says otherwise; a
// namespace below its share, or a node below its threshold, is never
// refused here. A sharded queue is refused only when every shard's node
// would refuse it (admitMemory checks the shard a publish goes to).
func (e *Engine) RefusesPublish(ns, q string) error {
	if e.reserve == nil {
		return nil
	}
	st := e.reserve.state.Load()
	if st == nil {
		return nil
	}
	m := e.shards.m.Load() // as shardsOf, but never waits for a first read
	if m == nil {
		return nil // the shards unknown yet: the engine decides
	}
	var n *memNode
	if sp := m.specs[[2]string{ns, q}]; sp != nil {
		for _, name := range sp.names {
			if n = st.refusing(ns, name); n == nil {
				return nil
			}
		}
	} else if n = st.refusing(ns, q); n == nil {
		return nil
	}
	n.refused.Store(time.Now().UnixNano())
	return &engine.PoolFullError{Pool: e.pool, Reserve: true, Err: errInReserve}
}

// refusing returns the node of queue ns/q when admitMemory would refuse
// ns a publish there now (the node in its reserve, ns holding at least
// its share as the last poll read), else nil.
func (st *memState) refusing(ns, q string) *memNode {
	g := slotGroup(ns, q)
	n := st.group[g]
	if n == nil || !st.heavy[g][ns] || n.estimate() < n.threshold.Load() {
		return nil
	}
	return n
}

// jobBytes is what publishing r adds to a node, as admitMemory counts it.
func jobBytes(r *engine.PublishRequest) int64 { return int64(len(r.Body)) + jobOverhead }

// admitMemoryBatch runs admitMemory on each of batch's publishes: a
// refused one gets its error, and the others are returned (batch itself
// when none is refused).
func (e *Engine) admitMemoryBatch(batch []*batchCall[pubOp]) []*batchCall[pubOp] {
	if e.reserve == nil {
		return batch
	}
	var out []*batchCall[pubOp]
	refused := false
	for i, c := range batch {
		if err := e.admitMemory(c.in.req.Namespace, c.in.req.Queue, jobBytes(c.in.req)); err != nil {
			if !refused {
				out = append(make([]*batchCall[pubOp], 0, len(batch)), batch[:i]...)
				refused = true
			}
			c.err = err
			continue
		}
		if refused {
			out = append(out, c)
		}
	}
	if !refused {
		return batch
	}
	return out
}

// InReserve reports whether a node of the pool is in its memory reserve
// (as the last poll and this engine's publishes since say), or refused a
// publish for it within the last two polls: publishes of the namespaces
// holding at least their share are refused there. /readyz says "reserve"
// then.
func (e *Engine) InReserve() bool {
	if e.reserve == nil {
		return false
	}
	st := e.reserve.state.Load()
	if st == nil {
		return false
	}
	for _, n := range st.nodes {
		if n.max.Load() > 0 && (n.estimate() >= n.threshold.Load() || time.Since(time.Unix(0, n.refused.Load())) < 2*memoryPollEvery) {
			return true
		}
	}
	return false
}

// publishBytes is jobBytes summed over reqs.
func publishBytes(reqs []*engine.PublishRequest) int64 {
	var n int64
	for _, r := range reqs {
		n += jobBytes(r)
	}
	return n
}
