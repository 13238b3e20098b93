package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Tenancy (issue #31; doc/design.md "Usage and quotas", doc/keys.md): the
// engine's implementation of engine.Tenancy.
//
// Usage is counted by the scripts, per slot group: the group's usage hash
// nu/{T} holds, for each namespace with jobs in the group's queues, its
// jobs (field "j:NS") and the bytes of their values ("b:NS"), and the same
// per queue ("j:NS/Q", "b:NS/Q"), changed in the same script as the jobs
// (tenancy_scripts.go). A namespace's usage is the sum over the 64 groups.
// The reconciler (reconcile.go) recounts queues and corrects the fields.
//
// Quotas are the pool's hash "quotas" (no slot group: no script reads it),
// field NS → "max_jobs max_bytes", read whole by every engine every
// quotaRefresh, as the shards hash is. While a namespace has a quota (its
// own or Options.DefaultQuota) the same refresh reads the 64 usage hashes,
// and a publish passes its script the namespace's allowance in the
// queue's group: the quota less the namespace's usage in the other groups
// as last read. The script refuses, writing nothing, when the group's
// count plus the jobs would exceed it. Within one group the check is exact
// (an ACK gives room at once); across groups a namespace can overshoot by
// what the other groups accepted since the last refresh (doc/design.md).

// quotasKey is the pool's hash of quotas: field NS → "max_jobs max_bytes".
const quotasKey = "quotas"

// quotaRefresh is how stale an engine's view of the quotas and of the
// usage in other groups may be.
const quotaRefresh = 250 * time.Millisecond

// usageKey is group g's usage hash nu/{T}.
func usageKey(g int) string { return "nu/{" + groupTags[g] + "}" }

// usageJobs and usageBytes are a namespace's fields in a usage hash.
func usageJobs(ns string) string  { return "j:" + ns }
func usageBytes(ns string) string { return "b:" + ns }

// tenancy is an engine's view of the quotas and of the usage they need.
type tenancy struct {
	def  engine.Quota
	mu   sync.Mutex // one load at a time
	view atomic.Pointer[quotaView]

	// own is what this engine's publishes under a quota added since the
	// last refresh began, per namespace and group: a publish to another
	// group counts it at once, rather than after the next refresh.
	ownMu sync.Mutex
	own   map[string]*[slotGroups]engine.Usage

	reconMu sync.Mutex
	recon   reconciler // reconcile.go
}

// quotaView is what one refresh read.
type quotaView struct {
	quotas map[string]engine.Quota
	// usage is, for each namespace under a quota, its usage per group;
	// total its sum. Empty when no namespace is under a quota.
	usage map[string]*[slotGroups]engine.Usage
	total map[string]engine.Usage
}

// quotaOf returns the quota that applies to ns: its own, else the default.
func (t *tenancy) quotaOf(v *quotaView, ns string) engine.Quota {
	if v != nil {
		if q, ok := v.quotas[ns]; ok {
			return q
		}
	}
	return t.def
}

// limited reports whether a namespace may be under a quota in view v.
func (t *tenancy) limited(v *quotaView) bool {
	return !t.def.None() || (v != nil && len(v.quotas) > 0)
}

// allowance returns the arguments a publish script takes for ns in group
// g: the jobs and bytes ns may hold in g ("" = no limit).
func (e *Engine) allowance(ns string, g int) (aj, ab interface{}) {
	v := e.ten.view.Load()
	q := e.ten.quotaOf(v, ns)
	if q.None() {
		return "", ""
	}
	var in, tot engine.Usage
	if v != nil {
		if u := v.usage[ns]; u != nil {
			in = u[g]
		}
		tot = v.total[ns]
	}
	e.ten.ownMu.Lock()
	if o := e.ten.own[ns]; o != nil {
		for h, u := range o {
			if h != g {
				tot.Jobs += u.Jobs
				tot.Bytes += u.Bytes
			}
		}
	}
	e.ten.ownMu.Unlock()
	aj, ab = "", ""
	if q.MaxJobs > 0 {
		aj = q.MaxJobs - (tot.Jobs - in.Jobs)
	}
	if q.MaxBytes > 0 {
		ab = q.MaxBytes - (tot.Bytes - in.Bytes)
	}
	return aj, ab
}

// notePublished notes jobs and bytes this engine published to ns in group
// g, when ns is under a quota (see tenancy.own).
func (e *Engine) notePublished(ns string, g int, jobs, bytes int) {
	if e.ten.quotaOf(e.ten.view.Load(), ns).None() {
		return
	}
	e.ten.ownMu.Lock()
	o := e.ten.own[ns]
	if o == nil {
		if e.ten.own == nil {
			e.ten.own = map[string]*[slotGroups]engine.Usage{}
		}
		o = new([slotGroups]engine.Usage)
		e.ten.own[ns] = o
	}
	o[g].Jobs += int64(jobs)
	o[g].Bytes += int64(bytes)
	e.ten.ownMu.Unlock()
}

// publishedArgs is notePublished for the n jobs of publishScript's args.
func (e *Engine) publishedArgs(ns string, g int, args []interface{}, n int) {
	if e.ten.quotaOf(e.ten.view.Load(), ns).None() {
		return
	}
	bytes := 0
	for i := 0; i < n; i++ {
		switch v := args[8+5*i].(type) {
		case []byte:
			bytes += len(v)
		case string:
			bytes += len(v)
		}
	}
	e.notePublished(ns, g, n, bytes)
}

// quotaErr turns a script's refusal (its limit name) into the error,
// naming the quota that applies to ns.
func (e *Engine) quotaErr(ns string, limit interface{}) error {
	q := e.ten.quotaOf(e.ten.view.Load(), ns)
	l, _ := limit.(string)
	qe := &engine.QuotaError{Namespace: ns, Limit: l, Value: q.MaxJobs}
	if l == "max_bytes" {
		qe.Value = q.MaxBytes
	}
	return qe
}

// loadQuotas reads the quotas hash and, while a namespace is under a
// quota, the usage hashes. On an error it keeps the view it had.
func (e *Engine) loadQuotas(ctx context.Context) *quotaView {
	t := &e.ten
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	all, err := retried(ctx, e, func() *redis.MapStringStringCmd { return e.rdb.HGetAll(ctx, quotasKey) }).Result()
	if err != nil {
		e.log.WithError(err).Warn("quotas: cannot read the quotas; keeping the last view")
		return t.view.Load()
	}
	v := &quotaView{quotas: make(map[string]engine.Quota, len(all))}
	for ns, raw := range all {
		if q, ok := parseQuota(raw); ok {
			v.quotas[ns] = q
		}
	}
	if t.limited(v) {
		// Forget this engine's own publishes before the read, which
		// counts them: one that lands after the read is counted twice
		// until the next refresh, on the safe side.
		t.ownMu.Lock()
		t.own = nil
		t.ownMu.Unlock()
		per, err := e.usageByGroup(ctx)
		if err != nil {
			e.log.WithError(err).Warn("quotas: cannot read the usage; keeping the last view")
			if old := t.view.Load(); old != nil {
				v.usage, v.total = old.usage, old.total
			}
		} else {
			v.usage = make(map[string]*[slotGroups]engine.Usage)
			v.total = make(map[string]engine.Usage)
			for g, m := range per {
				for ns, u := range m {
					if t.quotaOf(v, ns).None() {
						continue
					}
					a := v.usage[ns]
					if a == nil {
						a = new([slotGroups]engine.Usage)
						v.usage[ns] = a
					}
					a[g] = u
					tot := v.total[ns]
					tot.Jobs += u.Jobs
					tot.Bytes += u.Bytes
					v.total[ns] = tot
				}
			}
		}
	}
	t.view.Store(v)
	return v
}

// runTenancy keeps the quota view fresh and runs the reconciler.
func (e *Engine) runTenancy(ctx context.Context) {
	t := time.NewTicker(quotaRefresh)
	defer t.Stop()
	defer func() {
		e.ten.reconMu.Lock()
		e.closePass()
		e.ten.reconMu.Unlock()
	}()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.loadQuotas(ctx)
		if n%int(reconcileEvery/quotaRefresh) == 0 {
			if _, err := e.reconcileStep(ctx); err != nil && ctx.Err() == nil {
				e.log.WithError(err).Warn("usage: reconcile failed; retrying at the next step")
			}
		}
	}
}

