package rdb

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestReconcileBigQueue: a queue of 11,000 entries (ready, priority,
// delayed, in flight, dead, and entries of jobs deleted while waiting)
// whose jobs of a short TTL expire in the middle of its ready list, in its
// priority set and in its dead letter. The one-script recount leaves it
// alone; the chunked passes (1,000 entries a chunk, 4,000 a step here)
// make its counts exact — after giving up every pass during which the
// queue changed: a delete that leaves its entry (only the count moves), a
// release and a consume that leave the lengths as they were (only the
// WATCH sees them), and consumes, ACKs and deletes running against it; and
// while other queues of its namespace keep changing. On a real Redis (TTL
// 1.5 s), miniredis (FastForward) and the real cluster.
func TestReconcileBigQueue(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		testReconcileBig(t, realClient(t), nil, true)
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		testReconcileBig(t, client, m, false)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		c.Flush(t)
		testReconcileBig(t, c.Client(t), nil, false)
	})
}

// truthQueue is what Redis holds of queue ns/q: its job keys (SCAN) and
// their lengths, and its timer's entries of expired jobs (as truth).
func truthQueue(t testing.TB, client redis.UniversalClient, ns, q string) engine.Usage {
	t.Helper()
	var u engine.Usage
	scan := func(ctx context.Context, c *redis.Client) error {
		n, err := expiredInTimers(ctx, c, "t/{??}"+ns+"/"+q)
		if err != nil {
			return err
		}
		u.Jobs += n
		for cur := uint64(0); ; {
			keys, next, err := c.Scan(ctx, cur, "j/{??}"+ns+"/"+q+"/*", 5000).Result()
			if err != nil {
				return err
			}
			p := c.Pipeline()
			lens := make([]*redis.IntCmd, len(keys))
			for i, k := range keys {
				lens[i] = p.StrLen(ctx, k)
			}
			if _, err := p.Exec(ctx); err != nil && len(keys) > 0 {
				return err
			}
			for _, l := range lens {
				if n := l.Val(); n > 0 {
					u.Jobs++
					u.Bytes += n
				}
			}
			if cur = next; cur == 0 {
				return nil
			}
		}
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(bg, func(ctx context.Context, c *redis.Client) error {
			mu.Lock() // one queue is on one master: the others find nothing
			defer mu.Unlock()
			return scan(ctx, c)
		})
	case *redis.Client:
		err = scan(bg, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// queueUsage is the count of queue ns/q in its group's usage hash.
func queueUsage(t testing.TB, client redis.UniversalClient, ns, q string) engine.Usage {
	t.Helper()
	v, err := client.HMGet(bg, usageKey(slotGroup(ns, q)), "j:"+ns+"/"+q, "b:"+ns+"/"+q).Result()
	if err != nil {
		t.Fatal(err)
	}
	var u engine.Usage
	if s, ok := v[0].(string); ok {
		_, _ = fmt.Sscan(s, &u.Jobs)
	}
	if s, ok := v[1].(string); ok {
		_, _ = fmt.Sscan(s, &u.Bytes)
	}
	return u
}

// testReconcileBig runs the scenario; with load, the phase where consumers
// run against the big queue itself (a real Redis: the other tiers run the
// rest, which the slow Lua of miniredis and the cluster's hops make long).
func testReconcileBig(t *testing.T, client redis.UniversalClient, m *miniredis.Miniredis, load bool) {
	ctx := bg
	t0 := time.Now()
	e, err := New(ctx, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	e.ten.recon.bigBudget = 4000 // a pass takes three steps
	const ns, q = "bigq", "q"
	short := 1500 * time.Millisecond
	// 8,000 jobs of an hour's TTL, ready, or delayed on miniredis (whose
	// LPUSH copies its list: quadratic), around the 2,000 that expire.
	readyLong, delayed := 4000, 300
	if m != nil {
		short = time.Minute
		readyLong, delayed = 1000, 6300
	}
	if err := e.SetQueueConfig(ctx, ns, q, engine.QueueConfig{DeadTTL: short}); err != nil {
		t.Fatal(err)
	}
	publish := func(n int, mk func(i int) *engine.PublishRequest) []string {
		t.Helper()
		var ids []string
		for i := 0; i < n; i += 500 {
			var batch []*engine.PublishRequest
			for k := i; k < min(n, i+500); k++ {
				batch = append(batch, mk(k))
			}
			got, err := e.PublishBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
		}
		return ids
	}
	consume := func(n int, ttr time.Duration) []*engine.Job {
		t.Helper()
		var out []*engine.Job
		for len(out) < n {
			jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: ttr, Count: min(50, n-len(out))})
			if err != nil || len(jobs) == 0 {
				t.Fatal(jobs, err)
			}
			out = append(out, jobs...)
		}
		return out
	}
	long := func(size int) func(int) *engine.PublishRequest {
		return func(i int) *engine.PublishRequest {
			r := pubReq(ns, q, size+i%7)
			r.TTL = time.Hour
			return r
		}
	}
	// 100 dead jobs (one try, released), which lose their TTL for the
	// queue's dead TTL.
	publish(100, func(i int) *engine.PublishRequest { r := pubReq(ns, q, 30); r.Tries = 1; return r })
	for _, j := range consume(100, time.Hour) {
		if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}); err != nil {
			t.Fatal(err)
		}
	}
	publish(readyLong, long(40))
	expiring := publish(2000, func(i int) *engine.PublishRequest { r := pubReq(ns, q, 50); r.TTL = short; return r })
	expiring = append(expiring, publish(200, func(i int) *engine.PublishRequest {
		r := pubReq(ns, q, 60)
		r.TTL, r.Priority = short, 3
		return r
	})...)
	later := publish(readyLong, long(45))
	publish(delayed, func(i int) *engine.PublishRequest { r := long(20)(i + 3); r.Delay = time.Hour; return r })
	publish(300, func(i int) *engine.PublishRequest { r := long(25)(i); r.Priority = 1 + i%4; return r })
	inflight := consume(200, time.Hour) // the priority jobs first
	for _, id := range later[:50] {     // deleted while waiting: their entries stay
		if err := e.Delete(ctx, ns, q, id); err != nil {
			t.Fatal(err)
		}
	}
	// The side queue of the namespace, which keeps changing.
	publish(50, func(i int) *engine.PublishRequest { return pubReq(ns, "side", 10) })
	// What the scripts counted (the short jobs may have expired already on
	// a loaded machine: nothing recounts here).
	before := queueUsage(t, client, ns, q)
	if before.Jobs != 10900-50 {
		t.Fatalf("usage of %s/%s %+v, want %d jobs", ns, q, before, 10900-50)
	}
	t.Logf("published in %v", time.Since(t0))

	// The short jobs expire: 2,200 waiting and the 100 dead ones.
	if m != nil {
		m.FastForward(short + time.Second)
	} else {
		time.Sleep(short)
		for deadline := time.Now().Add(20 * time.Second); ; {
			n := client.Exists(ctx, jobKey(ns, q, expiring[len(expiring)-1]), jobKey(ns, q, expiring[0])).Val()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("short jobs still there")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Those of them in flight stay one job each until the pump meets their
	// timer entries (truthQueue counts them).
	pending := int64(0)
	for _, j := range inflight {
		if j.TTL <= short {
			pending++
		}
	}
	gone := truthQueue(t, client, ns, q)
	if d := before.Jobs - gone.Jobs; d != 2300-pending || pending == 0 {
		t.Fatalf("%d jobs expired, want 2300 less %d in flight (before %+v, after %+v)", d, pending, before, gone)
	}

	step := func() ReconcileStats {
		t.Helper()
		st, err := e.ReconcileOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// stepUntil runs steps until one gave up or applied a pass.
	stepUntil := func() ReconcileStats {
		t.Helper()
		for i := 0; i < 20; i++ {
			if st := step(); st.Aborted+st.Passes > 0 {
				return st
			}
		}
		t.Fatal("no pass ended in 20 steps")
		return ReconcileStats{}
	}

	// A pass under way, then a delete that leaves its entry: only the
	// count moves, and the pass applies nothing.
	if st := step(); st.Skipped != 1 || st.Passes+st.Aborted != 0 || e.ten.recon.pass == nil {
		t.Fatalf("first step: %+v", st)
	}
	if err := e.Delete(ctx, ns, q, later[100]); err != nil {
		t.Fatal(err)
	}
	if st := stepUntil(); st.Aborted != 1 || st.Passes != 0 {
		t.Fatalf("pass over a delete: %+v", st)
	}
	before.Jobs--
	before.Bytes -= int64(22 + 45 + 100%7)
	if u := queueUsage(t, client, ns, q); u != before {
		t.Fatalf("usage after a given-up pass %+v, want %+v", u, before)
	}
	// A release with a delay: the timer's length and the count are as
	// they were, and the WATCH refuses the pass.
	for e.ten.recon.pass == nil || e.ten.recon.pass.chunks == 0 {
		step()
	}
	var j *engine.Job
	for _, x := range inflight {
		if x.TTL > time.Minute+time.Second {
			j = x
			break
		}
	}
	if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if st := stepUntil(); st.Aborted != 1 || st.Passes != 0 {
		t.Fatalf("pass over a delayed release: %+v", st)
	}
	if u := queueUsage(t, client, ns, q); u != before {
		t.Fatalf("usage after a given-up pass %+v, want %+v", u, before)
	}

	t.Logf("given-up passes at %v", time.Since(t0))
	// Consumers, ACKs and deletes on the big queue and its neighbour, with
	// the reconciler stepping: what it applies is never below what Redis
	// holds.
	if load {
		loadBig(t, e, client, ns, q, step)
	}
	t.Logf("load at %v", time.Since(t0))

	// Only the side queue changes now: the big queue's pass applies.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.Publish(ctx, pubReq(ns, "side", 10)); err != nil {
				t.Error(err)
				return
			}
			jobs, _ := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"side"}, TTR: time.Hour, Count: 1})
			for _, j := range jobs {
				_ = e.Ack(ctx, ns, "side", j.ID, j.Receipt)
			}
		}
	}()
	e.ten.reconMu.Lock()
	e.ten.recon.bigAt = nil // a pass that applied under load does not make this one wait
	e.ten.reconMu.Unlock()
	var applied ReconcileStats
	for i := 0; i < 40 && applied.Passes == 0; i++ {
		st := step()
		applied.Passes += st.Passes
		applied.Corrected += st.Corrected
		applied.Jobs += st.Jobs
		applied.Bytes += st.Bytes
	}
	if u, want := queueUsage(t, client, ns, q), truthQueue(t, client, ns, q); u != want || applied.Passes != 1 {
		t.Fatalf("big queue counted %+v, Redis holds %+v, after %+v", u, want, applied)
	}
	close(stop)
	wg.Wait()
	t.Logf("pass applied %+v under the side queue's load", applied)
	if st, err := e.Reconcile(ctx); err != nil || st.Passes == 0 || st.Aborted != 0 || st.Corrected != 0 {
		t.Fatalf("reconcile of an exact pool: %+v %v", st, err)
	}
	wantUsageOf(t, e, client, ns)
}

