// Package engine holds Kairos's domain: jobs, queues, the errors every
// storage implementation returns, and the Engine interface that the HTTP
// server drives. The Redis implementation lives in engine/rdb; the contract
// that every implementation must pass lives in engine/enginetest.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits shared by the HTTP layer and the engines.
const (
	// MaxBodySize is the largest job body accepted (lmstfy: 1 MiB).
	MaxBodySize = 1 << 20
	// MaxBatchConsume is the largest count of one consume call.
	MaxBatchConsume = 100
	// MaxBulkPublish is the largest number of jobs in one bulk publish.
	MaxBulkPublish = 64
	// MaxTries is the largest tries value (tries are a uint16 on the wire).
	MaxTries = 65535
)

// Sentinel errors. Implementations wrap them with %w; callers test them
// with errors.Is.
var (
	// ErrJobNotFound means the job's body does not exist (never published,
	// acknowledged, expired or deleted).
	ErrJobNotFound = errors.New("engine: job not found")
	// ErrQueueEmpty means a peek found no live job in the ready queue.
	ErrQueueEmpty = errors.New("engine: queue is empty")
	// ErrJobExists means a publish named a job ID that already exists.
	ErrJobExists = errors.New("engine: job already exists")
	// ErrInvalid means a request the engine refuses (bad name, zero tries…).
	ErrInvalid = errors.New("engine: invalid request")
	// ErrClosed means the engine was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrStaleReceipt means a receipt no longer matches the job's current
	// delivery: the job was re-delivered, released, acknowledged or is not
	// in flight.
	ErrStaleReceipt = errors.New("engine: stale receipt")
	// ErrNotReplicated means a publish was written on the Redis master but
	// not acknowledged by enough replicas within the pool's WAIT timeout
	// (the durability option): it may be lost in a failover. The publish
	// returns the job IDs with it: the jobs exist on the master.
	ErrNotReplicated = errors.New("engine: publish not replicated")
	// ErrKeyExists means a publish named a job key (idempotency key) that is
	// already taken; the error comes with the first job's ID.
	ErrKeyExists = errors.New("engine: job key exists")
	// ErrUnavailable means the store cannot serve the request for now
	// (unreachable, loading, read-only, failing over): the request may
	// succeed if retried later. The HTTP layer answers 503 with Retry-After.
	// engine/rdb returns go-redis's own errors, which the server classifies
	// the same way; other implementations wrap this sentinel.
	ErrUnavailable = errors.New("engine: store unavailable")
	// ErrPoolFull means the pool's store refused a write for memory (a
	// Redis at maxmemory under noeviction). It is not an outage: the same
	// publish fails until consumers make room, while consume, ACK, delete
	// and release keep working so that tenants can drain. The HTTP layer
	// answers 507. Engines return it as a *PoolFullError naming the pool.
	ErrPoolFull = errors.New("engine: pool is full")
)

// PoolFullError is ErrPoolFull for one pool, with the store's refusal.
type PoolFullError struct {
	Pool string
	// Reserve says that the store had room left, but only in the pool's
	// memory reserve, kept for the namespaces holding less than their
	// share (engine/rdb's Options.MemoryReserve): the engine refused the
	// publish before writing, not the store.
	Reserve bool
	Err     error
}

func (e *PoolFullError) Error() string {
	return "engine: pool " + e.Pool + " is full: " + e.Err.Error()
}

// Is makes errors.Is(err, ErrPoolFull) true.
func (e *PoolFullError) Is(target error) bool { return target == ErrPoolFull }

// Unwrap returns the store's refusal.
func (e *PoolFullError) Unwrap() error { return e.Err }

// MaxPriority is the highest per-job priority.
const MaxPriority = 255

// JobState is where a job is.
type JobState string

// Job states, as GET …/job/:id reports them.
const (
	StateReady    JobState = "ready"
	StateDelayed  JobState = "delayed"
	StateInFlight JobState = "in_flight"
	StateDead     JobState = "dead"
)