func checkNamespace(ns string) error {
	if !engine.ValidName(ns) {
		return fmt.Errorf("namespace %q: %w", ns, engine.ErrInvalid)
	}
	return nil
}

func parseQuota(raw string) (engine.Quota, bool) {
	a, b, ok := strings.Cut(raw, " ")
	if !ok {
		return engine.Quota{}, false
	}
	j, err1 := strconv.ParseInt(a, 10, 64)
	by, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil {
		return engine.Quota{}, false
	}
	return engine.Quota{MaxJobs: j, MaxBytes: by}, true
}

func formatQuota(q engine.Quota) string {
	return strconv.FormatInt(max(q.MaxJobs, 0), 10) + " " + strconv.FormatInt(max(q.MaxBytes, 0), 10)
}

// usageByGroup reads the 64 usage hashes: per group, namespace → usage
// (namespaces whose counts are both 0 left out; the queues' fields are
// the reconciler's).
func (e *Engine) usageByGroup(ctx context.Context) ([slotGroups]map[string]engine.Usage, error) {
	var out [slotGroups]map[string]engine.Usage
	cmds := make([]*redis.MapStringStringCmd, slotGroups)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := range cmds {
			cmds[g] = p.HGetAll(ctx, usageKey(g))
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("usage pool %s: %w", e.pool, err)
	}
	for g, c := range cmds {
		m := map[string]engine.Usage{}
		for f, v := range c.Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			kind, ns, ok := strings.Cut(f, ":")
			if !ok || strings.IndexByte(ns, '/') >= 0 { // a queue's field
				continue
			}
			u := m[ns]
			switch kind {
			case "j":
				u.Jobs = n
			case "b":
				u.Bytes = n
			}
			m[ns] = u
		}
		for ns, u := range m {
			if u == (engine.Usage{}) {
				delete(m, ns)
			}
		}
		out[g] = m
	}
	return out, nil
}

