package rdb

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kairos-dev/kairos/engine"
)

// Metrics are the engine's Prometheus metrics. Their names are lmstfy's
// (infra_lmstfy_redis_*), so that existing dashboards keep working. A nil
// *Metrics records nothing.
type Metrics struct {
	publish      *prometheus.CounterVec
	publishQueue *prometheus.CounterVec
	consume      *prometheus.CounterVec
	consumeQueue *prometheus.CounterVec
	timerDue     *prometheus.CounterVec
	fullBatches  *prometheus.CounterVec
	reclaim      *prometheus.CounterVec
	elapsed      *prometheus.HistogramVec

	// Series of the per-queue vectors, looked up once per {pool, ns, q}:
	// with many queues the vectors' own label hashing was a visible part of
	// a publish's CPU.
	publishSeries, consumeSeries *memo[prometheus.Counter]
	elapsedSeries                *memo[prometheus.Observer]
}

// NewMetrics creates the engine metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "infra", "lmstfy_redis"
	m := &Metrics{
		publish: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "publish_jobs",
			Help: "Jobs published."}, []string{"pool"}),
		publishQueue: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "publish_queue_jobs",
			Help: "Jobs published, per queue."}, []string{"pool", "namespace", "queue"}),
		consume: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "consume_multi_jobs",
			Help: "Jobs delivered to consumers."}, []string{"pool"}),
		consumeQueue: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "consume_queue_jobs",
			Help: "Jobs delivered to consumers, per queue."}, []string{"pool", "namespace", "queue"}),
		timerDue: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "timer_due_jobs",
			Help: "Timer entries handled by the pump (made ready, dead-lettered or dropped)."}, []string{"pool"}),
		fullBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "timer_full_batches",
			Help: "Pump batches that were full (more was due)."}, []string{"pool"}),
		reclaim: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kairos", Name: "reclaimed_entries_total",
			Help: "Entries of gone jobs (expired or deleted while waiting) removed by the reclaimer (ready lists, priority sets, timers, dead letters)."}, []string{"pool"}),
		elapsed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "job_elapsed_ms",
			Help:    "Milliseconds from publish to delivery (delay included).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 14)}, []string{"pool", "namespace", "queue"}),
	}
	m.publishSeries = newMemo(func(k [3]string) prometheus.Counter { return m.publishQueue.WithLabelValues(k[:]...) })
	m.consumeSeries = newMemo(func(k [3]string) prometheus.Counter { return m.consumeQueue.WithLabelValues(k[:]...) })
	m.elapsedSeries = newMemo(func(k [3]string) prometheus.Observer { return m.elapsed.WithLabelValues(k[:]...) })
	for _, c := range []prometheus.Collector{m.publish, m.publishQueue, m.consume, m.consumeQueue, m.timerDue, m.fullBatches, m.reclaim, m.elapsed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// publishedPool and publishedQueue count published jobs in the pool's
// series and in the queue's; a batch of several queues looks the pool's
// series up once.
func (m *Metrics) publishedPool(pool string, n int) {
	if m == nil {
		return
	}
	m.publish.WithLabelValues(pool).Add(float64(n))
}

// publishedQueue keeps the queue's series in qn, the queue's names, so that
// it is looked up once per queue rather than once per batch.
func (m *Metrics) publishedQueue(pool, ns, q string, qn *queueNames, n int) {
	if m == nil {
		return
	}
	c, _ := qn.publishes.Load().(prometheus.Counter)
	if c == nil {
		c = m.publishSeries.get([3]string{pool, ns, q})
		qn.publishes.Store(c)
	}
	c.Add(float64(n))
}

func (m *Metrics) consumed(pool, ns string, jobs []*engine.Job, now time.Time) {
	if m == nil || len(jobs) == 0 {
		return
	}
	m.consume.WithLabelValues(pool).Add(float64(len(jobs)))
	for _, j := range jobs {
		m.consumeSeries.get([3]string{pool, ns, j.Queue}).Inc()
		m.elapsedSeries.get([3]string{pool, ns, j.Queue}).Observe(float64(engine.ElapsedMS(j.ID, now)))
	}
}

func (m *Metrics) pumped(pool string, n int64, full bool) {
	if m == nil || n == 0 {
		return
	}
	m.timerDue.WithLabelValues(pool).Add(float64(n))
	if full {
		m.fullBatches.WithLabelValues(pool).Inc()
	}
}

func (m *Metrics) reclaimed(pool string, n int64) {
	if m == nil || n == 0 {
		return
	}
	m.reclaim.WithLabelValues(pool).Add(float64(n))
}

// StatsCollector exports queue, timer and dead-letter sizes of every queue
// of the given engines at scrape time (lmstfy's queue_sizes,
// deadletter_sizes and timer_sizes gauges, per queue).
type StatsCollector struct {
	engines []*Engine
	queue   *prometheus.Desc
	dead    *prometheus.Desc
	timer   *prometheus.Desc
}

// NewStatsCollector returns a collector over engines.
func NewStatsCollector(engines ...*Engine) *StatsCollector {
	labels := []string{"pool", "namespace", "queue"}
	return &StatsCollector{
		engines: engines,
		queue:   prometheus.NewDesc("infra_lmstfy_redis_queue_sizes", "Ready jobs per queue (entries of gone jobs included until the reclaimer removes them).", labels, nil),
		dead:    prometheus.NewDesc("infra_lmstfy_redis_deadletter_sizes", "Dead jobs per queue.", labels, nil),
		timer:   prometheus.NewDesc("infra_lmstfy_redis_timer_sizes", "Delayed and in-flight jobs per queue.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queue
	ch <- c.dead
	ch <- c.timer
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
		for _, s := range stats {
			ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(s.Ready), e.pool, s.Namespace, s.Queue)
			ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(s.DeadLetter), e.pool, s.Namespace, s.Queue)
			ch <- prometheus.MustNewConstMetric(c.timer, prometheus.GaugeValue, float64(s.Timer), e.pool, s.Namespace, s.Queue)
		}
	}
}