// DeadReason says why a job entered the dead letter.
type DeadReason string

// Dead letter reasons.
const (
	ReasonTTRExpired    DeadReason = "ttr_expired"
	ReasonNacked        DeadReason = "nacked"
	ReasonWebhookFailed DeadReason = "webhook_failed"
)

// Job is one job as the engine hands it out.
type Job struct {
	Namespace string
	Queue     string
	ID        string
	Body      []byte
	// TTL is the time the job has left to live; 0 means it never expires.
	TTL time.Duration
	// Tries is the number of deliveries left: after the decrement for a
	// consumed job, as stored for a peeked one.
	Tries uint16
	// Attributes are the job's attributes (v1 job IDs only); nil otherwise.
	Attributes map[string]string

	// Kairos extensions.

	// Receipt identifies this delivery of a consumed job: release, touch
	// and a receipt-checked ACK only act on the current delivery.
	Receipt string
	// State is where the job is (peek job only).
	State JobState
	// DueAt is when a delayed job becomes ready or an in-flight job's TTR
	// ends; zero otherwise.
	DueAt time.Time
	// Deliveries is how many times the job was handed to a consumer.
	Deliveries int
	// Priority is the job's priority within its queue (0 = default).
	Priority int
	// DeadReason and DeadAt describe a dead job.
	DeadReason DeadReason
	DeadAt     time.Time
	// TraceParent and TraceState are the W3C trace context stored with the
	// job at publish ("" when it had none): a consumer continues the
	// producer's trace from them.
	TraceParent string
	TraceState  string
	// Attempts are the job's last deliveries, newest first (peek job
	// only; MaxAttempts at most).
	Attempts []Attempt
	// LastError is the error text of the job's last delivery that ended
	// with one ("" when none did): on peek job and dead-letter listings.
	LastError string
	// Group is the job's group within its queue ("" = the default group;
	// issue #32, groups.go).
	Group string
}

// PublishRequest describes one job to publish.
type PublishRequest struct {
	Namespace string
	Queue     string
	// ID is the job ID; empty means the engine generates one (the normal
	// case: the HTTP API never lets clients choose).
	ID   string
	Body []byte
	// TTL is the job's lifetime from publish; 0 means forever.
	TTL time.Duration
	// Delay is the time before the job becomes ready.
	Delay time.Duration
	// DueAt, when not zero, is when the job becomes ready, instead of
	// Delay (which must then be 0): the engine stores this instant itself,
	// to the millisecond (a finer one is rounded up), whenever its clock
	// reads at the publish, rather than a delay added to a later reading.
	// A DueAt not after the publish makes the job ready at once.
	DueAt time.Time
	// Tries is the maximum number of deliveries (≥ 1).
	Tries uint16
	// Attributes, when Versioned, are stored with the body.
	Attributes map[string]string
	// Versioned asks for a v1 job ID ("1" + ULID) and the JSON payload
	// that carries attributes (lmstfy's Enable-Job-Version: YES).
	Versioned bool
	// Replaces names a job of the same queue that is deleted in the same
	// atomic step as this publish (lmstfy's re-publish).
	Replaces string
	// Priority orders ready jobs within the queue: higher first, FIFO among
	// equals (0..MaxPriority; 0 is the default and costs nothing).
	Priority int
	// Key is an idempotency key: while it lives (the job's TTL), publishing
	// the same key again returns the first job's ID with ErrKeyExists.
	Key string
	// TraceParent and TraceState, when TraceParent is not empty, are a W3C
	// trace context (already checked with ValidTraceParent and
	// ValidTraceState) stored with the job and handed back with every
	// delivery, peek and dead-letter listing of it.
	TraceParent string
	TraceState  string
	// Group puts the job in a group of its queue (ValidGroup; "" = the
	// default group): consumes serve a queue's groups in turn, and
	// GroupMaxInFlight limits each (groups.go). The job keeps its group
	// through retries, the dead letter and respawn.
	Group string
}

