package engine

import (
	"context"
	"errors"
	"strconv"
)

// What keeps the namespaces of one pool apart (issue #31): the jobs and
// body bytes each namespace holds, counted by the scripts that create and
// remove jobs, and the quotas that refuse a publish that would exceed
// them. engine/rdb implements Tenancy; the server asks for it with a type
// assertion, as for Dashboard and Scheduler.

// Usage is what a namespace holds in a pool: its stored jobs (ready,
// delayed, in flight and dead) and the bytes of their bodies.
type Usage struct {
	Jobs  int64 `json:"jobs"`
	Bytes int64 `json:"bytes"`
}

// Quota limits what a namespace may hold in a pool; 0 means no limit.
type Quota struct {
	MaxJobs  int64 `json:"max_jobs"`
	MaxBytes int64 `json:"max_bytes"`
}

// None reports whether q limits nothing.
func (q Quota) None() bool { return q.MaxJobs <= 0 && q.MaxBytes <= 0 }

// ErrQuotaExceeded means a publish would take a namespace beyond its
// quota: nothing was written. The HTTP layer answers 429. Engines return
// it as a *QuotaError naming the limit.
var ErrQuotaExceeded = errors.New("engine: namespace quota exceeded")

// QuotaError is ErrQuotaExceeded for one namespace and limit.
type QuotaError struct {
	Namespace string
	// Limit is "max_jobs" or "max_bytes"; Value is the quota's value.
	Limit string
	Value int64
}

// Error is the message clients see: "namespace quota exceeded: max_jobs 50".
func (e *QuotaError) Error() string {
	return "namespace quota exceeded: " + e.Limit + " " + strconv.FormatInt(e.Value, 10)
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// Tenancy is the part of an engine that counts and limits namespaces.
type Tenancy interface {
	// Usage returns what the namespace holds now.
	Usage(ctx context.Context, namespace string) (Usage, error)
	// UsageAll returns the usage of every namespace holding a job.
	UsageAll(ctx context.Context) (map[string]Usage, error)
	// Quota returns the namespace's quota and whether it was set for it
	// (false: the pool's default, which may be none).
	Quota(ctx context.Context, namespace string) (q Quota, set bool, err error)
	// SetQuota sets the namespace's quota; publishes see it within the
	// engine's refresh interval on every server.
	SetQuota(ctx context.Context, namespace string, q Quota) error
	// DeleteQuota removes the namespace's own quota: the default applies.
	DeleteQuota(ctx context.Context, namespace string) error
	// Quotas returns every quota set for a namespace.
	Quotas(ctx context.Context) (map[string]Quota, error)
}

// PublishRefuser is an engine that can tell, without I/O, that it would
// refuse every publish of a namespace into a queue now: engine/rdb, whose
// memory reserve refuses the namespaces holding at least their share of a
// node in its reserve (doc/config.md, "The memory reserve"). The server
// asks before a publish's rate limit and body (server/admit.go), so that a
// namespace publishing into a full pool as fast as it can costs neither
// the admin Redis nor the reading of its bodies; the engine still decides
// every publish this lets through.
type PublishRefuser interface {
	// RefusesPublish returns the error the engine would return for any
	// publish of namespace into queue now (a *PoolFullError), or nil when
	// a publish may go on to the engine (which may still refuse it). It
	// counts nothing and never blocks.
	RefusesPublish(namespace, queue string) error
}