var _ engine.Tenancy = (*Engine)(nil)

// Usage implements engine.Tenancy: the sum of the namespace's counts in
// the 64 usage hashes.
func (e *Engine) Usage(ctx context.Context, ns string) (engine.Usage, error) {
	if err := checkNamespace(ns); err != nil {
		return engine.Usage{}, fmt.Errorf("usage: %w", err)
	}
	cmds := make([]*redis.SliceCmd, slotGroups)
	_, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
		for g := range cmds {
			cmds[g] = p.HMGet(ctx, usageKey(g), usageJobs(ns), usageBytes(ns))
		}
		return nil
	})
	if err != nil {
		return engine.Usage{}, fmt.Errorf("usage %s: %w", ns, err)
	}
	var u engine.Usage
	for _, c := range cmds {
		v := c.Val()
		if len(v) == 2 {
			u.Jobs += atoi64(v[0])
			u.Bytes += atoi64(v[1])
		}
	}
	return u, nil
}

func atoi64(v interface{}) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// UsageAll implements engine.Tenancy.
func (e *Engine) UsageAll(ctx context.Context) (map[string]engine.Usage, error) {
	per, err := e.usageByGroup(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]engine.Usage{}
	for _, m := range per {
		for ns, u := range m {
			t := out[ns]
			t.Jobs += u.Jobs
			t.Bytes += u.Bytes
			out[ns] = t
		}
	}
	for ns, u := range out {
		if u == (engine.Usage{}) {
			delete(out, ns)
		}
	}
	return out, nil
}

// Quota implements engine.Tenancy. It reads the quotas hash, not the view.
func (e *Engine) Quota(ctx context.Context, ns string) (engine.Quota, bool, error) {
	if err := checkNamespace(ns); err != nil {
		return engine.Quota{}, false, fmt.Errorf("quota: %w", err)
	}
	raw, err := retried(ctx, e, func() *redis.StringCmd { return e.rdb.HGet(ctx, quotasKey, ns) }).Result()
	if err == redis.Nil {
		return e.ten.def, false, nil
	}
	if err != nil {
		return engine.Quota{}, false, fmt.Errorf("quota %s: %w", ns, err)
	}
	q, ok := parseQuota(raw)
	if !ok {
		return e.ten.def, false, nil
	}
	return q, true, nil
}

// SetQuota implements engine.Tenancy. This engine sees it at once, the
// others within quotaRefresh.
func (e *Engine) SetQuota(ctx context.Context, ns string, q engine.Quota) error {
	if err := checkNamespace(ns); err != nil {
		return fmt.Errorf("set quota: %w", err)
	}
	if q.MaxJobs < 0 || q.MaxBytes < 0 {
		return fmt.Errorf("set quota: negative limit: %w", engine.ErrInvalid)
	}
	if err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.HSet(ctx, quotasKey, ns, formatQuota(q)) }).Err(); err != nil {
		return fmt.Errorf("set quota %s: %w", ns, err)
	}
	e.loadQuotas(ctx)
	return nil
}

// DeleteQuota implements engine.Tenancy.
func (e *Engine) DeleteQuota(ctx context.Context, ns string) error {
	if err := checkNamespace(ns); err != nil {
		return fmt.Errorf("delete quota: %w", err)
	}
	if err := retried(ctx, e, func() *redis.IntCmd { return e.rdb.HDel(ctx, quotasKey, ns) }).Err(); err != nil {
		return fmt.Errorf("delete quota %s: %w", ns, err)
	}
	e.loadQuotas(ctx)
	return nil
}

// Quotas implements engine.Tenancy.
func (e *Engine) Quotas(ctx context.Context) (map[string]engine.Quota, error) {
	all, err := retried(ctx, e, func() *redis.MapStringStringCmd { return e.rdb.HGetAll(ctx, quotasKey) }).Result()
	if err != nil {
		return nil, fmt.Errorf("quotas: %w", err)
	}
	out := make(map[string]engine.Quota, len(all))
	for ns, raw := range all {
		if q, ok := parseQuota(raw); ok {
			out[ns] = q
		}
	}
	return out, nil
}
