package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// LimitsCollector exports, at scrape time, the jobs in flight of every
// queue that has a max_in_flight (issue #32), beside that limit:
// kairos_queue_in_flight and kairos_queue_max_in_flight, per pool,
// namespace and queue (a sharded queue's shards summed), so that a queue
// held at its limit can be seen and alerted on. There is no series per
// group: their number is the tenants', not bounded (the dashboard and
// GET /queue/:namespace/:queue/groups show the groups). One pipeline per
// namespace: an HGET of the limit and an HLEN of the in-flight hash per
// queue.
type LimitsCollector struct {
	engines  []*Engine
	inFlight *prometheus.Desc
	limit    *prometheus.Desc
}

// NewLimitsCollector returns a collector over engines.
func NewLimitsCollector(engines ...*Engine) *LimitsCollector {
	labels := []string{"pool", "namespace", "queue"}
	return &LimitsCollector{
		engines: engines,
		inFlight: prometheus.NewDesc("kairos_queue_in_flight",
			"Jobs of the queue in flight now, for queues with a max_in_flight (every shard).", labels, nil),
		limit: prometheus.NewDesc("kairos_queue_max_in_flight",
			"The queue's max_in_flight (queues without one are not exported).", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LimitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.limit
}

// Collect implements prometheus.Collector.
func (c *LimitsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range c.engines {
		ls, err := e.queueLimits(ctx)
		if err != nil {
			e.log.WithError(err).Warn("collect in-flight limits")
			continue
		}
		for _, l := range ls {
			ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(l.inFlight), e.pool, l.ns, l.queue)
			ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(l.limit), e.pool, l.ns, l.queue)
		}
	}
}

// queueLimit is one limited queue's in-flight count and limit.
type queueLimit struct {
	ns, queue       string
	inFlight, limit int64
}

// queueLimits returns the queues of the pool that have a max_in_flight
// (mifq in the config hash of each shard: the queue's limit as set), with
// their jobs in flight summed over the shards.
func (e *Engine) queueLimits(ctx context.Context) ([]queueLimit, error) {
	info, err := e.physicalQueues(ctx)
	if err != nil {
		return nil, err
	}
	var out []queueLimit
	for ns, qs := range info {
		limits := make([]*redis.StringCmd, len(qs))
		counts := make([]*redis.IntCmd, len(qs))
		if _, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range qs {
				limits[i] = p.HGet(ctx, configKey(ns, q), "mifq")
				counts[i] = p.HLen(ctx, groupKeyPrefix(ns, q)+"i")
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("in-flight limits %s: %w", ns, err)
		}
		at := map[string]int{} // a sharded queue's place in out
		for i, q := range qs {
			limit, _ := strconv.ParseInt(limits[i].Val(), 10, 64)
			n := counts[i].Val()
			q = logicalQueue(q)
			if k, ok := at[q]; ok {
				out[k].inFlight += n
				out[k].limit = max(out[k].limit, limit)
				continue
			}
			at[q] = len(out)
			out = append(out, queueLimit{ns: ns, queue: q, inFlight: n, limit: limit})
		}
	}
	// Only the queues with a limit.
	kept := out[:0]
	for _, l := range out {
		if l.limit > 0 {
			kept = append(kept, l)
		}
	}
	return kept, nil
}
