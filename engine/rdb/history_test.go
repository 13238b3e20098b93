package rdb

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// historyEngine is an engine with history on miniredis and a frozen clock
// 10 s into the last minute of a block; its Run is not started (tests
// flush by hand).
func historyEngine(t *testing.T) (*Engine, *miniredis.Miniredis, *frozenClock, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { client.Close() })
	clock := &frozenClock{t: time.Now().Truncate(historyBlock * time.Minute).Add((historyBlock-1)*time.Minute + 10*time.Second)}
	m.SetTime(clock.Now())
	e, err := New(bg, client, Options{Now: clock.Now, HistoryFlush: 5 * time.Second, NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	return e, m, clock, client
}

func historyAt(t *testing.T, e *Engine, ns, q string, at time.Time) engine.Counts {
	t.Helper()
	got, err := e.History(bg, ns, q, at, 1)
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

func wantCounts(t *testing.T, what string, got engine.Counts, p, c, a, r, d int64) {
	t.Helper()
	if got.Published != p || got.Consumed != c || got.Acked != a || got.Retried != r || got.Dead != d {
		t.Errorf("%s: published %d consumed %d acked %d retried %d dead %d; want %d %d %d %d %d",
			what, got.Published, got.Consumed, got.Acked, got.Retried, got.Dead, p, c, a, r, d)
	}
}

// TestHistoryCounts drives every counted event through the engine —
// publish (batch and single), consume, ACK, release, TTR expiries that
// retry and that kill — and checks the minute's hashes of the queue, its
// namespace and the pool, the latency buckets, the keys' expiry, and that
// a flush with nothing new writes nothing.
func TestHistoryCounts(t *testing.T) {
	e, m, clock, client := historyEngine(t)
	minute := clock.Now().Truncate(time.Minute)
	reqs := make([]*engine.PublishRequest, 3)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 2}
	}
	if _, err := e.PublishBatch(bg, reqs); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q2", Body: []byte("y"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	clock.Add(30 * time.Millisecond)
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Second, Count: 3})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("consume: %d jobs, %v", len(jobs), err)
	}
	a, b := jobs[0], jobs[1]
	if err := e.Ack(bg, "ns", "q", a.ID, a.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: b.ID, Receipt: b.Receipt}); err != nil {
		t.Fatal(err)
	}
	again, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Second, Count: 1})
	if err != nil || len(again) != 1 || again[0].ID != b.ID || again[0].Tries != 0 {
		t.Fatalf("consume again: %v %v", again, err)
	}
	// TTRs expire: the third job (a try left) is retried, b (none) dies.
	clock.Add(2 * time.Second)
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	q := historyAt(t, e, "ns", "q", minute)
	wantCounts(t, "queue", q, 3, 4, 1, 2, 1)
	if q.Latency[3] != 4 || q.LatencyPercentile(0.5) != 50 {
		t.Errorf("latency buckets %v (p50 %d): want 4 consumes after 30 ms, in the ≤50 ms bucket", q.Latency, q.LatencyPercentile(0.5))
	}
	wantCounts(t, "queue q2", historyAt(t, e, "ns", "q2", minute), 1, 0, 0, 0, 0)
	wantCounts(t, "namespace", historyAt(t, e, "ns", "", minute), 4, 4, 1, 2, 1)
	wantCounts(t, "pool", historyAt(t, e, "", "", minute), 4, 4, 1, 2, 1)

	// Each hash expires 25 h after the end of its block, here the end of
	// the minute (miniredis's clock stays where the test set it).
	block := minute.Unix() / 60 / historyBlock
	for _, k := range []string{queueHistoryKey("ns", "q", block), namespaceHistoryKey("ns", block), poolHistoryKey(block)} {
		ttl := m.TTL(k)
		want := minute.Add(time.Minute + historyRetention).Sub(minute.Add(10 * time.Second))
		if ttl < want-2*time.Second || ttl > want+2*time.Second {
			t.Errorf("TTL of %s = %v, want %v", k, ttl, want)
		}
	}

	// Nothing new: a flush writes nothing (no command at all).
	before := m.CommandCount()
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	if n := m.CommandCount() - before; n != 0 {
		t.Errorf("an idle flush sent %d commands", n)
	}
	wantCounts(t, "queue after an idle flush", historyAt(t, e, "ns", "q", minute), 3, 4, 1, 2, 1)

	// The next minute's counts go to the next block's hashes.
	clock.Add(time.Minute)
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("z"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, "first minute", historyAt(t, e, "ns", "q", minute), 3, 4, 1, 2, 1)
	wantCounts(t, "second minute", historyAt(t, e, "ns", "q", minute.Add(time.Minute)), 1, 0, 0, 0, 0)
	series, err := e.History(bg, "ns", "q", minute.Add(-time.Minute), 4)
	if err != nil || len(series) != 4 || series[1].Published != 3 || series[2].Published != 1 || !series[0].Zero() || !series[3].Zero() {
		t.Errorf("series %+v %v", series, err)
	}
	if keys, _ := client.Keys(bg, "h/*").Result(); len(keys) != 7 {
		t.Errorf("history keys %v: want those of q (2 blocks), q2 (1), the namespace (2) and the pool (2)", keys)
	}
}

