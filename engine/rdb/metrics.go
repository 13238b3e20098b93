package rdb

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Metrics are the engine's Prometheus metrics. Their names, types and
// labels are lmstfy's (infra_lmstfy_redis_*), so that existing dashboards
// keep working; doc/API.md says what each measures in Kairos. One Metrics
// serves every pool of a server; a nil *Metrics records nothing.
//
// Per job, the hot paths only add to counters resolved once per pool
// (poolMetrics) or once per queue (the memos), and observe one histogram
// per consumed and per ACKed job.
type Metrics struct {
	publish      *prometheus.CounterVec
	publishQueue *prometheus.CounterVec
	consume      *prometheus.CounterVec
	consumeQueue *prometheus.CounterVec
	timerDue     *prometheus.CounterVec
	fullBatches  *prometheus.CounterVec
	reclaim      *prometheus.CounterVec
	elapsed      *prometheus.HistogramVec
	poolAdd      *prometheus.CounterVec
	poolGet      *prometheus.CounterVec
	poolDelete   *prometheus.CounterVec
	timerAdd     *prometheus.CounterVec
	directPush   *prometheus.CounterVec
	queuePop     *prometheus.CounterVec
	respawn      *prometheus.CounterVec
	ackElapsed   *prometheus.HistogramVec

	// Redis commands, by lmstfy's go-redis hook (CommandHook).
	cmdLatency *prometheus.HistogramVec
	cmdCount   *prometheus.CounterVec

	// Series of the per-queue vectors, looked up once per {pool, ns, q}:
	// with many queues the vectors' own label hashing was a visible part of
	// a publish's CPU.
	publishSeries, consumeSeries    *memo[prometheus.Counter]
	elapsedSeries, ackElapsedSeries *memo[prometheus.Observer]
}

// NewMetrics creates the engine metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "infra", "lmstfy_redis"
	pool := []string{"pool"}
	queue := []string{"pool", "namespace", "queue"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	// Milliseconds from 1 ms to 4^13 ms (18.6 h).
	jobBuckets := prometheus.ExponentialBuckets(1, 4, 14)
	m := &Metrics{
		publish:      counter("publish_jobs", "Jobs published.", pool),
		publishQueue: counter("publish_queue_jobs", "Jobs published, per queue.", queue),
		consume:      counter("consume_multi_jobs", "Jobs delivered to consumers.", pool),
		consumeQueue: counter("consume_queue_jobs", "Jobs delivered to consumers, per queue.", queue),
		timerDue:     counter("timer_due_jobs", "Timer entries handled by the pump (made ready, dead-lettered or dropped).", pool),
		fullBatches:  counter("timer_full_batches", "Pump batches that were full (more was due).", pool),
		reclaim: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kairos", Name: "reclaimed_entries_total",
			Help: "Entries of gone jobs (expired or deleted while waiting) removed by the reclaimer (ready lists, priority sets, timers, dead letters)."}, pool),
		elapsed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "job_elapsed_ms",
			Help: "Milliseconds from publish to delivery (delay included).", Buckets: jobBuckets}, queue),
		poolAdd: counter("pool_add_jobs", "Job bodies stored (every published job: body and queue entry are written in one step).", pool),
		poolGet: counter("pool_get_jobs", "Job bodies read for a consumer or a peek.", pool),
		poolDelete: counter("pool_delete_jobs",
			"ACKs (DELETE of a job) that deleted the job or found nothing to delete; a stale receipt deletes nothing and is not counted.", pool),
		timerAdd:   counter("timer_add_jobs", "Jobs published with a delay (into the queue's timer).", pool),
		directPush: counter("queue_direct_push_jobs", "Jobs published without a delay (straight into the ready queue).", pool),
		queuePop: counter("queue_pop_jobs",
			"Entries popped from ready queues by consumers, including stale ones (job ACKed or expired) that were skipped.", pool),
		respawn: counter("deadletter_respawn_jobs", "Jobs respawned from dead letters.", pool),
		ackElapsed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "job_ack_elapsed_ms",
			Help: "Milliseconds from publish to ACK (delay included).", Buckets: jobBuckets}, queue),
		cmdLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "latency",
			Help: "Milliseconds of Redis commands (a pipeline counts once, as command pipeline), as the server measures them.",
			// 0.125 ms to 32 s: most commands take well under lmstfy's
			// lowest bucket (1 ms).
			Buckets: prometheus.ExponentialBuckets(0.125, 2, 19)}, []string{"node", "command", "status"}),
		cmdCount: counter("qps", "Redis commands sent (a pipeline counts once, as command pipeline); status ok or error.",
			[]string{"node", "command", "status"}),
	}
	m.publishSeries = newMemo(func(k [3]string) prometheus.Counter { return m.publishQueue.WithLabelValues(k[:]...) })
	m.consumeSeries = newMemo(func(k [3]string) prometheus.Counter { return m.consumeQueue.WithLabelValues(k[:]...) })
	m.elapsedSeries = newMemo(func(k [3]string) prometheus.Observer { return m.elapsed.WithLabelValues(k[:]...) })
	m.ackElapsedSeries = newMemo(func(k [3]string) prometheus.Observer { return m.ackElapsed.WithLabelValues(k[:]...) })
	for _, c := range []prometheus.Collector{m.publish, m.publishQueue, m.consume, m.consumeQueue, m.timerDue, m.fullBatches, m.reclaim, m.elapsed,
		m.poolAdd, m.poolGet, m.poolDelete, m.timerAdd, m.directPush, m.queuePop, m.respawn, m.ackElapsed, m.cmdLatency, m.cmdCount} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// poolMetrics are the series of one pool, resolved when its engine is
