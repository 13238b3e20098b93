package rdb

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The reconciler's gate (doc/design.md "Usage and quotas"). The scripts
// keep the usage counts exact in the same step as the jobs; only Redis
// removing a key by itself — a job whose TTL ran out, or an eviction —
// makes them drift (reconcile.go). Redis counts those removals
// (expired_keys and evicted_keys of INFO stats, per process: run_id), so
// the periodic reconciler reads its queues only when they moved: once a
// walk that began with a signature S of those counters has recounted
// every queue (each recounted whole, or by a chunked pass opened after
// the walk began), the counts are exact as of S, and they stay exact for
// as long as the signature is S. Steps that find S skip their reads: a
// pool of big queues whose jobs do not expire (a benchmark's leftovers
// read 10,000 entries a second, a few milliseconds of Redis at a time,
// under every consume) costs one INFO a second instead. Every
// reconcileForce a walk runs anyway, for what Redis does not count (a
// key deleted by hand); on a pool whose keys expire all the time, every
// step reads, as before.

// reconcileForce is the longest the gate keeps the reconciler idle.
const reconcileForce = 10 * time.Minute

// reconGate is the gate's state, under reconMu.
type reconGate struct {
	// clean is the signature of the last walk that recounted every
	// queue, and cleanAt when it began; "" before the first.
	clean   string
	cleanAt time.Time
	// walk is the walk under way, nil when none.
	walk *reconWalk
	// told: the INFO could not be read, and the log said so once.
	told bool
	// grown is when an idle step last read the usage counts (idleRounds).
	grown time.Time
}

// reconWalk is a walk under way: it began at begin, with signature sig,
// and pending holds the queues it has still to recount (nil until the
// first listing after begin).
type reconWalk struct {
	sig     string
	begin   time.Time
	pending map[[2]string]bool
}

// listed records a fresh listing of the pool's queues: the walk's queues
// at its first, and a queue no longer listed has nothing to recount.
func (g *reconGate) listed(listed map[[2]string]bool) {
	w := g.walk
	if w == nil {
		return
	}
	if w.pending == nil {
		w.pending = make(map[[2]string]bool, len(listed))
		for q := range listed {
			w.pending[q] = true
		}
		return
	}
	for q := range w.pending {
		if !listed[q] {
			delete(w.pending, q)
		}
	}
}

// recounted records that q was recounted whole (recountScript) now.
func (g *reconGate) recounted(q [2]string) {
	if w := g.walk; w != nil && w.pending != nil {
		delete(w.pending, q)
	}
}

// passed records a chunked pass over q, opened at opened, that applied,
// or was given up because q changed under it: it counts for the walk only
// if opened after the walk began. A big queue that never holds still for
// a pass cannot be recounted; the scripts' counts and its expiry ledger
// (reconcile_ledger.go), swept since the walk began (finish), are what
// the walk vouches for — else one churning queue would keep every step
// reading.
func (g *reconGate) passed(q [2]string, opened time.Time) {
	if w := g.walk; w != nil && w.pending != nil && !opened.Before(w.begin) {
		delete(w.pending, q)
	}
}

// finish ends the walk once it has recounted every queue and the expiry
// ledgers were swept to their ends since it began (a pass counts a job
// that expired uncounted as live until the sweep takes it off), and
// reports whether it did: a chunked pass opened since is not needed (the
// steps that follow read nothing) and must not hold its connection
// meanwhile.
func (g *reconGate) finish(l *ledgerState) bool {
	if w := g.walk; w != nil && w.pending != nil && len(w.pending) == 0 && l.sweptSince(w.begin) {
		g.clean, g.cleanAt, g.walk = w.sig, w.begin, nil
		return true
	}
	return false
}