// TestHistoryRetire: counters of a queue idle for historyIdleFlushes
// flushes leave memory, and its next events are counted once, in full.
func TestHistoryRetire(t *testing.T) {
	e, _, clock, _ := historyEngine(t)
	minute := clock.Now().Truncate(time.Minute)
	pub := func() {
		t.Helper()
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	pub()
	flush := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := e.FlushHistory(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(historyIdleFlushes + 3)
	e.hist.mu.Lock()
	held := len(e.hist.queues)
	e.hist.mu.Unlock()
	if held != 1 {
		t.Fatalf("counters retired before historyIdleTime: %d held", held)
	}
	// Idle long enough: retired, then gone after the grace period.
	clock.Add(historyIdleTime)
	flush(historyIdleFlushes)
	clock.Add(historyRetireGrace)
	flush(1)
	e.hist.mu.Lock()
	held = len(e.hist.queues) + len(e.hist.retiring)
	e.hist.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d counter sets still held after the queue was idle", held)
	}
	pub()
	pub()
	flush(1)
	wantCounts(t, "before retirement", historyAt(t, e, "ns", "q", minute), 1, 0, 0, 0, 0)
	wantCounts(t, "after retirement", historyAt(t, e, "ns", "q", clock.Now()), 2, 0, 0, 0, 0)
}

// TestHistoryConcurrentCounts: publishes racing with flushes (and with
// the retirement of idle counters) are each counted exactly once.
func TestHistoryConcurrentCounts(t *testing.T) {
	e, _, clock, _ := historyEngine(t)
	minute := clock.Now().Truncate(time.Minute)
	const workers, each = 4, 50
	var wg sync.WaitGroup
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.FlushHistory(bg); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				q := fmt.Sprintf("q%d", i%3)
				if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: q, Body: []byte("x"), Tries: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flushed
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, "namespace", historyAt(t, e, "ns", "", minute), workers*each, 0, 0, 0, 0)
}