// ConsumeRequest describes one consume call.
type ConsumeRequest struct {
	Namespace string
	// Queues are tried in order: the first has the highest priority.
	Queues []string
	// TTR is the time the consumer has to acknowledge before the job comes
	// back (or goes to the dead letter when no tries are left).
	TTR time.Duration
	// Timeout is how long to wait for a job; 0 means do not wait.
	Timeout time.Duration
	// Count is the largest number of jobs to return (1..MaxBatchConsume).
	Count int
	// Worker names the consumer in the jobs' histories (WorkerName made
	// it safe); "" when it gave none.
	Worker string
}

// DeadLetter is the summary lmstfy's dead letter peek returns.
type DeadLetter struct {
	Size int64
	// Head is the oldest dead job's ID, or "" when the dead letter is empty.
	Head string
}

// MaxDeadScan is the most dead-letter entries one filtered listing
// (DeadLetterQuery.Reason) examines: a filter that matches few entries
// of a long dead letter costs a bounded amount of work per call, and the
// caller goes on from DeadLetterPage.Next.
const MaxDeadScan = 1000

// DeadLetterQuery selects a page of the dead letter.
type DeadLetterQuery struct {
	// Offset counts entries from the oldest, or from the newest when
	// Newest is set.
	Offset int64
	// Limit is the most jobs on the page (1..1000).
	Limit int64
	// Newest lists the newest death first instead of the oldest.
	Newest bool
	// Reason, when not empty, keeps only the jobs that died for it; the
	// listing then examines at most Scan entries (0 or more than
	// MaxDeadScan: MaxDeadScan).
	Reason DeadReason
	Scan   int64
	// Error, when not empty, keeps only the jobs whose last error holds
	// it (a plain substring, at most MaxErrorText bytes); the listing then
	// examines at most Scan entries, as with Reason.
	Error string
}

// Filtered reports whether q keeps only some jobs (by reason or error
// text), so that a listing examines at most Scan entries.
func (q DeadLetterQuery) Filtered() bool { return q.Reason != "" || q.Error != "" }

// Valid reports whether q is a query an engine serves: offset ≥ 0, limit
// 1..1000, a known reason, an error text of at most MaxErrorText bytes.
func (q DeadLetterQuery) Valid() bool {
	return q.Offset >= 0 && q.Limit >= 1 && q.Limit <= 1000 && (q.Reason == "" || ValidDeadReason(q.Reason)) &&
		len(q.Error) <= MaxErrorText
}

// DeadLetterPage is a page of the dead letter.
type DeadLetterPage struct {
	// Jobs are the page's dead jobs, with their bodies. Entries whose job
	// is gone (deleted, expired by the dead TTL) are skipped.
	Jobs []*Job
	// Next is the Offset of the next page (the entry after the last one
	// examined), or -1 when the last entry was examined.
	Next int64
	// Size is the number of entries in the dead letter.
	Size int64
}

// ValidDeadReason reports whether r is a reason the engine records.
func ValidDeadReason(r DeadReason) bool {
	return r == ReasonTTRExpired || r == ReasonNacked || r == ReasonWebhookFailed
}

// DeadLetterPart is one of several dead letters listed as one (the
// shards of a queue, the pools of a migration), in their oldest-first
// order.
type DeadLetterPart struct {
	// Size is the part's number of entries.
	Size int64
	// List lists a page of the part alone.
	List func(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error)
}

