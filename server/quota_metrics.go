package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of namespace quotas (doc/API.md#quotas): what each namespace
// holds and may hold, read from the engines at scrape time, and the
// publishes refused for room, counted as they are answered.

// quotaScrapeEvery bounds how often a scrape reads the engines: scrapes
// closer together are answered from the last reading, so that several
// Prometheus servers (or a dashboard refreshing /metrics) cost at most
// one UsageAll and one Quotas per pool per interval.
const quotaScrapeEvery = 10 * time.Second

// quotaScrapeTimeout bounds one reading of the engines; a pool that does
// not answer in time is left out of that scrape.
const quotaScrapeTimeout = 2 * time.Second

// quotaMetrics are the refusal counter and the usage collector.
type quotaMetrics struct {
	refused *prometheus.CounterVec
}

func (s *Server) newQuotaMetrics(reg prometheus.Registerer) (*quotaMetrics, error) {
	m := &quotaMetrics{}
	var err error
	if m.refused, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kairos_publish_refused_total",
		Help: "Publishes (single, bulk, re-publish) refused for room, by reason: quota_jobs or quota_bytes (the namespace's quota, 429), pool_full (507: the pool's Redis is full, or its memory reserve refused a namespace holding at least its share).",
	}, []string{"pool", "namespace", "reason"})); err != nil {
		return nil, err
	}
	// The usage collector reads this server's engines: one per server,
	// registered as is (two servers on one registry would collide, as the
	// engines' own collectors would; tests use a registry per server).
	if err := reg.Register(&usageCollector{s: s}); err != nil {
		if _, dup := err.(prometheus.AlreadyRegisteredError); !dup {
			return nil, err
		}
	}
	return m, nil
}

var (
	descNSJobs = prometheus.NewDesc("kairos_namespace_jobs",
		"Jobs a namespace holds in a pool (ready, delayed, in flight and dead), as the engine counts them.",
		[]string{"pool", "namespace"}, nil)
	descNSBytes = prometheus.NewDesc("kairos_namespace_bytes",
		"Bytes of the jobs a namespace holds in a pool, as stored (each body and its metadata).",
		[]string{"pool", "namespace"}, nil)
	descNSQuotaJobs = prometheus.NewDesc("kairos_namespace_quota_jobs",
		"The namespace's max_jobs quota (its own, else the pool's default); absent when it has no such limit.",
		[]string{"pool", "namespace"}, nil)
	descNSQuotaBytes = prometheus.NewDesc("kairos_namespace_quota_bytes",
		"The namespace's max_bytes quota (its own, else the pool's default); absent when it has no such limit.",
		[]string{"pool", "namespace"}, nil)
)

// usageCollector is a prometheus.Collector of every namespace's usage and
// quota, from the engines' UsageAll and Quotas (server.poolQuotas), at
// most once per quotaScrapeEvery.
type usageCollector struct {
	s *Server

	mu   sync.Mutex
	at   time.Time
	last []quotaJSON
}

// Describe implements prometheus.Collector.
func (u *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNSJobs
	ch <- descNSBytes
	ch <- descNSQuotaJobs
	ch <- descNSQuotaBytes
}

// Collect implements prometheus.Collector.
func (u *usageCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range u.read() {
		ch <- prometheus.MustNewConstMetric(descNSJobs, prometheus.GaugeValue, float64(q.Jobs), q.Pool, q.Namespace)
		ch <- prometheus.MustNewConstMetric(descNSBytes, prometheus.GaugeValue, float64(q.Bytes), q.Pool, q.Namespace)
		if q.MaxJobs > 0 {
			ch <- prometheus.MustNewConstMetric(descNSQuotaJobs, prometheus.GaugeValue, float64(q.MaxJobs), q.Pool, q.Namespace)
		}
		if q.MaxBytes > 0 {
			ch <- prometheus.MustNewConstMetric(descNSQuotaBytes, prometheus.GaugeValue, float64(q.MaxBytes), q.Pool, q.Namespace)
		}
	}
}

// read returns the last reading, refreshed when older than
// quotaScrapeEvery. Scrapes wait for one another: one reading at a time.
func (u *usageCollector) read() []quotaJSON {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	if !u.at.IsZero() && now.Sub(u.at) < quotaScrapeEvery {
		return u.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), quotaScrapeTimeout)
	defer cancel()
	var all []quotaJSON
	for _, pool := range u.s.pools {
		if u.s.tenancyPool(pool) != pool {
			continue // a migrating pool: its namespaces are its target's
		}
		t, err := u.s.tenancyOf(pool)
		if err != nil {
			continue
		}
		list, err := u.s.poolQuotas(ctx, pool, t)
		if err != nil {
			u.s.log.WithError(err).WithField("pool", pool).Warn("metrics: namespace usage not read")
			continue
		}
		all = append(all, list...)
	}
	u.at, u.last = now, all
	return all
}