// reconcileStep is the periodic reconciler's step: ReconcileOnce, unless
// the gate says the counts are exact. It returns whether it ran. Idle
// steps still run the expiry ledgers' rounds (idleRounds).
func (e *Engine) reconcileStep(ctx context.Context) (bool, error) {
	sig, err := e.removalSig(ctx)
	e.ten.reconMu.Lock()
	g := &e.ten.recon.gate
	now := time.Now()
	switch {
	case err != nil || sig == "":
		// Unknown: read as before; a walk under way stays valid (its
		// signature is its beginning's).
		if err != nil && !g.told {
			g.told = true
			e.log.WithError(err).Info("usage: the reconciler cannot read INFO; its steps read the queues every second")
		}
	case sig == g.clean && now.Sub(g.cleanAt) < reconcileForce:
		defer e.ten.reconMu.Unlock()
		return false, e.idleRounds(ctx, now)
	case g.walk == nil:
		// A walk begins: the queues are listed after the signature was
		// read, so every queue that holds jobs now is in the listing. The
		// last walk's signature no longer vouches for the counts (a
		// CONFIG RESETSTAT could bring it back).
		g.walk = &reconWalk{sig: sig, begin: now}
		g.clean = ""
		e.ten.recon.queues = nil
	}
	e.ten.reconMu.Unlock()
	_, rerr := e.ReconcileOnce(ctx)
	return true, rerr
}

// idleRounds is what a step the gate keeps idle reads: the expiry
// ledgers' rounds, bounded as in every step (a round records a job before
// it expires; behind the gate it would start only after the first
// expiry), and every reconcileRefresh the usage counts, to find the
// queues that grew past reconcileMax jobs since the last walk (a walk
// finds them by their recounts). Not the sweep: with no key removed by
// Redis, no recorded job expired since the walk's sweep. Under reconMu.
func (e *Engine) idleRounds(ctx context.Context, now time.Time) error {
	r := &e.ten.recon
	if now.Sub(r.gate.grown) >= reconcileRefresh {
		r.gate.grown = now
		hs := make([]*redis.MapStringStringCmd, slotGroups)
		if _, err := e.pipelined(ctx, func(p redis.Pipeliner) error {
			for g := range hs {
				hs[g] = p.HGetAll(ctx, usageKey(g))
			}
			return nil
		}); err != nil {
			return fmt.Errorf("reconcile pool %s: %w", e.pool, err)
		}
		for _, h := range hs {
			for f, v := range h.Val() {
				rest, ok := strings.CutPrefix(f, "j:")
				ns, q, ok2 := strings.Cut(rest, "/")
				if n, _ := strconv.ParseInt(v, 10, 64); ok && ok2 && n > reconcileMax && checkNames(ns, q) == nil {
					r.noteBig([2]string{ns, q})
				}
			}
		}
	}
	return e.ledgerRounds(ctx)
}

// removalSig returns the pool's count of keys Redis removed by itself
// (expired or evicted), with the process that counted them, on every
// master of a cluster: "" when the pool is neither a Redis nor a cluster
// client.
func (e *Engine) removalSig(ctx context.Context) (string, error) {
	switch c := e.rdb.(type) {
	case *redis.Client:
		return nodeRemovals(ctx, c)
	case *redis.ClusterClient:
		var mu sync.Mutex
		var parts []string
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			s, err := nodeRemovals(ctx, n)
			if err != nil {
				return err
			}
			mu.Lock()
			parts = append(parts, s)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return "", err
		}
		slices.Sort(parts)
		return strings.Join(parts, ";"), nil
	}
	return "", nil
}

// nodeRemovals returns "run_id:expired_keys:evicted_keys" of one Redis.
func nodeRemovals(ctx context.Context, c *redis.Client) (string, error) {
	var server, stats *redis.StringCmd
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		server, stats = p.Info(ctx, "server"), p.Info(ctx, "stats")
		return nil
	}); err != nil {
		return "", fmt.Errorf("reconcile: read INFO: %w", err)
	}
	f := infoFields(server.Val()+stats.Val(), "run_id", "expired_keys", "evicted_keys")
	for i, v := range f {
		if v == "" {
			return "", fmt.Errorf("reconcile: INFO has no %s", [...]string{"run_id", "expired_keys", "evicted_keys"}[i])
		}
	}
	return f[0] + ":" + f[1] + ":" + f[2], nil
}

// infoFields returns the values of the named fields of an INFO reply, ""
// for a field it lacks.
func infoFields(info string, names ...string) []string {
	out := make([]string, len(names))
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if i := slices.Index(names, k); i >= 0 {
			out[i] = v
		}
	}
	return out
}