// ListDeadLetterParts lists parts as one dead letter: the parts one after
// the other, each oldest first, or, with q.Newest, the exact reverse of
// that sequence. Offsets count entries over the sequence, and a filtered
// listing examines at most q.Scan entries over all parts together.
func ListDeadLetterParts(ctx context.Context, parts []DeadLetterPart, q DeadLetterQuery) (DeadLetterPage, error) {
	if !q.Valid() {
		return DeadLetterPage{}, fmt.Errorf("list dead letter: %w", ErrInvalid)
	}
	out := DeadLetterPage{Next: -1}
	for _, p := range parts {
		out.Size += p.Size
	}
	budget, want := q.Limit, q.Limit // entries to examine, jobs to find
	if q.Filtered() {
		budget = q.Scan
		if budget <= 0 || budget > MaxDeadScan {
			budget = MaxDeadScan
		}
	}
	start, off := int64(0), q.Offset // start: the part's first position in the sequence
	for i := range parts {
		p := parts[i]
		if q.Newest {
			p = parts[len(parts)-1-i]
		}
		if off >= p.Size {
			off -= p.Size
			start += p.Size
			continue
		}
		if budget <= 0 || want <= 0 {
			out.Next = start + off
			return out, nil
		}
		sub := q
		sub.Offset, sub.Scan, sub.Limit = off, budget, want
		if !q.Filtered() {
			sub.Limit = min(want, p.Size-off)
		}
		page, err := p.List(ctx, sub)
		if err != nil {
			return out, err
		}
		out.Jobs = append(out.Jobs, page.Jobs...)
		end := page.Next
		if end < 0 {
			end = p.Size
		}
		budget -= end - off
		if !q.Filtered() {
			want -= end - off
		} else {
			want -= int64(len(page.Jobs))
		}
		if page.Next >= 0 && page.Next < p.Size {
			out.Next = start + page.Next
			return out, nil
		}
		start += p.Size
		off = 0
	}
	return out, nil
}

// Engine is the storage contract the server drives. One Engine serves one
// pool. Every method is safe for concurrent use.
//
// It is lmstfy's operations (Core), the Kairos extensions (Extensions),
// and the forms of the hot operations that the server's event loops use
// (Batcher, Pipeliner, Watcher). Every engine has all of them, so that no
// pool loses a route or the event loops for want of a method (a migrating
// pool once lost the loops that way, found by a type assertion): an engine
// with nothing better to offer for the last three gets a correct generic
// form from Serial. The contract suite (engine/enginetest) covers it all.
type Engine interface {
	Core
	Extensions
	Batcher
	Pipeliner
	Watcher
}

// Core is lmstfy's operations: what every queue engine does.
type Core interface {
	// Publish stores one job atomically and returns its ID.
	Publish(ctx context.Context, req *PublishRequest) (string, error)
	// PublishBatch stores several jobs of one queue in one atomic step:
	// either all are published or none is.
	PublishBatch(ctx context.Context, reqs []*PublishRequest) ([]string, error)
	// Consume takes up to req.Count ready jobs, waiting up to req.Timeout
	// for the first one. No job is (nil, nil).
	Consume(ctx context.Context, req *ConsumeRequest) ([]*Job, error)
	// Delete acknowledges (deletes) a job; deleting an unknown job is not
	// an error.
	Delete(ctx context.Context, namespace, queue, jobID string) error
	// PeekQueue returns the next live job of the ready queue without
	// consuming it, or ErrQueueEmpty.
	PeekQueue(ctx context.Context, namespace, queue string) (*Job, error)
	// PeekJob returns a job by ID in any state, or ErrJobNotFound.
	PeekJob(ctx context.Context, namespace, queue, jobID string) (*Job, error)
	// Size returns the length of the ready queue.
	Size(ctx context.Context, namespace, queue string) (int64, error)
	// Destroy deletes every ready, delayed and in-flight job of the queue
	// and returns how many job entries it removed. The dead letter stays.
	Destroy(ctx context.Context, namespace, queue string) (int64, error)
	// PeekDeadLetter returns the dead letter's size and oldest job ID.
	PeekDeadLetter(ctx context.Context, namespace, queue string) (DeadLetter, error)
	// DeadLetterSize returns the dead letter's size.
	DeadLetterSize(ctx context.Context, namespace, queue string) (int64, error)
	// RespawnDeadLetter moves up to limit of the oldest dead jobs to the
	// tail of the ready queue with one try, setting their TTL (0 = keep
	// forever), and returns how many moved.
	RespawnDeadLetter(ctx context.Context, namespace, queue string, limit int64, ttl time.Duration) (int64, error)
	// DeleteDeadLetter deletes up to limit of the oldest dead jobs and
	// returns how many it deleted.
	DeleteDeadLetter(ctx context.Context, namespace, queue string, limit int64) (int64, error)
	// Info returns the namespaces this pool knows with their queues.
	Info(ctx context.Context) (map[string][]string, error)
}

