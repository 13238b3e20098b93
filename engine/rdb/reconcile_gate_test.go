package rdb

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestReconcileGate: the periodic reconciler reads only while Redis has
// removed keys by itself since its last complete walk. The first walk
// recounts every queue (a big one by a chunked pass, three steps here) and
// corrects a wrong count; then the steps read nothing, even with a count
// made wrong by hand, until a job's TTL runs out (its key gone: the
// expired_keys of INFO moves) — the next walk counts it gone — or
// reconcileForce has passed — a walk then corrects the count made wrong by
// hand. The idle steps still run the expiry ledger's rounds: a queue grown
// big meanwhile has its soon-expiring jobs recorded before any expires. A
// walk ends although its big queue changes between every two steps (its
// passes given up). On a Redis and the real cluster; miniredis's INFO has
// no such counters, and every step reads, as without the gate.
func TestReconcileGate(t *testing.T) {
	t.Run("redis", func(t *testing.T) { testReconcileGate(t, realClient(t)) })
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		c.Flush(t)
		testReconcileGate(t, c.Client(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		e, err := New(bg, client, Options{NoAutoPipeline: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Publish(bg, pubReq("gate", "a", 10)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if ran, err := e.reconcileStep(bg); err != nil || !ran {
				t.Fatalf("step %d without the counters: ran %v, %v; want a read", i, ran, err)
			}
		}
	})
}

func testReconcileGate(t *testing.T, client redis.UniversalClient) {
	ctx := bg
	e, err := New(ctx, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	e.ten.recon.bigBudget = reconcileBigChunk // a pass over the big queue takes three steps
	const ns = "gate"
	publish := func(q string, n int, ttl time.Duration) {
		t.Helper()
		for i := 0; i < n; i += 500 {
			var batch []*engine.PublishRequest
			for k := i; k < min(n, i+500); k++ {
				r := pubReq(ns, q, 20+k%5)
				r.TTL = ttl
				batch = append(batch, r)
			}
			if _, err := e.PublishBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("a", 3, time.Hour)
	publish("big", reconcileMax+100, time.Hour)
	publish("short", 1, time.Second)
	skew := func(q string, jobs int64) {
		t.Helper()
		if err := client.HIncrBy(ctx, usageKey(slotGroup(ns, q)), "j:"+ns+"/"+q, jobs).Err(); err != nil {
			t.Fatal(err)
		}
	}
	exact := func(q string) bool {
		return queueUsage(t, client, ns, q) == truthQueue(t, client, ns, q)
	}
	// walk runs steps until one reads nothing, and returns how many read;
	// the big queue's pass starts at once (not reconcileBigAgain after
	// its last).
	walk := func() int {
		t.Helper()
		e.ten.reconMu.Lock()
		e.ten.recon.bigAt = nil
		e.ten.reconMu.Unlock()
		for n := 0; n < 20; n++ {
			ran, err := e.reconcileStep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ran {
				return n
			}
		}
		t.Fatal("the reconciler never went quiet")
		return 0
	}

	skew("big", 7)
	if ran, err := e.reconcileStep(ctx); err != nil || !ran {
		t.Fatalf("first step: ran %v, %v", ran, err)
	}
	// A big queue that appears during the walk is not the walk's: its
	// pass, opened once the walk's big queue applied, is closed with the
	// walk (the steps after it read nothing).
	publish("late", reconcileMax+100, time.Hour)
	e.ten.reconMu.Lock()
	e.ten.recon.read = time.Time{} // listed again at the next step
	e.ten.reconMu.Unlock()
	if n := walk(); n < 2 {
		t.Fatalf("first walk: %d more steps read, want the rest of the big queue's pass of 3", n)
	}
	e.ten.reconMu.Lock()
	open := e.ten.recon.pass
	e.ten.reconMu.Unlock()
	if open != nil {
		t.Fatalf("a pass over %v still open after the walk ended", open.q)
	}
	for _, q := range []string{"a", "big", "short"} {
		if !exact(q) {
			t.Fatalf("after the first walk, %s: usage %+v, Redis holds %+v", q, queueUsage(t, client, ns, q), truthQueue(t, client, ns, q))
		}
	}

	// A count wrong by hand (no key removed by Redis): not read.
	skew("a", 5)
	if ran, err := e.reconcileStep(ctx); err != nil || ran {
		t.Fatalf("with no key removed since the walk, the step read (%v, %v)", ran, err)
	}
	if exact("a") {
		t.Fatal("a count made wrong by hand is right again without a walk")
	}

	// A queue that grows past reconcileMax jobs while the gate is idle,
	// with jobs that expire within the ledger's horizon: the idle steps
	// find it by its usage count and record its jobs in its expiry ledger
	// before any expires, and still read no count.
	publish("soon", reconcileMax+100, 4*time.Minute)
	e.ten.reconMu.Lock()
	e.ten.recon.gate.grown = time.Time{}
	e.ten.reconMu.Unlock()
	lk := ledgerKey(jobKeyPrefix(ns, "soon"))
	for n := 0; client.ZCard(ctx, lk).Val() < reconcileMax+100; n++ {
		if n == 20 {
			t.Fatalf("idle steps recorded %d of the soon queue's jobs", client.ZCard(ctx, lk).Val())
		}
		if ran, err := e.reconcileStep(ctx); err != nil || ran {
			t.Fatalf("idle step with the ledger's rounds: ran %v, %v", ran, err)
		}
	}

	// A job's TTL runs out: truthQueue's reads make Redis remove its key.
	deadline := time.Now().Add(10 * time.Second)
	for truthQueue(t, client, ns, "short").Jobs != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the 1 s job never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if exact("short") {
		t.Fatal("the expired job is counted gone before any recount")
	}
	if n := walk(); n < 1 {
		t.Fatal("a key expired, and no step read")
	}
	if !exact("short") {
		t.Fatalf("after an expiry's walk, usage %+v, Redis holds %+v", queueUsage(t, client, ns, "short"), truthQueue(t, client, ns, "short"))
	}

	// reconcileForce after the last walk began, a walk runs anyway.
	e.ten.reconMu.Lock()
	e.ten.recon.gate.cleanAt = time.Now().Add(-reconcileForce)
	e.ten.reconMu.Unlock()
	if n := walk(); n < 1 {
		t.Fatal("no walk after reconcileForce")
	}
	if !exact("a") {
		t.Fatalf("after the forced walk, usage %+v, Redis holds %+v", queueUsage(t, client, ns, "a"), truthQueue(t, client, ns, "a"))
	}

	// A big queue published to between every two steps gives up every
	// pass: the walk vouches for its scripts' counts and its swept ledger,
	// and ends (else one churning queue keeps every step reading).
	e.ten.reconMu.Lock()
	e.ten.recon.gate.cleanAt = time.Now().Add(-reconcileForce)
	e.ten.recon.bigAt = nil
	e.ten.reconMu.Unlock()
	for n := 0; ; n++ {
		if n == 20 {
			t.Fatal("a walk with a churning big queue never ended")
		}
		ran, err := e.reconcileStep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ran {
			break
		}
		publish("big", 1, time.Hour)
	}
}