// loadBig runs consumers, ACKs and deletes on queue ns/q and its neighbour
// while the reconciler steps, and checks that the passes were given up and
// that the counts are not below what Redis holds.
func loadBig(t *testing.T, e *Engine, client redis.UniversalClient, ns, q string, step func() ReconcileStats) {
	ctx := bg
	e.ten.reconMu.Lock()
	e.ten.recon.bigAt = nil // the passes given up before wait reconcileBigRetry: start at once
	e.ten.reconMu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				qq := q
				if w == 2 {
					qq = "side"
					if _, err := e.Publish(ctx, pubReq(ns, qq, 10)); err != nil {
						t.Error(err)
						return
					}
				}
				jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{qq}, TTR: time.Hour, Count: 3})
				if err != nil {
					t.Error(err)
					return
				}
				for k, j := range jobs {
					if k == 0 || w == 2 {
						_ = e.Ack(ctx, ns, qq, j.ID, j.Receipt)
					} else {
						_ = e.Delete(ctx, ns, qq, j.ID)
					}
				}
				ops.Add(1)
			}
		}(w)
	}
	var during ReconcileStats
	for i := 0; i < 12 || ops.Load() < 100; i++ {
		st := step()
		during.Aborted += st.Aborted
		during.Passes += st.Passes
		if i > 1000 {
			break
		}
	}
	close(stop)
	wg.Wait()
	if during.Aborted == 0 {
		t.Fatalf("no pass given up while the queue changed: %+v", during)
	}
	// A queue whose pass was given up waits reconcileBigRetry, not the
	// next step, for its next pass (a queue published to without pause
	// would otherwise be read again and again for nothing).
	e.ten.reconMu.Lock()
	at, ok := e.ten.recon.bigAt[[2]string{ns, q}]
	e.ten.reconMu.Unlock()
	if wait := time.Until(at.Add(reconcileBigAgain)); !ok || wait <= 0 || wait > reconcileBigRetry && during.Passes == 0 {
		t.Fatalf("after a pass given up, the queue's next pass is in %v (recorded %v), want within %v", wait, ok, reconcileBigRetry)
	}
	if u, want := queueUsage(t, client, ns, q), truthQueue(t, client, ns, q); u.Jobs < want.Jobs || u.Bytes < want.Bytes {
		t.Fatalf("usage %+v below what Redis holds %+v after passes under load (%+v)", u, want, during)
	}
	t.Logf("under load: %d operations, %d passes given up, %d applied", ops.Load(), during.Aborted, during.Passes)
}