// made, so that counting costs an atomic add. A nil *poolMetrics records
// nothing.
type poolMetrics struct {
	m    *Metrics
	pool string

	publish, poolAdd, directPush, timerAdd  prometheus.Counter
	consume, poolGet, queuePop, poolDelete  prometheus.Counter
	respawn, timerDue, fullBatches, reclaim prometheus.Counter
}

// forPool returns the series of pool, or nil when m is nil.
func (m *Metrics) forPool(pool string) *poolMetrics {
	if m == nil {
		return nil
	}
	return &poolMetrics{
		m: m, pool: pool,
		publish: m.publish.WithLabelValues(pool), poolAdd: m.poolAdd.WithLabelValues(pool),
		directPush: m.directPush.WithLabelValues(pool), timerAdd: m.timerAdd.WithLabelValues(pool),
		consume: m.consume.WithLabelValues(pool), poolGet: m.poolGet.WithLabelValues(pool),
		queuePop: m.queuePop.WithLabelValues(pool), poolDelete: m.poolDelete.WithLabelValues(pool),
		respawn: m.respawn.WithLabelValues(pool), timerDue: m.timerDue.WithLabelValues(pool),
		fullBatches: m.fullBatches.WithLabelValues(pool), reclaim: m.reclaim.WithLabelValues(pool),
	}
}

// publishedPool counts n published jobs, delayed of which went to a timer,
// in the pool's series; a batch of several queues counts them once.
func (pm *poolMetrics) publishedPool(n, delayed int) {
	if pm == nil {
		return
	}
	pm.publish.Add(float64(n))
	pm.poolAdd.Add(float64(n))
	if delayed > 0 {
		pm.timerAdd.Add(float64(delayed))
	}
	if n > delayed {
		pm.directPush.Add(float64(n - delayed))
	}
}

// publishedQueue keeps the queue's series in qn, the queue's names, so that
// it is looked up once per queue rather than once per batch.
func (pm *poolMetrics) publishedQueue(ns, q string, qn *queueNames, n int) {
	if pm == nil {
		return
	}
	c, _ := qn.publishes.Load().(prometheus.Counter)
	if c == nil {
		c = pm.m.publishSeries.get([3]string{pm.pool, ns, logicalQueue(q)})
		qn.publishes.Store(c)
	}
	c.Add(float64(n))
}

// consumed counts the jobs one consumer got (their bodies were read) and
// observes how long each waited since its publish.
func (pm *poolMetrics) consumed(ns string, jobs []*engine.Job, now time.Time) {
	if pm == nil || len(jobs) == 0 {
		return
	}
	pm.consume.Add(float64(len(jobs)))
	pm.poolGet.Add(float64(len(jobs)))
	for _, j := range jobs {
		pm.m.consumeSeries.get([3]string{pm.pool, ns, j.Queue}).Inc()
		pm.m.elapsedSeries.get([3]string{pm.pool, ns, j.Queue}).Observe(float64(engine.ElapsedMS(j.ID, now)))
	}
}

// popped counts n entries popped from ready queues by a consume.
func (pm *poolMetrics) popped(n int64) {
	if pm == nil || n <= 0 {
		return
	}
	pm.queuePop.Add(float64(n))
}

// peeked counts a job body read by a peek.
func (pm *poolMetrics) peeked() {
	if pm == nil {
		return
	}
	pm.poolGet.Inc()
}

