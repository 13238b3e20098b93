package rdb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestReconcileBigChurn: a queue of more than reconcileMax entries that
// never holds still — a goroutine publishes to it, deletes what it
// published (the entries stay, counted) and consumes and ACKs from it
// every few milliseconds — has jobs expire in the middle of its ready
// list, in its priority set and in its dead letter. No chunked pass of it
// applies; the expiry ledger's round records the expiring jobs before they
// expire, and its sweep takes them off when they did, so that, with the
// load still running, the counts become exactly what Redis holds (jobs
// and bytes). On a real Redis (TTL 2 s), miniredis (FastForward) and the
// real cluster.
func TestReconcileBigChurn(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		testReconcileBigChurn(t, realClient(t), nil)
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		testReconcileBigChurn(t, client, m)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		c.Flush(t)
		testReconcileBigChurn(t, c.Client(t), nil)
	})
}

func testReconcileBigChurn(t *testing.T, client redis.UniversalClient, m *miniredis.Miniredis) {
	ctx := bg
	t0 := time.Now()
	e, err := New(ctx, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	e.ten.recon.bigBudget = 20000 // a step reads the whole queue
	const ns, q = "churn", "q"
	short := 2 * time.Second
	// Ready entries, or delayed ones on miniredis (whose LPUSH copies its
	// list: quadratic), around those that expire.
	readyLong, delayed := 1100, 0
	if m != nil {
		short = time.Minute
		readyLong, delayed = 300, 1600
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
	long := func(size, prio int) func(int) *engine.PublishRequest {
		return func(i int) *engine.PublishRequest {
			r := pubReq(ns, q, size+i%7)
			r.TTL, r.Priority = time.Hour, prio
			return r
		}
	}
	shortReq := func(size, prio int) func(int) *engine.PublishRequest {
		return func(i int) *engine.PublishRequest {
			r := pubReq(ns, q, size+i%5)
			r.TTL, r.Priority = short, prio
			return r
		}
	}
	// 50 dead jobs (one try, released): they expire by the dead TTL.
	publish(50, func(i int) *engine.PublishRequest { r := pubReq(ns, q, 30); r.Tries = 1; return r })
	for n := 0; n < 50; {
		jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Hour, Count: 50 - n})
		if err != nil || len(jobs) == 0 {
			t.Fatal(jobs, err)
		}
		for _, j := range jobs {
			if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}); err != nil {
				t.Fatal(err)
			}
		}
		n += len(jobs)
	}
	publish(readyLong, long(40, 0))
	expiring := publish(300, shortReq(50, 0))
	publish(readyLong, long(45, 0))
	publish(delayed, func(i int) *engine.PublishRequest { r := long(20, 0)(i); r.Delay = time.Hour; return r })
	// Priority 1 expires; the consumers take priority 5 first.
	expiring = append(expiring, publish(100, shortReq(60, 1))...)
	publish(400, long(25, 5))
	if u := queueUsage(t, client, ns, q); u.Jobs != int64(50+2*readyLong+delayed+800) {
		t.Fatalf("usage %+v before the load", u)
	}

	// The load: every few milliseconds a publish, and a delete of what it
	// published two rounds before (its entry stays, counted), and every
	// fifth round a consume and an ACK.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var mine []string
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			id, err := e.Publish(ctx, long(35, 0)(i))
			if err != nil {
				t.Error(err)
				return
			}
			mine = append(mine, id)
			if len(mine) > 2 {
				if err := e.Delete(ctx, ns, q, mine[0]); err != nil {
					t.Error(err)
					return
				}
				mine = mine[1:]
			}
			if i%5 == 0 {
				jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Hour, Count: 1})
				if err != nil {
					t.Error(err)
					return
				}
				for _, j := range jobs {
					if err := e.Ack(ctx, ns, q, j.ID, j.Receipt); err != nil {
						t.Error(err)
						return
					}
				}
			}
			ops.Add(1)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// waitOps waits for n more operations of the load.
	waitOps := func(n int64) {
		t.Helper()
		for want, deadline := ops.Load()+n, time.Now().Add(30*time.Second); ops.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the load is stuck")
			}
		}
	}
	waitOps(10)
	step := func() ReconcileStats {
		t.Helper()
		st, err := e.ReconcileOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// The first step finds the queue big and records the jobs that expire
	// within the horizon.
	if st := step(); st.Skipped != 1 {
		t.Fatalf("first step %+v", st)
	}
	rec := client.ZCard(ctx, ledgerKey(jobKeyPrefix(ns, q))).Val()
	if rec < int64(len(expiring)) || rec > int64(len(expiring)+50) {
		t.Fatalf("%d jobs recorded in the ledger, want %d expiring and the 50 dead", rec, len(expiring))
	}
	t.Logf("recorded %d in %v", rec, time.Since(t0))

	if m != nil {
		m.FastForward(short + time.Second)
	} else {
		for deadline := time.Now().Add(30 * time.Second); ; {
			if client.Exists(ctx, jobKey(ns, q, expiring[0]), jobKey(ns, q, expiring[len(expiring)-1])).Val() == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("short jobs still there")
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitOps(10)
	over := queueUsage(t, client, ns, q)
	var all ReconcileStats
	for i := 0; i < 20 && all.Expired < int64(len(expiring)+50); i++ {
		st := step()
		waitOps(5)
		all.Expired += st.Expired
		all.Passes += st.Passes
		all.Aborted += st.Aborted
		all.Jobs += st.Jobs
		all.Bytes += st.Bytes
	}
	close(stop)
	wg.Wait()
	if all.Passes != 0 {
		t.Fatalf("a chunked pass applied under the load: %+v", all)
	}
	if all.Expired != int64(len(expiring)+50) {
		t.Fatalf("the sweep took off %d expired jobs, want %d (%+v)", all.Expired, len(expiring)+50, all)
	}
	if u, want := queueUsage(t, client, ns, q), truthQueue(t, client, ns, q); u != want {
		t.Fatalf("big queue under load counted %+v, Redis holds %+v (counted %+v before the sweep, %+v)", u, want, over, all)
	}
	if n := client.ZCard(ctx, ledgerKey(jobKeyPrefix(ns, q))).Val(); n != 0 {
		t.Fatalf("%d records left in the ledger", n)
	}
	wantUsageOf(t, e, client, ns)
	// An exact queue stays exact: nothing more to take off.
	if st := step(); st.Expired != 0 || st.Corrected != 0 {
		t.Fatalf("step after the sweep: %+v", st)
	}
	t.Logf("%d operations of load; sweep took off %d jobs, %d bytes (%+v) in %v", ops.Load(), -all.Jobs, -all.Bytes, all, time.Since(t0))
}

// TestRecountGroups: the recount counts the ready jobs of a queue's
// groups (their lists and priority sets, in the rotation or blocked), and
// so does a chunked pass of a grouped queue, in chunks of 7 entries; a
// job of a group that expired (its key gone, its entry left) is taken off
// by both.
func TestRecountGroups(t *testing.T) { onTopologies(t, testRecountGroups) }

func testRecountGroups(t *testing.T, client redis.UniversalClient) {
	ctx := bg
	e, err := New(ctx, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "grp", "q"
	for i := 0; i < 30; i++ {
		r := pubReq(ns, q, 10+i)
		r.Group = []string{"", "a", "b"}[i%3]
		r.Priority = i % 2
		if _, err := e.Publish(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	want := truthQueue(t, client, ns, q)
	if st, err := e.Reconcile(ctx); err != nil || st.Corrected != 0 {
		t.Fatalf("reconcile of an exact grouped queue: %+v %v", st, err)
	}
	if u := queueUsage(t, client, ns, q); u != want || want.Jobs != 30 {
		t.Fatalf("grouped queue counted %+v after a recount, Redis holds %+v", u, want)
	}
	// Jobs of groups a and b expire: two in lists, one in a priority set
	// (published 3k+1, 3k+2; odd k have priority 1).
	ids := client.LRange(ctx, groupKeyPrefix(ns, q)+"q:a", 0, 1).Val()
	ids = append(ids, client.ZRange(ctx, groupKeyPrefix(ns, q)+"p:b", 0, 0).Val()...)
	if len(ids) != 3 {
		t.Fatalf("group entries %q", ids)
	}
	for _, e := range ids {
		_, id, err := unpackEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		vanish(t, client, jobKey(ns, q, id))
	}
	// Group a at its group_max_in_flight: out of the rotation, in the
	// blocked set, its jobs read from there.
	if err := e.SetQueueConfig(ctx, ns, q, engine.QueueConfig{GroupMaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	for blocked := false; !blocked; {
		jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Hour, Count: 1})
		if err != nil || len(jobs) != 1 {
			t.Fatal(jobs, err)
		}
		blocked = client.SIsMember(ctx, groupKeyPrefix(ns, q)+"b", "a").Val()
	}
	want = truthQueue(t, client, ns, q)
	e.ten.reconMu.Lock()
	defer e.ten.reconMu.Unlock()
	e.ten.recon.big = [][2]string{{ns, q}}
	var st ReconcileStats
	for i := 0; st.Passes+st.Aborted == 0; i++ {
		if err := e.bigStep(ctx, 7, time.Now(), &st, map[int]bool{}); err != nil || i > 100 {
			t.Fatalf("chunked pass: %+v %v", st, err)
		}
	}
	if st.Passes != 1 || st.Jobs != -3 || queueUsage(t, client, ns, q) != want || want.Jobs != 27 {
		t.Fatalf("chunked pass of a grouped queue %+v: counted %+v, Redis holds %+v", st, queueUsage(t, client, ns, q), want)
	}
	// A grouped queue that changes under its pass: given up.
	e.ten.recon.bigAt = nil
	if err := e.bigStep(ctx, 7, time.Now(), &st, map[int]bool{}); err != nil {
		t.Fatal(err)
	}
	r := pubReq(ns, q, 5)
	r.Group = "c"
	if _, err := e.Publish(ctx, r); err != nil {
		t.Fatal(err)
	}
	st = ReconcileStats{}
	for i := 0; st.Passes+st.Aborted == 0; i++ {
		if err := e.bigStep(ctx, 7, time.Now(), &st, map[int]bool{}); err != nil || i > 100 {
			t.Fatalf("chunked pass: %+v %v", st, err)
		}
	}
	if st.Aborted != 1 {
		t.Fatalf("pass over a grouped publish: %+v", st)
	}
}

// TestLedgerSweepAndPump: of the jobs recorded in a queue's expiry ledger,
// the sweep takes off only the one that expired out of the timer (one job
// and its recorded bytes); one deleted by ID and one ACKed (their
// witnesses went with them) are dropped uncounted; one that expired in
// flight is left to the pump, which takes it off with its recorded bytes
// and its record.
func TestLedgerSweepAndPump(t *testing.T) { onTopologies(t, testLedgerSweepAndPump) }

func testLedgerSweepAndPump(t *testing.T, client redis.UniversalClient) {
	ctx := bg
	clock := &frozenClock{t: time.Now()}
	e, err := New(ctx, client, Options{Now: clock.Now, NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "lt", "q"
	var ids []string
	for i := 0; i < 5; i++ {
		r := pubReq(ns, q, 100*(i+1))
		r.TTL = time.Hour
		id, err := e.Publish(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// The three oldest in flight (A, B, C), two waiting (D, E).
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Second, Count: 3})
	if err != nil || len(jobs) != 3 || jobs[0].ID != ids[0] {
		t.Fatal(jobs, err)
	}
	round := newLedgerRound([2]string{ns, q}, time.Now(), 2*time.Hour)
	for !round.done() {
		if _, err := e.ledgerChunk(ctx, round, 2); err != nil {
			t.Fatal(err)
		}
	}
	lk := ledgerKey(jobKeyPrefix(ns, q))
	if n := client.ZCard(ctx, lk).Val(); n != 5 {
		t.Fatalf("%d records, want 5", n)
	}
	if err := e.Ack(ctx, ns, q, jobs[0].ID, jobs[0].Receipt); err != nil { // A
		t.Fatal(err)
	}
	if err := e.Delete(ctx, ns, q, ids[4]); err != nil { // E
		t.Fatal(err)
	}
	// B and D expire (their keys go; their witnesses stay, as at expiry).
	vanish(t, client, jobKey(ns, q, ids[1]), jobKey(ns, q, ids[3]))
	before := queueUsage(t, client, ns, q)
	e.ten.reconMu.Lock()
	e.ten.recon.ledger = ledgerState{ledgers: map[[2]string]bool{{ns, q}: true}, sweepOff: map[[2]string]int64{}}
	var st ReconcileStats
	_, err = e.ledgerSweepStep(ctx, 100, &st, map[int]bool{})
	e.ten.reconMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	dLen := int64(22 + 400)
	if st.Expired != 1 || st.Bytes != -dLen {
		t.Fatalf("sweep %+v, want D taken off (1 job, %d bytes)", st, dLen)
	}
	if got := client.ZRange(ctx, lk, 0, -1).Val(); len(got) != 2 {
		t.Fatalf("records left %v, want B (the pump's) and C", got)
	}
	if u := queueUsage(t, client, ns, q); u.Jobs != before.Jobs-1 || u.Bytes != before.Bytes-dLen {
		t.Fatalf("usage %+v after the sweep, was %+v", u, before)
	}
	// The TTRs run out: the pump takes B off, with its recorded bytes, and
	// makes C ready again.
	clock.Add(2 * time.Second)
	if _, err := e.PumpOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.ZRange(ctx, lk, 0, -1).Val(); len(got) != 1 || got[0] != ids[2] {
		t.Fatalf("records left %v, want C", got)
	}
	if u, want := queueUsage(t, client, ns, q), truthQueue(t, client, ns, q); u != want || want.Jobs != 1 {
		t.Fatalf("usage %+v after the pump, Redis holds %+v", u, want)
	}
}

// TestLedgerRoundOneScore: a round reads a sorted set whose members share
// one score (a burst's timer entries, all due at one instant) by rank, in
// chunks that do not divide it, and meets every member once, those scored
// below and above it too. (Reading past the members of the cursor's score
// used to walk them one by one: a chunk deep into a 200,000-job burst's
// timer held Redis for milliseconds; BenchmarkLedgerRoundOneScore.)
func TestLedgerRoundOneScore(t *testing.T) { onTopologies(t, testLedgerRoundOneScore) }

func testLedgerRoundOneScore(t *testing.T, client redis.UniversalClient) {
	ctx := bg
	e, err := New(ctx, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "lt1", "q"
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var reqs []*engine.PublishRequest
	for i := range 1000 {
		r := pubReq(ns, q, 10)
		r.TTL = 2 * time.Hour
		switch {
		case i < 10:
			r.DueAt = due.Add(-time.Minute) // below the burst
		case i >= 990:
			r.DueAt = due.Add(time.Minute) // above it
		default:
			r.DueAt = due
		}
		reqs = append(reqs, r)
	}
	for i := 0; i < len(reqs); i += 100 {
		if _, err := e.PublishBatch(ctx, reqs[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	round := &ledgerRound{q: [2]string{ns, q}, s: 1, lastLen: -1, min: "-inf", horizon: 3 * time.Hour}
	read := 0
	for calls := 0; round.s <= 4; calls++ {
		if calls > 200 {
			t.Fatalf("round not over after %d calls (%+v)", calls, round)
		}
		n, err := e.ledgerChunk(ctx, round, 7)
		if err != nil {
			t.Fatal(err)
		}
		read += n
	}
	if read != 1000 {
		t.Fatalf("round read %d entries, want 1000", read)
	}
	if n := client.ZCard(ctx, ledgerKey(jobKeyPrefix(ns, q))).Val(); n != 1000 {
		t.Fatalf("%d records, want 1000", n)
	}
}

// BenchmarkLedgerRoundOneScore: the expiry ledger's round over a timer of
// 200,000 entries all due at one instant (a burst), in chunks of
// ledgerChunkMax; one op = one entry read (-benchtime 200000x: one round
// over the timer). The members are added in random order, as a burst's
// IDs come among other keys: the sorted set's nodes are not in memory
// order. redis-µs/op is Redis's CPU per entry; deep-chunk-ms the median
// call of the round's last tenth (the entries read deepest into the
// score).
func BenchmarkLedgerRoundOneScore(b *testing.B) {
	client := realClient(b)
	e, err := New(bg, client, Options{NoAutoPipeline: true})
	if err != nil {
		b.Fatal(err)
	}
	const ns, q, size = "lb", "q", 200_000
	qn := e.names.get([3]string{ns, q})
	due := float64(time.Now().Add(time.Hour).UnixMilli())
	perm := rand.New(rand.NewPCG(1, 2)).Perm(size)
	for i := 0; i < size; i += 1000 {
		zs := make([]redis.Z, 0, 1000)
		for _, k := range perm[i : i+1000] {
			zs = append(zs, redis.Z{Score: due, Member: fmt.Sprintf("01JF%022d", k)})
		}
		if err := client.ZAdd(bg, qn.timer, zs...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	var deep []time.Duration
	cpu := mastersCPU(b, client)
	b.ResetTimer()
	round := &ledgerRound{q: [2]string{ns, q}, s: 3, lastLen: -1, min: "-inf", horizon: time.Hour}
	for read := 0; read < b.N; {
		if round.s != 3 {
			round = &ledgerRound{q: [2]string{ns, q}, s: 3, lastLen: -1, min: "-inf", horizon: time.Hour}
		}
		t0 := time.Now()
		n, err := e.ledgerChunk(bg, round, min(ledgerChunkMax, b.N-read))
		if err != nil {
			b.Fatal(err)
		}
		if read >= b.N-b.N/10 {
			deep = append(deep, time.Since(t0))
		}
		read += n
	}
	b.StopTimer()
	b.ReportMetric((mastersCPU(b, client)-cpu)*1e6/float64(b.N), "redis-µs/op")
	if len(deep) > 0 {
		slices.Sort(deep)
		b.ReportMetric(float64(deep[len(deep)/2])/1e6, "deep-chunk-ms")
	}
}