// ReleaseRequest hands an in-flight job back (nack).
type ReleaseRequest struct {
	Namespace, Queue, ID string
	// Receipt must match the job's current delivery.
	Receipt string
	// Delay before the job is ready again; UsePolicy applies the queue's
	// backoff policy instead.
	Delay     time.Duration
	UsePolicy bool
	// KeepTry gives back the try the delivery spent; otherwise it stays
	// spent and a job with no tries left goes to the dead letter.
	KeepTry bool
	// Reason is recorded if the job goes to the dead letter.
	Reason DeadReason
	// Error is why the consumer gave the job back, recorded in the job's
	// history (at most MaxErrorText bytes: ErrorText cuts it).
	Error string
}

// QueueConfig holds a queue's Kairos settings.
type QueueConfig struct {
	// Backoff is the retry policy applied when a TTR expires or a job is
	// nacked without a delay; nil means lmstfy's: ready again at once.
	Backoff *Backoff `json:"backoff,omitempty"`
	// DeadTTL, when positive, is how long dead jobs are kept.
	DeadTTL time.Duration `json:"-"`
	// Paused queues hand out no jobs; publishing continues.
	Paused bool `json:"paused"`
	// Shards spreads the queue over that many physical queues (hot-queue
	// shards, 1..MaxShards; doc/scaling.md): publishes spread over them,
	// consumes look across them, ordering is per shard. QueueConfig
	// reports 1 for an unsharded queue; 0 in SetQueueConfig leaves the
	// queue's shards as they are.
	Shards int `json:"shards,omitempty"`
	// MaxInFlight limits the queue's jobs in flight at once, across every
	// server (0 = no limit); on a sharded queue each shard holds its part
	// of it (groups.go, doc/API.md).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// GroupMaxInFlight limits each group's jobs in flight at once (0 = no
	// limit).
	GroupMaxInFlight int `json:"group_max_in_flight,omitempty"`
	// GroupWeights gives groups a weight in the round robin
	// (1..MaxGroupWeight; a group not named has weight 1): a group of
	// weight w is served w jobs for each job of a group of weight 1.
	GroupWeights map[string]int `json:"group_weights,omitempty"`
}

// MaxShards is the most shards a queue may have (QueueConfig.Shards).
const MaxShards = 64

// Batcher is the part of Engine that the server's event loops use: the
// hot operations of many independent requests, of any queues, in
// as few storage round trips as it can. Unlike PublishBatch the operations
// do not share a fate by contract: each gets its own result.
type Batcher interface {
	// PublishEach publishes reqs[i] and sets ids[i] and errs[i] (both
	// slices are as long as reqs).
	PublishEach(ctx context.Context, reqs []*PublishRequest, ids []string, errs []error)
	// ConsumeEach takes for reqs[i] the jobs ready now, without waiting
	// whatever its Timeout, and sets jobs[i] and errs[i]. A request with a
	// Timeout (one that will wait with Consume if it finds nothing) may be
	// answered nothing without a look when the engine knows its queues to
	// be empty and a Consume would be woken by any job made ready since.
	ConsumeEach(ctx context.Context, reqs []*ConsumeRequest, jobs [][]*Job, errs []error)
	// DeleteEach acknowledges (deletes) refs[i] as Delete does, or as
	// Extensions.Ack does when it has a Receipt, and sets errs[i].
	DeleteEach(ctx context.Context, refs []JobRef, errs []error)
}

