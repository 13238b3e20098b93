package rdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Hot-queue shards (issue #22 item 5; doc/scaling.md, doc/keys.md). A
// queue set to K shards (QueueConfig.Shards) is K physical queues: shard 0
// is the queue's own keys, shard i >= 1 the queue named "q~i" internally
// (user queue names have no '~'), in slot group (slotGroup(ns, q) +
// bitReverse6(i)) % 64, so that any first K shards spread over the groups
// and so over the masters of a cluster. The physical name "q~0" is shard 0
// itself: its keys, member and channel are q's (keyName); the exported
// methods route a logical name and act directly on a physical one.
//
// A job of shard i >= 1 carries i in its ID (engine.NewShardJobID): ACK,
// touch, release, peek job and the dead job operations go to that shard,
// and to shard 0 when the job is not there (jobs published before the
// queue was sharded, or with an ID of the caller's, are in shard 0).
//
// Which queues are sharded is the pool's shards hash (shardsKey), read by
// every engine at most shardRefresh ago (runShards), so that servers
// follow a change within about a second. Its span is the highest shard
// that may hold jobs, plus one: shrinking K leaves shards K..span-1
// draining (consumed, ACKable, counted, but published to no more) until
// runShards finds them empty, shardDrainGrace after the change.

// shardsKey is the pool's hash of sharded queues: field "ns/q" → "K span
// prevK changedMS" (shardSpec). Queues with 1 shard and span 1 have no
// field. Read by every engine once per shardRefresh; no script reads it.
const shardsKey = "shards"

const (
	// shardRefresh is how stale an engine's view of the shards hash may be.
	shardRefresh = 250 * time.Millisecond
	// shardDrainGrace is how long after a change of K an engine waits
	// before it lowers a queue's span: longer than any publish that read
	// the old K may take (a view shardRefresh old, a cluster retry of up
	// to ClusterRetry's default 5 s).
	shardDrainGrace = 15 * time.Second
)

// isShardName reports whether q is a physical shard name "q~i".
func isShardName(q string) bool { return strings.IndexByte(q, '~') >= 0 }

// splitShard splits a physical shard name "q~i" into q and i; a plain name
// is shard 0 of itself.
func splitShard(q string) (string, int) {
	k := strings.IndexByte(q, '~')
	if k < 0 {
		return q, 0
	}
	i, err := strconv.Atoi(q[k+1:])
	if err != nil || i < 0 || i >= engine.MaxShards {
		return q, 0
	}
	return q[:k], i
}

// keyName is the name q's keys carry: "q~0" is q.
func keyName(q string) string {
	if n := len(q); n > 2 && q[n-2] == '~' && q[n-1] == '0' {
		return q[:n-2]
	}
	return q
}

// logicalQueue is the queue a physical shard name belongs to.
func logicalQueue(q string) string {
	if k := strings.IndexByte(q, '~'); k >= 0 {
		return q[:k]
	}
	return q
}

// shardName is the physical name of shard i of queue q.
func shardName(q string, i int) string { return q + "~" + strconv.Itoa(i) }

// bitReverse6 reverses the 6 low bits of i: shards 0, 1, 2, 3, … go to
// group offsets 0, 32, 16, 48, …, so that the first K of them spread over
// the 64 groups.
func bitReverse6(i int) int {
	r := 0
	for b := 0; b < 6; b++ {
		r = r<<1 | (i>>b)&1
	}
	return r
}

// validQueue reports whether q is a queue name an engine method takes: a
// user queue name, or a physical shard name of one.
func validQueue(q string) bool {
	if engine.ValidQueueName(q) {
		return true
	}
	base, i := splitShard(q)
	return base != q && engine.ValidQueueName(base) && q == shardName(base, i)
}

// shardSpec is a sharded queue's entry of the shards hash.
type shardSpec struct {
	k, span, prevK int
	changed        int64 // ms
	raw            string
	// names are the shards' physical names, "q~0".."q~(span-1)".
	names []string
}

func parseShardSpec(q, raw string) (*shardSpec, bool) {
	f := strings.Fields(raw)
	if len(f) != 4 {
		return nil, false
	}
	var v [4]int64
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, false
		}
		v[i] = n
	}
	sp := &shardSpec{k: int(v[0]), span: int(v[1]), prevK: int(v[2]), changed: v[3], raw: raw}
	if sp.k < 1 || sp.k > engine.MaxShards || sp.span < sp.k || sp.span > engine.MaxShards || sp.prevK < 0 || sp.prevK > engine.MaxShards {
		return nil, false
	}
	sp.names = make([]string, sp.span)
	for i := range sp.names {
		sp.names[i] = shardName(q, i)
	}
	return sp, true
}