// acked counts ACKs of queue ns/q that deleted their job (or found nothing
// to delete) and observes, per job, the time since its publish. The
// queue's histogram series is kept in qn.
func (pm *poolMetrics) acked(ns, q string, qn *queueNames, batch []*batchCall[ackOp], now time.Time) {
	if pm == nil {
		return
	}
	o, _ := qn.acks.Load().(prometheus.Observer)
	if o == nil {
		o = pm.m.ackElapsedSeries.get([3]string{pm.pool, ns, logicalQueue(q)})
		qn.acks.Store(o)
	}
	n := 0
	for _, c := range batch {
		if c.err == nil && c.in.code == 1 {
			n++
			o.Observe(float64(engine.ElapsedMS(c.in.id, now)))
		}
	}
	if n > 0 {
		pm.poolDelete.Add(float64(n))
	}
}

// respawned counts n jobs respawned from a dead letter.
func (pm *poolMetrics) respawned(n int64) {
	if pm == nil || n <= 0 {
		return
	}
	pm.respawn.Add(float64(n))
}

func (pm *poolMetrics) pumped(n int64, full bool) {
	if pm == nil || n == 0 {
		return
	}
	pm.timerDue.Add(float64(n))
	if full {
		pm.fullBatches.Inc()
	}
}

// CommandHook returns a go-redis hook that counts and times every command
// of a client to the Redis at node, as lmstfy's hook does (qps and latency,
// labels node, command, status). A pipeline, which is how the hot paths
// send their scripts, counts once as command "pipeline", so the hook costs
// per round trip, not per job. redis.Nil is an answer, not an error.
func (m *Metrics) CommandHook(node string) redis.Hook {
	return &commandHook{m: m, node: node, series: make(map[commandKey]commandSeries)}
}

type commandHook struct {
	m    *Metrics
	node string

	mu     sync.RWMutex
	series map[commandKey]commandSeries
}

type commandKey struct {
	name   string
	failed bool
}

type commandSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

func (h *commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.record(commandKey{cmd.Name(), failed(cmd.Err())}, start)
		return err
	}
}

func (h *commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		bad := err != nil && !errors.Is(err, redis.Nil)
		for _, c := range cmds {
			bad = bad || failed(c.Err())
		}
		h.record(commandKey{"pipeline", bad}, start)
		return err
	}
}

func failed(err error) bool { return err != nil && !errors.Is(err, redis.Nil) }

func (h *commandHook) record(k commandKey, start time.Time) {
	h.mu.RLock()
	s, ok := h.series[k]
	h.mu.RUnlock()
	if !ok {
		status := "ok"
		if k.failed {
			status = "error"
		}
		s = commandSeries{h.m.cmdCount.WithLabelValues(h.node, k.name, status), h.m.cmdLatency.WithLabelValues(h.node, k.name, status)}
		h.mu.Lock()
		h.series[k] = s // command names are bounded: the client's own
		h.mu.Unlock()
	}
	s.count.Inc()
	s.latency.Observe(float64(time.Since(start)) / float64(time.Millisecond))
}

// reclaimed counts n entries of gone jobs removed by the reclaimer.
func (pm *poolMetrics) reclaimed(n int64) {
	if pm == nil || n <= 0 {
		return
	}
	pm.reclaim.Add(float64(n))
}

// StatsCollector exports, at scrape time, the sizes of every queue of the
// given engines (lmstfy's queue_sizes and deadletter_sizes per queue, and
// timer_sizes per pool, with Kairos's per-queue timer sizes beside them),
// and per queue the age of its ready head (kairos_queue_oldest_ready_seconds),
// so that a queue nobody consumes can be alerted on: all from one pass
// over the queues (Stats).
type StatsCollector struct {
	engines    []*Engine
	queue      *prometheus.Desc
	dead       *prometheus.Desc
	timer      *prometheus.Desc
	queueTimer *prometheus.Desc
	oldest     *prometheus.Desc
}

// NewStatsCollector returns a collector over engines.
func NewStatsCollector(engines ...*Engine) *StatsCollector {
	labels := []string{"pool", "namespace", "queue"}
	return &StatsCollector{
		engines: engines,
		queue:   prometheus.NewDesc("infra_lmstfy_redis_queue_sizes", "Ready jobs per queue (entries of gone jobs included until the reclaimer removes them).", labels, nil),
		dead:    prometheus.NewDesc("infra_lmstfy_redis_deadletter_sizes", "Dead jobs per queue.", labels, nil),
		timer: prometheus.NewDesc("infra_lmstfy_redis_timer_sizes",
			"Delayed and in-flight jobs of the pool (entries of its queues' timers).", []string{"pool"}, nil),
		queueTimer: prometheus.NewDesc("kairos_queue_timer_sizes", "Delayed and in-flight jobs per queue (entries of its timer).", labels, nil),
		oldest: prometheus.NewDesc("kairos_queue_oldest_ready_seconds",
			"Seconds since the job at the head of the queue's ready list or priority set became ready (its publish plus its delay); 0 when no job is ready.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queue
	ch <- c.dead
	ch <- c.timer
	ch <- c.queueTimer
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range c.engines {
		stats, err := e.Stats(ctx)
		if err != nil {
			e.log.WithError(err).Warn("collect queue sizes")
			continue
		}
		now := e.now()
		var timers int64
		for _, s := range stats {
			ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(s.Ready), e.pool, s.Namespace, s.Queue)
			ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(s.DeadLetter), e.pool, s.Namespace, s.Queue)
			ch <- prometheus.MustNewConstMetric(c.queueTimer, prometheus.GaugeValue, float64(s.Timer), e.pool, s.Namespace, s.Queue)
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, readyAge(s, now), e.pool, s.Namespace, s.Queue)
			timers += s.Timer
		}
		ch <- prometheus.MustNewConstMetric(c.timer, prometheus.GaugeValue, float64(timers), e.pool)
	}
}