// Pipeliner is the part of Engine that lets an event loop's pass make its
// ACKs, publishes and consumes in one storage round trip instead of one
// each. Running the steps one after the other is a correct Together
// (Serial's).
type Pipeliner interface {
	// Together runs the steps concurrently and returns when all have
	// returned. Their storage calls are sent together, in step order: a
	// call of steps[i] runs before the call of steps[i+1] that was sent
	// with it, as if the steps had run one after the other. A step must
	// not wait for another step.
	Together(ctx context.Context, steps ...func(context.Context))
}

// Watcher is the part of Engine that lets an event loop long-poll for
// many consumers without a goroutine each. An engine that cannot watch
// answers ok false (Serial's Watch): the loop then waits with Consume.
type Watcher interface {
	// Watch arranges for fn to be called once, from another goroutine,
	// when a job may have become ready in one of ns's queues: the caller
	// should then look again (ConsumeEach). fn must not block.
	//
	// look is true when the caller must also look once now, since a job
	// may have come after its last look and before the watch began; it is
	// false when the engine knows the queues to be empty, or will call fn
	// once it can tell. stop ends a watch whose fn has not been acted on;
	// a wake-up it got and will not use goes to another consumer. ok is
	// false when the engine cannot watch now: wait with Consume instead.
	Watch(ns string, queues []string, fn func()) (stop func(), look, ok bool)
}

// JobRef names one job, and with a Receipt one delivery of it.
type JobRef struct {
	Namespace, Queue, ID string
	// Receipt, when not empty, makes DeleteEach's ACK Extensions.Ack's:
	// of that delivery only (ErrStaleReceipt, ErrJobNotFound).
	Receipt string
}

// Extensions is what Kairos offers beyond lmstfy's operations: receipts,
// release, touch, idempotency keys, queue settings and dead-letter
// browsing.
type Extensions interface {
	// Ack deletes a job only if receipt matches its current delivery.
	Ack(ctx context.Context, namespace, queue, jobID, receipt string) error
	// Release hands an in-flight job back, now or later.
	Release(ctx context.Context, req *ReleaseRequest) error
	// Touch extends an in-flight job's TTR to now+ttr and returns the new
	// due time.
	Touch(ctx context.Context, namespace, queue, jobID, receipt string, ttr time.Duration) (time.Time, error)
	// CancelKey deletes the job published with an idempotency key and
	// returns its ID.
	CancelKey(ctx context.Context, namespace, queue, key string) (string, error)
	// QueueConfig reads and SetQueueConfig writes a queue's settings.
	QueueConfig(ctx context.Context, namespace, queue string) (QueueConfig, error)
	SetQueueConfig(ctx context.Context, namespace, queue string, cfg QueueConfig) error
	// ListDeadLetter returns up to limit dead jobs, oldest first, starting
	// offset jobs from the oldest, with their bodies.
	ListDeadLetter(ctx context.Context, namespace, queue string, offset, limit int64) ([]*Job, error)
	// ListDeadLetterPage returns a page of the dead letter in either
	// order, filtered by reason, with where the next page starts and the
	// dead letter's size. ListDeadLetter is its default: oldest first,
	// every reason.
	ListDeadLetterPage(ctx context.Context, namespace, queue string, q DeadLetterQuery) (DeadLetterPage, error)
	// RespawnDeadJob and DeleteDeadJob act on one dead job by ID.
	RespawnDeadJob(ctx context.Context, namespace, queue, jobID string, ttl time.Duration) error
	DeleteDeadJob(ctx context.Context, namespace, queue, jobID string) error
}

// QueueStats are the sizes of one queue, for metrics and dashboards.
type QueueStats struct {
	Namespace  string
	Queue      string
	Ready      int64
	Timer      int64
	DeadLetter int64
	// OldestReady is when the job at the head of the ready queue (the
	// next one a consumer gets, or the older of the heads of the ready
	// list and the priority set) became ready: its publish plus its delay,
	// as its ID tells. A job back from a retry or a TTR expiry counts from
	// its first readiness. Zero when no live job is ready.
	OldestReady time.Time
}