func (sp *shardSpec) format() string {
	return fmt.Sprintf("%d %d %d %d", sp.k, sp.span, sp.prevK, sp.changed)
}

// idShard is the shard job id names, when it is one of sp's, else 0.
func (sp *shardSpec) idShard(id string) int {
	s, ok := engine.JobIDShard(id)
	if !ok || s >= sp.span {
		return 0
	}
	return s
}

// groupShard is the shard of the jobs of group g among k shards (FNV-1a
// of the group, as keyShard).
func groupShard(g string, k int) int { return keyShard(g, k) }

// keyShard is the shard of idempotency key key among k shards.
func keyShard(key string, k int) int {
	if k <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(k))
}

// shardMemo is an engine's view of the shards hash.
type shardMemo struct {
	mu sync.Mutex // one load at a time
	m  atomic.Pointer[shardMap]
}

type shardMap struct {
	at    time.Time
	specs map[[2]string]*shardSpec
}

// shardsOf returns queue ns/q's shards, or nil when it has one shard (or
// is a physical shard name): the routing of every exported method.
func (e *Engine) shardsOf(ns, q string) *shardSpec {
	m := e.view()
	if m == nil || len(m.specs) == 0 {
		return nil
	}
	return m.specs[[2]string{ns, q}]
}

// anySharded reports whether the pool has a sharded queue.
func (e *Engine) anySharded() bool {
	m := e.view()
	return m != nil && len(m.specs) > 0
}

// view is the engine's view of the shards hash: read by New, by this
// engine's changes, and every shardRefresh by runShards while Run runs; no
// request waits for it (until one could be read at all).
func (e *Engine) view() *shardMap {
	if m := e.shards.m.Load(); m != nil {
		return m
	}
	return e.loadShards(context.Background(), nil)
}

