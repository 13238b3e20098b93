package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Namespace quotas (Kairos extension, doc/API.md#quotas): what a namespace
// holds in a pool against what it may hold. A publish that would take a
// namespace beyond its quota is refused, writing nothing, with an error
// matching ErrQuotaExceeded.

// Quota limits what a namespace may hold in a pool; 0 is no limit.
type Quota struct {
	// MaxJobs bounds the namespace's stored jobs (ready, delayed, in
	// flight and dead).
	MaxJobs int64
	// MaxBytes bounds their bytes as stored: each body and a few dozen
	// bytes of metadata.
	MaxBytes int64
}

// NamespaceQuota is a namespace's quota and usage.
type NamespaceQuota struct {
	Pool, Namespace string
	// Quota is the namespace's own quota, or the pool's default when
	// Default is true.
	Quota   Quota
	Default bool
	// Jobs and Bytes are what the namespace holds now.
	Jobs, Bytes int64
}

// QuotaList is every namespace's quota and usage (Admin.Quotas).
type QuotaList struct {
	// Defaults are the pools' default quotas, by pool.
	Defaults map[string]Quota
	// Namespaces holds every namespace with a job or a quota of its own,
	// by pool then namespace.
	Namespaces []NamespaceQuota
}

type wireQuota struct {
	Bytes     int64  `json:"bytes"`
	Jobs      int64  `json:"jobs"`
	MaxBytes  int64  `json:"max_bytes"`
	MaxJobs   int64  `json:"max_jobs"`
	Namespace string `json:"namespace"`
	Pool      string `json:"pool"`
	Source    string `json:"source"`
}

func (w wireQuota) quota() NamespaceQuota {
	return NamespaceQuota{
		Pool: w.Pool, Namespace: w.Namespace, Quota: Quota{MaxJobs: w.MaxJobs, MaxBytes: w.MaxBytes},
		Default: w.Source == "default", Jobs: w.Jobs, Bytes: w.Bytes,
	}
}

// Quota returns the quota (its own or the pool's default) and the usage
// of namespace in pool ("" means "default").
func (a *Admin) Quota(ctx context.Context, pool, namespace string) (NamespaceQuota, error) {
	if namespace == "" {
		return NamespaceQuota{}, argError("empty namespace")
	}
	var out wireQuota
	if err := a.get(ctx, a.path("quota", namespace), poolQuery(pool), &out); err != nil {
		return NamespaceQuota{}, err
	}
	return out.quota(), nil
}

// SetQuota sets the namespace's own quota, which replaces the pool's
// default (the zero Quota exempts the namespace from a default), and
// returns it with the usage. A quota below the usage removes nothing: the
// next publishes are refused until consumers make room.
func (a *Admin) SetQuota(ctx context.Context, pool, namespace string, q Quota) (NamespaceQuota, error) {
	if namespace == "" {
		return NamespaceQuota{}, argError("empty namespace")
	}
	if q.MaxJobs < 0 || q.MaxBytes < 0 {
		return NamespaceQuota{}, argError("a quota must not be negative (0: no limit)")
	}
	data, err := json.Marshal(map[string]int64{"max_jobs": q.MaxJobs, "max_bytes": q.MaxBytes})
	if err != nil {
		return NamespaceQuota{}, err
	}
	resp, err := a.t.do(ctx, request{
		method: http.MethodPut, path: a.path("quota", namespace), query: poolQuery(pool),
		body: data, header: http.Header{"Content-Type": {"application/json"}}, idempotent: true,
		want: []int{http.StatusOK},
	})
	if err != nil {
		return NamespaceQuota{}, err
	}
	var out wireQuota
	if err := decode(resp, &out); err != nil {
		return NamespaceQuota{}, err
	}
	return out.quota(), nil
}

// DeleteQuota removes the namespace's own quota: the pool's default
// applies again. Deleting a quota that does not exist is not an error.
func (a *Admin) DeleteQuota(ctx context.Context, pool, namespace string) error {
	if namespace == "" {
		return argError("empty namespace")
	}
	_, err := a.t.do(ctx, request{
		method: http.MethodDelete, path: a.path("quota", namespace), query: poolQuery(pool),
		idempotent: true, want: []int{http.StatusNoContent},
	})
	return err
}

// Quotas returns the quota and usage of every namespace holding a job or
// having a quota of its own, in pool, or in every pool when pool is "".
func (a *Admin) Quotas(ctx context.Context, pool string) (QuotaList, error) {
	var out struct {
		Defaults map[string]struct {
			MaxBytes int64 `json:"max_bytes"`
			MaxJobs  int64 `json:"max_jobs"`
		} `json:"defaults"`
		Namespaces []wireQuota `json:"namespaces"`
	}
	if err := a.get(ctx, a.path("quota"), poolQuery(pool), &out); err != nil {
		return QuotaList{}, err
	}
	list := QuotaList{Defaults: make(map[string]Quota, len(out.Defaults)), Namespaces: make([]NamespaceQuota, 0, len(out.Namespaces))}
	for p, d := range out.Defaults {
		list.Defaults[p] = Quota{MaxJobs: d.MaxJobs, MaxBytes: d.MaxBytes}
	}
	for _, w := range out.Namespaces {
		list.Namespaces = append(list.Namespaces, w.quota())
	}
	return list, nil
}
