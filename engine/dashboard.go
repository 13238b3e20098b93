package engine

import (
	"context"
	"time"
)

// What the admin dashboard reads from a pool beyond Engine: the history of
// its queues' counters, their sizes in bulk, jobs by state, and the pool's
// topology. engine/rdb implements it; the server asks for it with a type
// assertion, so an engine without it only lacks the dashboard's data.

// LatencyBoundsMS are the upper bounds, in milliseconds, of the consume
// latency histogram that history keeps per queue and minute: a job
// consumed after d ms counts in the first bucket whose bound is ≥ d, or
// in the last bucket (LatencyBuckets-1) when d exceeds them all.
var LatencyBoundsMS = [...]int64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000}

// LatencyBuckets is the number of buckets of the latency histogram: one
// per bound and one above the last.
const LatencyBuckets = len(LatencyBoundsMS) + 1

// LatencyBucket returns the bucket of a latency of ms milliseconds.
func LatencyBucket(ms int64) int {
	for i, b := range LatencyBoundsMS {
		if ms <= b {
			return i
		}
	}
	return LatencyBuckets - 1
}

// Counts are the counters of one queue (or a sum of queues) over a time.
type Counts struct {
	// Published jobs, jobs Consumed (delivered to consumers), ACKs that
	// deleted their job, deliveries Retried (released, or whose TTR
	// expired with tries left) and jobs that went Dead.
	Published, Consumed, Acked, Retried, Dead int64
	// Latency counts consumed jobs by publish→consume time (delay
	// included), in the buckets of LatencyBoundsMS.
	Latency [LatencyBuckets]int64
}

// Add adds o to c.
func (c *Counts) Add(o *Counts) {
	c.Published += o.Published
	c.Consumed += o.Consumed
	c.Acked += o.Acked
	c.Retried += o.Retried
	c.Dead += o.Dead
	for i := range c.Latency {
		c.Latency[i] += o.Latency[i]
	}
}

// Zero reports whether every counter is 0.
func (c *Counts) Zero() bool {
	if c.Published|c.Consumed|c.Acked|c.Retried|c.Dead != 0 {
		return false
	}
	for _, n := range c.Latency {
		if n != 0 {
			return false
		}
	}
	return true
}

// LatencyPercentile returns the bound (ms) of the bucket in which the p-th
// quantile (0 < p ≤ 1) of the latencies falls, the last bound + 1 for the
// bucket above them all, and -1 when nothing was consumed.
func (c *Counts) LatencyPercentile(p float64) int64 {
	var total int64
	for _, n := range c.Latency {
		total += n
	}
	if total == 0 {
		return -1
	}
	want := int64(p*float64(total) + 0.999999)
	if want < 1 {
		want = 1
	}
	var seen int64
	for i, n := range c.Latency {
		seen += n
		if seen >= want {
			if i < len(LatencyBoundsMS) {
				return LatencyBoundsMS[i]
			}
			break
		}
	}
	return LatencyBoundsMS[len(LatencyBoundsMS)-1] + 1
}

// QueueDetail is what the dashboard's queue table shows of one queue.
type QueueDetail struct {
	QueueStats
	// Delayed and InFlight split Timer; InFlightExact is false when the
	// split was estimated from a sample of a large timer.
	Delayed, InFlight int64
	InFlightExact     bool
	Paused            bool
	// Recent sums the queue's history over the RecentMinutes complete
	// minutes before now.
	Recent Counts
	// Current is the current minute's history so far (up to a flush
	// interval late), read by QueueActivity only: the attention list
	// sees a job die, or a consumer come back, without waiting for the
	// minute to end. Latency is not read.
	Current Counts
	// MaxInFlight is the queue's max_in_flight (0: none) and
	// LimitInFlight its jobs in flight as the limit counts them (every
	// shard; read only when it has a limit). AtLimit is true while the
	// limit holds back ready jobs: it (a shard's part of it, for a sharded
	// queue) is reached and ready jobs wait, so consumes get nothing from
	// it until a job leaves flight (issue #32).
	MaxInFlight, LimitInFlight int64
	AtLimit                    bool
}

// RecentMinutes is the window of QueueDetail.Recent.
const RecentMinutes = 5

// JobList names the jobs ListJobs lists.
type JobList string

// The lists of ListJobs.
const (
	ListReady     JobList = "ready"
	ListDelayed   JobList = "delayed"
	ListInFlight  JobList = "in_flight"
	ListScheduled JobList = "scheduled" // delayed and in flight
)

// Dashboard is what the admin dashboard reads from a pool.
type Dashboard interface {
	// History returns the counters of each minute from from (rounded
	// down to the minute) for minutes minutes: of queue ns/q, of
	// namespace ns when q is "", of the whole pool when ns is "" too.
	History(ctx context.Context, ns, q string, from time.Time, minutes int) ([]Counts, error)
	// NamespaceQueues returns the queues of namespace ns with their sizes,
	// in a few round trips whatever their number.
	NamespaceQueues(ctx context.Context, ns string) ([]QueueStats, error)
	// QueueDetails returns the details of the named queues of ns, in one
	// round trip.
	QueueDetails(ctx context.Context, ns string, queues []string) ([]QueueDetail, error)
	// QueueActivity returns what the attention list and the sorts by
	// rate and age need of many queues of ns (QueueDetail without the
	// Delayed/InFlight split: sizes, paused, oldest ready, recent and
	// current counts), in one round trip per few hundred queues.
	QueueActivity(ctx context.Context, ns string, queues []string) ([]QueueDetail, error)
	// ListJobs returns up to limit jobs of list, from cursor (0 first),
	// and the cursor of the next page (0 when there is none).
	ListJobs(ctx context.Context, ns, q string, list JobList, cursor int64, limit int) ([]*Job, int64, error)
	// FindJob looks for a job by ID in every queue of the pool; it
	// returns ErrJobNotFound when there is none.
	FindJob(ctx context.Context, id string) (*Job, error)
	// Topology is "standalone" or "cluster": what the pool's client talks
	// to (a Sentinel-managed master is a standalone one).
	Topology() string
	// Ping checks that the pool's Redis answers.
	Ping(ctx context.Context) error
}