// loadShards reads the shards hash, unless another call did since seen was
// current. On an error it keeps the view it had (and tries again at the
// next refresh).
func (e *Engine) loadShards(ctx context.Context, seen *shardMap) *shardMap {
	e.shards.mu.Lock()
	defer e.shards.mu.Unlock()
	if cur := e.shards.m.Load(); cur != seen && cur != nil {
		return cur
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	all, err := retried(ctx, e, func() *redis.MapStringStringCmd { return e.rdb.HGetAll(ctx, shardsKey) }).Result()
	if err != nil {
		e.log.WithError(err).Warn("shards: cannot read the sharded queues; keeping the last view")
		if seen == nil {
			return nil
		}
		stale := &shardMap{at: time.Now(), specs: seen.specs}
		e.shards.m.Store(stale)
		return stale
	}
	m := &shardMap{at: time.Now(), specs: make(map[[2]string]*shardSpec, len(all))}
	for f, v := range all {
		ns, q, ok := strings.Cut(f, "/")
		if !ok {
			continue
		}
		if sp, ok := parseShardSpec(q, v); ok {
			m.specs[[2]string{ns, q}] = sp
		}
	}
	e.shards.m.Store(m)
	e.wakeGrown(seen, m)
	return m
}

// wakeGrown wakes every consumer waiting on a queue that has more shards
// in view m than in the view before: they wait on the channels of the
// shards they knew, and look again over all of them. (A consumer that
// waits with Consume routes its request again at every look, the event
// loops' at every ConsumeEach and Watch.)
func (e *Engine) wakeGrown(old, m *shardMap) {
	if e.waiters == nil || old == nil {
		return
	}
	for k, sp := range m.specs {
		span := 1
		if o := old.specs[k]; o != nil {
			span = o.span
		}
		if sp.span > span {
			e.waiters.notify(readyChannel(k[0], k[1]), math.MaxInt32)
		}
	}
}

// runShards keeps the engine's view of the shards hash fresh and lowers
// the span of queues whose draining shards are empty.
func (e *Engine) runShards(ctx context.Context) {
	t := time.NewTicker(shardRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := e.loadShards(ctx, e.shards.m.Load())
		if m == nil {
			continue
		}
		for k, sp := range m.specs {
			if sp.span > sp.k && time.Since(time.UnixMilli(sp.changed)) > time.Duration(e.shardGrace.Load()) {
				if err := e.lowerSpan(ctx, k[0], k[1], sp); err != nil {
					e.log.WithError(err).Warn("shards: cannot lower a span")
				}
			}
		}
	}
}

// casShardsScript sets field ARGV[1] of the shards hash to ARGV[3] ("" =
// delete) if it holds ARGV[2] ("" = absent). Returns 1 if it did.
//
//	KEYS[1] the shards hash
var casShardsScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1
`)

// lowerSpan lowers ns/q's span to one past its highest shard that holds
// anything (ready, priority, timer or dead letter entries), at least K.
func (e *Engine) lowerSpan(ctx context.Context, ns, q string, sp *shardSpec) error {
	cmds := make([]*redis.IntCmd, sp.span)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for i := sp.k; i < sp.span; i++ {
			n := sp.names[i]
			cmds[i] = p.Exists(ctx, readyKey(ns, n), prioKey(ns, n), timerKey(ns, n), deadKey(ns, n))
		}
		return nil
	})
	if err != nil {
		return err
	}
	span := sp.k
	for i := sp.span - 1; i >= sp.k; i-- {
		if cmds[i].Val() > 0 {
			span = i + 1
			break
		}
	}
	if span == sp.span {
		return nil
	}
	next := *sp
	next.span = span
	val := next.format()
	if next.k == 1 && span == 1 {
		val = ""
	}
	if err := e.run(ctx, casShardsScript, []string{shardsKey}, ns+"/"+q, sp.raw, val).Err(); err != nil {
		return err
	}
	e.loadShards(ctx, e.shards.m.Load())
	return nil
}

// readShards reads ns/q's entry of the shards hash (not the view): K 1
// and span 1 when it has none.
func (e *Engine) readShards(ctx context.Context, ns, q string) (*shardSpec, error) {
	raw, err := retried(ctx, e, func() *redis.StringCmd { return e.rdb.HGet(ctx, shardsKey, ns+"/"+q) }).Result()
	if errors.Is(err, redis.Nil) {
		return &shardSpec{k: 1, span: 1, names: []string{shardName(q, 0)}}, nil
	}
	if err != nil {
		return nil, err
	}
	sp, ok := parseShardSpec(q, raw)
	if !ok {
		return nil, fmt.Errorf("bad entry %q in %s", raw, shardsKey)
	}
	return sp, nil
}

// setShards changes ns/q's number of shards from cur to k: span becomes
// max(cur.span, k) (shards past k drain). It fails if the entry changed
// since cur was read.
func (e *Engine) setShards(ctx context.Context, ns, q string, cur *shardSpec, k int) error {
	next := shardSpec{k: k, span: max(cur.span, k), prevK: cur.k, changed: time.Now().UnixMilli()}
	val := next.format()
	if next.k == 1 && next.span == 1 {
		val = ""
	}
	ok, err := e.run(ctx, casShardsScript, []string{shardsKey}, ns+"/"+q, cur.raw, val).Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("shards of %s/%s changed meanwhile: %w", ns, q, errShardsRace)
	}
	e.loadShards(ctx, e.shards.m.Load())
	return nil
}

var errShardsRace = errors.New("concurrent change")

// publishShard picks the shard of a publish to a sharded queue: shard 0
// for a job whose ID the caller chose (any ID is valid there), the shard
// of the job a re-publish replaces, the key's shard for an idempotency
// key, else the next shard in turn.
func (e *Engine) publishShard(ctx context.Context, sp *shardSpec, r *engine.PublishRequest) int {
	switch {
	case r.ID != "":
		return 0
	case r.Replaces != "":
		if s := sp.idShard(r.Replaces); s > 0 {
			if n, err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.Exists(ctx, jobKey(r.Namespace, sp.names[s], r.Replaces)) }).Result(); err == nil && n == 1 {
				return s
			}
		}
		return 0
	case r.Group != "":
		// One group lives in one shard (issue #32): its jobs are served in
		// turn with the other groups of that shard, and its in-flight
		// limit is counted in one place.
		return groupShard(r.Group, sp.k)
	case r.Key != "":
		return keyShard(r.Key, sp.k)
	}
	// In turn, per queue (a counter shared by queues, or by publishes and
	// consumes, could send every other publish of a queue to one shard).
	return int(e.names.get([3]string{r.Namespace, r.Queue}).shardPub.Add(1) % uint32(sp.k))
}

// routePublish returns r aimed at a shard of its queue when that queue is
// sharded, else r.
func (e *Engine) routePublish(ctx context.Context, r *engine.PublishRequest) *engine.PublishRequest {
	if r == nil {
		return r
	}
	sp := e.shardsOf(r.Namespace, r.Queue)
	if sp == nil {
		return r
	}
	c := *r
	c.Queue = sp.names[e.publishShard(ctx, sp, r)]
	return &c
}

// keyTakenElsewhere looks, for a publish with an idempotency key to a
// sharded queue whose K changed, at the key's shard under the previous K:
// the ID of the job that holds the key there, or "".
func (e *Engine) keyTakenElsewhere(ctx context.Context, sp *shardSpec, r *engine.PublishRequest) (string, error) {
	if r.Key == "" || r.ID != "" || r.Replaces != "" || sp.prevK == sp.k || sp.prevK < 1 {
		return "", nil
	}
	old := keyShard(r.Key, sp.prevK)
	if old == keyShard(r.Key, sp.k) || old >= sp.span {
		return "", nil
	}
	id, err := retried(ctx, e, func() *redis.StringCmd { return e.rdb.Get(ctx, uniqueKey(r.Namespace, sp.names[old], r.Key)) }).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// expandQueues replaces each sharded queue of queues by its shards, from a
// rotating shard so that none starves; nil when none is sharded.
func (e *Engine) expandQueues(ns string, queues []string) []string {
	if !e.anySharded() {
		return nil
	}
	var out []string
	for i, q := range queues {
		sp := e.shardsOf(ns, q)
		if sp == nil {
			if out != nil {
				out = append(out, q)
			}
			continue
		}
		if out == nil {
			out = append(make([]string, 0, len(queues)+sp.span), queues[:i]...)
		}
		off := int(e.names.get([3]string{ns, q}).shardCon.Add(1) % uint32(sp.span))
		for j := range sp.span {
			out = append(out, sp.names[(off+j)%sp.span])
		}
	}
	return out
}

// routeConsume returns req over its queues' shards, or req.
func (e *Engine) routeConsume(req *engine.ConsumeRequest) *engine.ConsumeRequest {
	if req == nil {
		return req
	}
	qs := e.expandQueues(req.Namespace, req.Queues)
	if qs == nil {
		return req
	}
	c := *req
	c.Queues = qs
	return &c
}

// byID runs f on the shard job id names, and on shard 0 when f finds no
// such job there.
func byID[T any](sp *shardSpec, id string, f func(q string) (T, error)) (T, error) {
	if s := sp.idShard(id); s > 0 {
		v, err := f(sp.names[s])
		if !errors.Is(err, engine.ErrJobNotFound) {
			return v, err
		}
	}
	return f(sp.names[0])
}

// ackSharded is Ack on a sharded queue. In a shard other than 0, an ACK
// without receipt asks the script to tell a missing job ("?"), so that it
// can fall back to shard 0.
func (e *Engine) ackSharded(ctx context.Context, sp *shardSpec, ns, q, id, receipt string) error {
	if s := sp.idShard(id); s > 0 {
		nonce := ackProbe
		if receipt != "" {
			var err error
			if nonce, err = decodeReceipt(receipt); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
		op, err := e.ackOne(ctx, ns, sp.names[s], id, nonce)
		if err != nil || op.code == 1 || op.code == -2 {
			op.q = q
			return ackResult(op, err)
		}
	}
	return e.Ack(ctx, ns, sp.names[0], id, receipt)
}

// ackProbe is the nonce of an ACK without receipt that reports a missing
// job (code 0) rather than success.
const ackProbe = "?"

// oldestJob returns the job of jobs published first (by ID), or nil.
func oldestJob(jobs []*engine.Job) *engine.Job {
	var best *engine.Job
	var bestAt time.Time
	for _, j := range jobs {
		if j == nil {
			continue
		}
		info, _ := engine.ParseJobID(j.ID)
		if best == nil || info.Published.Before(bestAt) {
			best, bestAt = j, info.Published
		}
	}
	return best
}

// Sharded forms of the queue-wide operations: one logical queue over the
// shards of its span.

func (e *Engine) peekQueueSharded(ctx context.Context, sp *shardSpec, ns, q string) (*engine.Job, error) {
	var jobs []*engine.Job
	for _, n := range sp.names {
		j, err := e.PeekQueue(ctx, ns, n)
		if errors.Is(err, engine.ErrQueueEmpty) {
			continue
		}
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if j := oldestJob(jobs); j != nil {
		return j, nil
	}
	return nil, fmt.Errorf("peek %s/%s: %w", ns, q, engine.ErrQueueEmpty)
}

func sumShards(sp *shardSpec, f func(q string) (int64, error)) (int64, error) {
	var total int64
	for _, n := range sp.names {
		v, err := f(n)
		total += v
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (e *Engine) peekDeadLetterSharded(ctx context.Context, sp *shardSpec, ns, q string) (engine.DeadLetter, error) {
	var out engine.DeadLetter
	sizes, heads, err := e.deadSizesSharded(ctx, sp, ns)
	if err != nil {
		return out, fmt.Errorf("peek dead letter %s/%s: %w", ns, q, err)
	}
	var headAt time.Time
	for i, h := range heads {
		out.Size += sizes[i]
		if h == "" {
			continue
		}
		_, id, err := unpackEntry(h)
		if err != nil {
			return out, fmt.Errorf("peek dead letter %s/%s: %w", ns, q, err)
		}
		info, _ := engine.ParseJobID(id)
		if out.Head == "" || info.Published.Before(headAt) {
			out.Head, headAt = id, info.Published
		}
	}
	return out, nil
}

// limitShards runs f on each shard with what is left of limit, until
// limit is reached.
func limitShards(sp *shardSpec, limit int64, f func(q string, limit int64) (int64, error)) (int64, error) {
	var total int64
	for _, n := range sp.names {
		if total >= limit {
			break
		}
		v, err := f(n, limit-total)
		total += v
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// listDeadLetterSharded lists the dead letters of the shards one after the
// other, shard 0 first: offset and limit count entries over that sequence,
// as ListDeadLetter's count entries of one dead letter (a page holds fewer
// jobs when entries of gone jobs are skipped).
func (e *Engine) listDeadLetterSharded(ctx context.Context, sp *shardSpec, ns string, offset, limit int64) ([]*engine.Job, error) {
	var out []*engine.Job
	for _, n := range sp.names {
		if limit <= 0 {
			break
		}
		size, err := e.DeadLetterSize(ctx, ns, n)
		if err != nil {
			return nil, err
		}
		if offset >= size {
			offset -= size
			continue
		}
		take := min(limit, size-offset)
		jobs, err := e.ListDeadLetter(ctx, ns, n, offset, take)
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
		limit -= take
		offset = 0
	}
	return out, nil
}

// listDeadLetterPageSharded lists the shards' dead letters as one, shard
// 0 first (engine.ListDeadLetterParts); with Newest, the reverse.
func (e *Engine) listDeadLetterPageSharded(ctx context.Context, sp *shardSpec, ns string, dq engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
	parts := make([]engine.DeadLetterPart, len(sp.names))
	for i, n := range sp.names {
		size, err := e.DeadLetterSize(ctx, ns, n)
		if err != nil {
			return engine.DeadLetterPage{}, err
		}
		parts[i] = engine.DeadLetterPart{Size: size, List: func(ctx context.Context, q engine.DeadLetterQuery) (engine.DeadLetterPage, error) {
			return e.ListDeadLetterPage(ctx, ns, n, q)
		}}
	}
	return engine.ListDeadLetterParts(ctx, parts, dq)
}

func (e *Engine) cancelKeySharded(ctx context.Context, sp *shardSpec, ns, q, key string) (string, error) {
	first := keyShard(key, sp.k)
	id, err := e.CancelKey(ctx, ns, sp.names[first], key)
	if !errors.Is(err, engine.ErrJobNotFound) {
		return id, err
	}
	for i, n := range sp.names {
		if i == first {
			continue
		}
		id, err := e.CancelKey(ctx, ns, n, key)
		if !errors.Is(err, engine.ErrJobNotFound) {
			return id, err
		}
	}
	return "", fmt.Errorf("cancel %s/%s key %q: %w", ns, q, key, engine.ErrJobNotFound)
}

func (e *Engine) destroySharded(ctx context.Context, sp *shardSpec, ns, q string) (int64, error) {
	n, err := sumShards(sp, func(n string) (int64, error) { return e.Destroy(ctx, ns, n) })
	e.names.get([3]string{ns, q}).recorded.Store(false)
	return n, err
}

// logicalQueues maps the physical queue names of a registry to their
// logical queues, each once, in the order first seen.
func logicalQueues(qs []string) []string {
	out := qs[:0:0]
	seen := make(map[string]bool, len(qs))
	for _, q := range qs {
		l := logicalQueue(q)
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// newJobID is a fresh ID for a job of queue qn: with its shard in it when
// qn is a shard (engine.NewShardJobID).
func newJobID(qn *queueNames, now time.Time, delay time.Duration, versioned bool) string {
	if qn.shard < 0 {
		return engine.NewJobID(now, delay, versioned)
	}
	return engine.NewShardJobID(now, delay, versioned, qn.shard)
}

// publishSharded is Publish to a sharded queue.
func (e *Engine) publishSharded(ctx context.Context, sp *shardSpec, req *engine.PublishRequest) (string, error) {
	if id, err := e.keyTakenElsewhere(ctx, sp, req); err != nil {
		return "", fmt.Errorf("publish %s/%s: %w", req.Namespace, req.Queue, err)
	} else if id != "" {
		return id, fmt.Errorf("publish %s/%s key %q: %w", req.Namespace, req.Queue, req.Key, engine.ErrKeyExists)
	}
	c := *req
	c.Queue = sp.names[e.publishShard(ctx, sp, req)]
	return e.Publish(ctx, &c)
}

// publishBatchSharded is PublishBatch to a sharded queue: the batch goes
// to one shard, so that it stays all or nothing.
func (e *Engine) publishBatchSharded(ctx context.Context, sp *shardSpec, reqs []*engine.PublishRequest) ([]string, error) {
	if len(reqs) == 1 {
		id, err := e.publishSharded(ctx, sp, reqs[0])
		if id == "" {
			return nil, err
		}
		return []string{id}, err
	}
	ns, q := reqs[0].Namespace, reqs[0].Queue
	s := -1
	for _, r := range reqs {
		if r != nil && r.ID != "" {
			s = 0 // a caller's IDs go to shard 0
		}
	}
	if s < 0 {
		s = e.publishShard(ctx, sp, &engine.PublishRequest{Namespace: ns, Queue: q})
	}
	// A grouped job goes to its group's shard (publishShard): a batch
	// whose jobs land in several shards is one PublishBatch per shard, in
	// the order of their first jobs (all or nothing within each).
	out := make([]*engine.PublishRequest, len(reqs))
	shard := make([]int, len(reqs))
	split := false
	for i, r := range reqs {
		out[i], shard[i] = r, s
		if r != nil && r.Namespace == ns && r.Queue == q {
			if r.Group != "" && r.ID == "" {
				shard[i] = groupShard(r.Group, sp.k)
			}
			split = split || shard[i] != shard[0]
			c := *r
			c.Queue = sp.names[shard[i]]
			out[i] = &c
		}
	}
	if !split {
		return e.PublishBatch(ctx, out)
	}
	for _, r := range out { // every part valid before the first goes in
		if r == nil {
			return nil, fmt.Errorf("publish: nil job: %w", engine.ErrInvalid)
		}
		if err := checkPublish(ns, r.Queue, r); err != nil {
			return nil, err
		}
		if r.Key != "" {
			return nil, fmt.Errorf("publish: a job key needs a single job and at most 256 bytes: %w", engine.ErrInvalid)
		}
	}
	ids := make([]string, len(out))
	done := map[int]bool{}
	for i := range out {
		if done[shard[i]] {
			continue
		}
		done[shard[i]] = true
		var part []*engine.PublishRequest
		var at []int
		for k := i; k < len(out); k++ {
			if shard[k] == shard[i] {
				part, at = append(part, out[k]), append(at, k)
			}
		}
		got, err := e.PublishBatch(ctx, part)
		for k, id := range got {
			ids[at[k]] = id
		}
		if err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// routePublishes aims the plain publishes of reqs to sharded queues at a
// shard, one per queue (the others go through Publish, which routes
// them); reqs itself when none is.
func (e *Engine) routePublishes(ctx context.Context, reqs []*engine.PublishRequest) []*engine.PublishRequest {
	if !e.anySharded() {
		return reqs
	}
	var out []*engine.PublishRequest
	// The plain publishes of one queue in reqs all go to one shard, the
	// queue's next in turn: one script call rather than one per shard,
	// while successive batches spread over the shards.
	var chosen map[[2]string]string
	for i, r := range reqs {
		if r == nil || r.ID != "" || r.Replaces != "" || r.Key != "" {
			continue
		}
		sp := e.shardsOf(r.Namespace, r.Queue)
		if sp == nil {
			continue
		}
		if out == nil {
			out = append([]*engine.PublishRequest(nil), reqs...)
			chosen = make(map[[2]string]string)
		}
		k := [2]string{r.Namespace, r.Queue}
		name, ok := chosen[k]
		if r.Group != "" {
			name, ok = sp.names[groupShard(r.Group, sp.k)], true
		}
		if !ok {
			name = sp.names[e.publishShard(ctx, sp, r)]
			chosen[k] = name
		}
		c := *r
		c.Queue = name
		out[i] = &c
	}
	if out == nil {
		return reqs
	}
	return out
}

// shardCursorBits is where a sharded queue's ListJobs cursor keeps the
// shard: cursor = shard<<shardCursorBits | the shard's own cursor.
const shardCursorBits = 40

// listJobsSharded is ListJobs over a sharded queue: the shards one after
// the other, the cursor naming the shard and the position in it.
func (e *Engine) listJobsSharded(ctx context.Context, sp *shardSpec, ns string, list engine.JobList, cursor int64, limit int) ([]*engine.Job, int64, error) {
	s, inner := int(cursor>>shardCursorBits), cursor&(1<<shardCursorBits-1)
	var out []*engine.Job
	for s < len(sp.names) && len(out) < limit {
		jobs, next, err := e.ListJobs(ctx, ns, sp.names[s], list, inner, limit-len(out))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, jobs...)
		if next > 0 {
			return out, int64(s)<<shardCursorBits | next, nil
		}
		s, inner = s+1, 0
	}
	if s < len(sp.names) {
		return out, int64(s) << shardCursorBits, nil
	}
	return out, 0, nil
}

// runEach runs script s once per keys[i], args[i], all in one pipeline
// (one round trip per node on a cluster); a call that found the script
// cache empty, or a cluster busy, goes again alone (as the pump's do).
func (e *Engine) runEach(ctx context.Context, s *redis.Script, keys [][]string, args [][]interface{}) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(keys))
	_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range keys {
			cmds[i] = s.EvalSha(ctx, p, keys[i], args[i]...)
		}
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && (isNoScript(err) || e.retryFor > 0 && clusterRetryable(err)) {
			cmds[i] = e.run(ctx, s, keys[i], args[i]...)
		}
	}
	return cmds
}

// sizeSharded is Size over the shards, in one pipeline.
func (e *Engine) sizeSharded(ctx context.Context, sp *shardSpec, ns, q string) (int64, error) {
	keys := make([][]string, len(sp.names))
	args := make([][]interface{}, len(sp.names))
	for i, n := range sp.names {
		qn := e.names.get([3]string{ns, n})
		keys[i] = []string{qn.ready, qn.prio, qn.jobPrefix, qn.config}
		args[i] = []interface{}{sizeScanBudget}
	}
	var total int64
	for _, c := range e.runEach(ctx, sizeScript, keys, args) {
		n, err := c.Int64()
		if err != nil {
			return 0, fmt.Errorf("size %s/%s: %w", ns, q, err)
		}
		total += n
	}
	return total, nil
}

// deadSizesSharded returns the shards' dead letter sizes and oldest
// entries, in one pipeline.
func (e *Engine) deadSizesSharded(ctx context.Context, sp *shardSpec, ns string) ([]int64, []string, error) {
	sizes := make([]*redis.IntCmd, len(sp.names))
	heads := make([]*redis.StringCmd, len(sp.names))
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range sp.names {
			k := e.names.get([3]string{ns, n}).dead
			sizes[i] = p.LLen(ctx, k)
			heads[i] = p.LIndex(ctx, k, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	n := make([]int64, len(sp.names))
	h := make([]string, len(sp.names))
	for i := range sp.names {
		n[i], h[i] = sizes[i].Val(), heads[i].Val()
	}
	return n, h, nil
}

func (e *Engine) deadLetterSizeSharded(ctx context.Context, sp *shardSpec, ns, q string) (int64, error) {
	sizes, _, err := e.deadSizesSharded(ctx, sp, ns)
	if err != nil {
		return 0, fmt.Errorf("dead letter size %s/%s: %w", ns, q, err)
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	return total, nil
}