func TestHistoryInvalid(t *testing.T) {
	e, _, clock, _ := historyEngine(t)
	for _, tc := range []struct {
		ns, q   string
		minutes int
	}{{"ns", "q", 0}, {"ns", "q", HistoryMaxMinutes + 1}, {"", "q", 1}, {"bad/ns", "", 1}, {"ns", "bad q", 1}} {
		if _, err := e.History(bg, tc.ns, tc.q, clock.Now(), tc.minutes); err == nil {
			t.Errorf("History(%q, %q, %d): want an error", tc.ns, tc.q, tc.minutes)
		}
	}
	// Without HistoryFlush the engine counts nothing and flushes nothing.
	plain, err := New(bg, e.rdb, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	if err := plain.FlushHistory(bg); err != nil || plain.hist != nil {
		t.Fatalf("history without HistoryFlush: %v", err)
	}
	if keys, _ := e.rdb.Keys(bg, "h/*").Result(); len(keys) != 0 {
		t.Errorf("keys %v written without history", keys)
	}
}

// TestHistoryTwoEnginesReal: two engines (two servers) on one real Redis,
// each flushing by itself every second, add up in the same hashes; the
// last counts are flushed when Run stops; every hash expires within 25 h
// of its minute.
func TestHistoryTwoEnginesReal(t *testing.T) {
	client := realClient(t)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var engines []*Engine
	done := make(chan struct{}, 2)
	for i := 0; i < 2; i++ {
		e, err := New(bg, client, Options{HistoryFlush: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
		go func() { _ = e.Run(ctx); done <- struct{}{} }()
	}
	start := time.Now().Add(-time.Minute)
	for _, e := range engines {
		for i := 0; i < 10; i++ {
			if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "two", Queue: "q", Body: []byte("x"), Tries: 1}); err != nil {
				t.Fatal(err)
			}
		}
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "two", Queues: []string{"q"}, TTR: time.Minute, Count: 5})
		if err != nil || len(jobs) != 5 {
			t.Fatalf("consume: %d, %v", len(jobs), err)
		}
		for _, j := range jobs {
			if err := e.Ack(bg, "two", "q", j.ID, j.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	sum := func() engine.Counts {
		got, err := engines[0].History(bg, "two", "q", start, 3)
		if err != nil {
			t.Fatal(err)
		}
		var s engine.Counts
		for i := range got {
			s.Add(&got[i])
		}
		return s
	}
	deadline := time.Now().Add(15 * time.Second)
	for s := sum(); s.Published != 20 || s.Acked != 10; s = sum() {
		if time.Now().After(deadline) {
			t.Fatalf("the flushes of both engines did not add up: %+v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantCounts(t, "both engines", sum(), 20, 10, 10, 0, 0)

	// Counts made just before Run stops are flushed on the way out.
	if _, err := engines[1].Publish(bg, &engine.PublishRequest{Namespace: "two", Queue: "q", Body: []byte("x"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	<-done
	wantCounts(t, "after stop", sum(), 21, 10, 10, 0, 0)

	keys, err := client.Keys(bg, "h/*").Result()
	if err != nil || len(keys) < 3 {
		t.Fatalf("history keys %v %v", keys, err)
	}
	for _, k := range keys {
		ttl, err := client.TTL(bg, k).Result()
		if err != nil || ttl < 24*time.Hour || ttl > historyRetention+historyBlock*time.Minute {
			t.Errorf("TTL of %s = %v (%v): want at least 24 h, at most 25 h after its block", k, ttl, err)
		}
	}
}

// TestHistoryMemoryPerQueueDay measures on a real Redis what a day of
// history costs: 1,440 minutes of a queue busy every minute (all five
// counters and three latency buckets non-zero), by MEMORY USAGE of its
// keys; the namespace's and the pool's hashes cost as much again per
// namespace and per pool. doc/dashboard.md quotes the figure.
func TestHistoryMemoryPerQueueDay(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	client := realClient(t)
	clock := &frozenClock{t: time.Now().Truncate(time.Minute).Add(-24 * time.Hour)}
	e, err := New(bg, client, Options{Now: clock.Now, HistoryFlush: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ns, q := "order-service", "cancel-unpaid"
	c := e.hist.counters(ns, q, e.names.get([3]string{ns, q}))
	// The worst case: every counter and every latency bucket non-zero in
	// every minute (120 fields a block).
	full := e.hist.counters(ns, "full", e.names.get([3]string{ns, "full"}))
	for i := 0; i < 1440; i++ {
		for k := range full.n {
			full.n[k].Add(1000)
		}
		for k := range full.lat {
			full.lat[k].Add(70)
		}
		c.n[hPublished].Add(1200)
		c.n[hConsumed].Add(1200)
		c.n[hAcked].Add(1190)
		c.n[hRetried].Add(10)
		c.n[hDead].Add(1)
		c.lat[2].Add(1000)
		c.lat[4].Add(150)
		c.lat[7].Add(50)
		if err := e.flushHistory(bg, clock.Now()); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Minute)
	}
	var queueBytes, fullBytes, otherBytes int64
	var cur uint64
	for {
		keys, next, err := client.Scan(bg, cur, "h/*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			n, err := client.MemoryUsage(bg, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.HasPrefix(k, strings.TrimSuffix(queueHistoryKey(ns, q, 0), "0")):
				queueBytes += n
			case strings.HasPrefix(k, strings.TrimSuffix(queueHistoryKey(ns, "full", 0), "0")):
				fullBytes += n
				if enc, err := client.ObjectEncoding(bg, k).Result(); err != nil || enc != "listpack" {
					t.Errorf("%s is encoded %q (%v), want listpack", k, enc, err)
				}
			default:
				otherBytes += n
			}
		}
		if cur = next; cur == 0 {
			break
		}
	}
	t.Logf("a queue busy every minute for a day: %d bytes of history (%d per minute); with every field set: %d (%d per minute); their namespace and pool: %d",
		queueBytes, queueBytes/1440, fullBytes, fullBytes/1440, otherBytes)
	if queueBytes == 0 || queueBytes > 128<<10 || fullBytes > 256<<10 {
		t.Errorf("a day of one queue's history takes %d bytes (%d with every field), want at most 128 KiB (256 KiB) (doc/dashboard.md)", queueBytes, fullBytes)
	}
}

// BenchmarkHistoryHotPath is what history adds to the hot paths, on its
// own: per publish call of a queue, and per consumed job (its counter and
// latency bucket), with the queue's names already known.
func BenchmarkHistoryHotPath(b *testing.B) {
	m := miniredis.RunT(b)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { client.Close() })
	e, err := New(bg, client, Options{HistoryFlush: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	qn := e.names.get([3]string{"ns", "q"})
	b.Run("publish", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			e.histPublished("ns", "q", qn, 1)
		}
	})
	jobs := []*engine.Job{{Namespace: "ns", Queue: "q", ID: engine.NewJobID(time.Now(), 0, false)}}
	now := time.Now()
	b.Run("elapsed alone", func(b *testing.B) {
		for range b.N {
			_ = engine.ElapsedMS(jobs[0].ID, now)
		}
	})
	b.Run("consumed job", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			e.histConsumed("ns", jobs, now)
		}
	})
}

// TestHistoryFlushPartial: a flush whose queue hash is refused (a cluster
// node answering MOVED past ClusterRetry; here a hook, on a pool with no
// retry) while the namespace's and the pool's hashes take their
// increments fails, and the next flush writes the queue's increments
// only: every event is counted once in each hash. Before, the next flush
// wrote the namespace's and the pool's again.
func TestHistoryFlushPartial(t *testing.T) {
	e, _, clock, client := historyEngine(t)
	for range 3 {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	f := &refuseKeys{key: queueHistoryKey("ns", "q", func() int64 { b, _ := blockOf(clock.Now().Unix() / 60); return b }())}
	f.n.Store(1)
	client.AddHook(f)
	if err := e.flushHistory(bg, clock.Now()); err == nil {
		t.Fatal("flush with the queue's hash refused: no error")
	}
	wantCounts(t, "queue after the refused flush", historyAt(t, e, "ns", "q", clock.Now()), 0, 0, 0, 0, 0)
	wantCounts(t, "namespace after the refused flush", historyAt(t, e, "ns", "", clock.Now()), 3, 0, 0, 0, 0)
	if err := e.flushHistory(bg, clock.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, ns, q string }{{"queue", "ns", "q"}, {"namespace", "ns", ""}, {"pool", "", ""}} {
		wantCounts(t, tc.what, historyAt(t, e, tc.ns, tc.q, clock.Now()), 3, 0, 0, 0, 0)
	}
}
