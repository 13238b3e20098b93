package server

// The dashboard's view of namespace quotas (doc/dashboard.md): each
// namespace's usage against its quota, on the overview (per namespace of
// each pool) and on the namespace's page. The figures are GET /quota's
// (quota.go), read once per page.

import (
	"context"
	"strconv"
)

// uiUsage is a namespace's usage against its quota, ready for a template.
type uiUsage struct {
	Jobs, Bytes       int64
	MaxJobs, MaxBytes int64
	// Own: the namespace's own quota, not the pool's default.
	Own bool
	// JobsPct and BytesPct are the usage in percent of each limit (0
	// without one), capped at 100 for the bars.
	JobsPct, BytesPct int
	// Full says that a limit is reached: publishes answer 429.
	Full bool
}

func newUIUsage(q quotaJSON) *uiUsage {
	u := &uiUsage{Jobs: q.Jobs, Bytes: q.Bytes, MaxJobs: q.MaxJobs, MaxBytes: q.MaxBytes, Own: q.Source == quotaOwn}
	u.JobsPct, u.BytesPct = percent(q.Jobs, q.MaxJobs), percent(q.Bytes, q.MaxBytes)
	u.Full = q.MaxJobs > 0 && q.Jobs >= q.MaxJobs || q.MaxBytes > 0 && q.Bytes >= q.MaxBytes
	return u
}

// Limited says whether the namespace has any limit.
func (u *uiUsage) Limited() bool { return u.MaxJobs > 0 || u.MaxBytes > 0 }

// percent is used of max in whole percent, capped at 100; 0 when max is
// no limit.
func percent(used, max int64) int {
	if max <= 0 || used <= 0 {
		return 0
	}
	if used >= max {
		return 100
	}
	return int(used * 100 / max)
}

// poolUsage returns the usage and quota of every namespace of a pool
// that holds a job or has a quota, by namespace; nil when the pool's
// engine keeps none or cannot say now (the pages show no usage then,
// rather than fail).
func (s *Server) poolUsage(ctx context.Context, pool string) map[string]*uiUsage {
	t, err := s.tenancyOf(pool)
	if err != nil {
		return nil
	}
	list, err := s.poolQuotas(ctx, pool, t)
	if err != nil {
		s.log.WithError(err).WithField("pool", pool).Warn("dashboard: namespace usage not read")
		return nil
	}
	out := make(map[string]*uiUsage, len(list))
	for _, q := range list {
		out[q.Namespace] = newUIUsage(q)
	}
	return out
}

// namespaceUsage returns one namespace's usage and quota, or nil (as
// poolUsage).
func (d *dashboard) namespaceUsage(ctx context.Context, pool, ns string) *uiUsage {
	t, err := d.s.tenancyOf(pool)
	if err != nil {
		return nil
	}
	q, err := namespaceQuota(ctx, t, pool, ns)
	if err != nil {
		d.s.log.WithError(err).WithField("pool", pool).Warn("dashboard: namespace usage not read")
		return nil
	}
	return newUIUsage(q)
}

// humanBytes writes a byte count for people: 512 B, 1.5 KiB, 64 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if v >= 100 {
		s = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return s + " " + string("KMGTPE"[exp]) + "iB"
}