// readyAge is the seconds since s's ready head became ready, 0 when none
// is (or its time is ahead of now, a clock step).
func readyAge(s engine.QueueStats, now time.Time) float64 {
	if s.Ready == 0 || s.OldestReady.IsZero() {
		return 0
	}
	return max(0, now.Sub(s.OldestReady).Seconds())
}

// RedisCollector exports, at scrape time, what INFO tells of each pool's
// Redis (lmstfy's max_mem_bytes, used_mem_bytes, connections,
// blocking_connections, total_keys and total_ttl_keys gauges, per pool).
// A field the Redis does not report (the embedded store reports only its
// connections) is not exported.
type RedisCollector struct {
	engines []*Engine
	gauges  []redisGauge
}

type redisGauge struct {
	desc  *prometheus.Desc
	field string // INFO field, or keys/expires of the pool's db line
}

// NewRedisCollector returns a collector over the Redis of each engine.
func NewRedisCollector(engines ...*Engine) *RedisCollector {
	g := func(name, field, help string) redisGauge {
		return redisGauge{prometheus.NewDesc("infra_lmstfy_redis_"+name, help, []string{"pool"}, nil), field}
	}
	return &RedisCollector{engines: engines, gauges: []redisGauge{
		g("max_mem_bytes", "maxmemory", "The pool's Redis maxmemory setting, in bytes (0 = no limit)."),
		g("used_mem_bytes", "used_memory", "Bytes of memory the pool's Redis uses (INFO used_memory)."),
		g("connections", "connected_clients", "Client connections of the pool's Redis, from every client (INFO connected_clients)."),
		g("blocking_connections", "blocked_clients", "Clients blocked in a blocking command on the pool's Redis (INFO blocked_clients)."),
		g("total_keys", "keys", "Keys in the pool's Redis database."),
		g("total_ttl_keys", "expires", "Keys with a TTL in the pool's Redis database."),
	}}
}

// Describe implements prometheus.Collector.
func (c *RedisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector: one INFO per pool.
func (c *RedisCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range c.engines {
		fields, err := e.redisInfo(ctx)
		if err != nil {
			e.log.WithError(err).Warn("collect redis info")
			continue
		}
		for _, g := range c.gauges {
			if v, ok := fields[g.field]; ok {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, e.pool)
			}
		}
	}
}

// redisInfo returns the numeric fields of the pool's INFO (parseInfo); on
// a cluster, the sums over the masters (one INFO each, ForEachMaster): a
// cluster client would send INFO to one node. maxmemory is the sum too, the
// memory the pool may use.
func (e *Engine) redisInfo(ctx context.Context) (map[string]float64, error) {
	cc, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		info, err := e.rdb.Info(ctx).Result()
		if err != nil {
			return nil, err
		}
		db := 0
		if o, ok := e.rdb.(interface{ Options() *redis.Options }); ok {
			db = o.Options().DB
		}
		return parseInfo(info, db), nil
	}
	var mu sync.Mutex
	sum := make(map[string]float64)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for k, v := range parseInfo(info, 0) {
			sum[k] += v
		}
		return nil
	})
	return sum, err
}

// parseInfo returns the numeric fields of an INFO reply, with keys and
// expires from the line of database db ("db0:keys=1,expires=0,…"). A
// Redis whose database db holds no key has no such line: both are then 0,
// provided the reply has a keyspace section.
func parseInfo(info string, db int) map[string]float64 {
	out := make(map[string]float64)
	dbName := "db" + strconv.Itoa(db)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "# Keyspace" {
			out["keys"], out["expires"] = 0, 0
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k == dbName {
			for _, kv := range strings.Split(v, ",") {
				name, n, _ := strings.Cut(kv, "=")
				if f, err := strconv.ParseFloat(n, 64); err == nil && (name == "keys" || name == "expires") {
					out[name] = f
				}
			}
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}