// TestRecountChunksEqualOne: on a queue holding jobs in every state the
// scripts leave — ready, priority, delayed, made ready by the pump (still
// 'd'), in flight, backing off, dead — and the entries of jobs gone from
// each (expired, deleted while waiting, ACKed), a chunked pass (chunks of
// 7 entries) corrects wrong counts to exactly what recountScript corrects
// them to.
func TestRecountChunksEqualOne(t *testing.T) { onTopologies(t, testRecountChunksEqualOne) }

func testRecountChunksEqualOne(t *testing.T, client redis.UniversalClient) {
	ctx := bg
	clock := &frozenClock{t: time.UnixMilli(1_800_000_000_000)}
	e, err := New(ctx, client, Options{Now: clock.Now, NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "eq", "q"
	var ids []string
	pub := func(n int, mk func(r *engine.PublishRequest)) {
		for i := 0; i < n; i++ {
			r := pubReq(ns, q, 10+len(ids)%13)
			r.TTL = time.Hour
			mk(r)
			id, err := e.Publish(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	consume := func(n int) []*engine.Job {
		jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: n})
		if err != nil || len(jobs) != n {
			t.Fatal(jobs, err)
		}
		return jobs
	}
	pub(12, func(r *engine.PublishRequest) { r.Tries = 1 })
	for _, j := range consume(12) { // dead
		if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}); err != nil {
			t.Fatal(err)
		}
	}
	pub(10, func(r *engine.PublishRequest) { r.Delay = time.Second }) // made ready by the pump
	clock.Add(2 * time.Second)
	if _, err := e.PumpOnce(ctx); err != nil {
		t.Fatal(err)
	}
	pub(10, func(r *engine.PublishRequest) { r.Priority = 2 })
	pub(30, func(r *engine.PublishRequest) {})
	inflight := consume(15)          // the priority jobs, then the oldest ready ones ('d' among them)
	for _, j := range inflight[:4] { // backing off
		if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Ack(ctx, ns, q, inflight[5].ID, inflight[5].Receipt); err != nil {
		t.Fatal(err)
	}
	pub(10, func(r *engine.PublishRequest) { r.Delay = time.Hour })
	pub(10, func(r *engine.PublishRequest) {})
	// Gone: deleted while waiting (their entries stay), expired in every
	// structure (keys removed by hand).
	for _, id := range ids[len(ids)-3:] {
		if err := e.Delete(ctx, ns, q, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1, 14, 20, 40, 45, len(ids) - 12, len(ids) - 5} {
		vanish(t, client, jobKey(ns, q, ids[i]))
	}
	vanish(t, client, jobKey(ns, q, inflight[8].ID), jobKey(ns, q, inflight[2].ID))

	uk := usageKey(slotGroup(ns, q))
	wrong := func() {
		t.Helper()
		if err := client.HSet(ctx, uk, "j:"+ns+"/"+q, 500, "b:"+ns+"/"+q, 7, "j:"+ns, 500, "b:"+ns, 7).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wrong()
	if _, err := e.recount(ctx, [][2]string{{ns, q}}); err != nil {
		t.Fatal(err)
	}
	one := queueUsage(t, client, ns, q)
	if want := truthQueue(t, client, ns, q); one != want {
		t.Fatalf("one-script recount %+v, Redis holds %+v", one, want)
	}
	wrong()
	e.ten.reconMu.Lock()
	defer e.ten.reconMu.Unlock()
	e.ten.recon.big = [][2]string{{ns, q}}
	var st ReconcileStats
	for i := 0; st.Passes == 0; i++ {
		if err := e.bigStep(ctx, 7, time.Now(), &st, map[int]bool{}); err != nil || st.Aborted != 0 || i > 100 {
			t.Fatalf("chunked pass: %+v %v", st, err)
		}
	}
	if got := queueUsage(t, client, ns, q); got != one || st.Corrected != 1 {
		t.Fatalf("chunked recount %+v, one-script recount %+v (%+v)", got, one, st)
	}
	t.Logf("chunks of 7 entries and one script both count %+v", one)
}
