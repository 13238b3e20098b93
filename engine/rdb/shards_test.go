package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/enginetest"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestShardedMiniredis(t *testing.T) {
	enginetest.RunSharded(t, func(t *testing.T) *enginetest.Harness {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		return harness(t, client, m.FastForward)
	})
}

func TestShardedRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	enginetest.RunSharded(t, func(t *testing.T) *enginetest.Harness {
		if err := client.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return harness(t, client, time.Sleep)
	})
}

// TestShardedCluster runs the shards' contract on a real cluster, and
// checks that a queue of 4 shards has its jobs on at least 2 masters.
func TestShardedCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	enginetest.RunSharded(t, func(t *testing.T) *enginetest.Harness {
		c.Flush(t)
		return harness(t, client, time.Sleep)
	})
	t.Run("ShardsOnMasters", func(t *testing.T) {
		c.Flush(t)
		h := harness(t, client, time.Sleep)
		e := h.Engine.(*Engine)
		if err := e.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
			t.Fatal(err)
		}
		masters := map[string]int{}
		for i := 0; i < 16; i++ {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := engine.JobIDShard(id)
			key := jobKey("ns", shardName("hot", s), id)
			if n, err := client.Exists(bg, key).Result(); err != nil || n != 1 {
				t.Fatalf("job %s of shard %d is not at %s: %d, %v", id, s, key, n, err)
			}
			masters[c.MasterOf(t, key)]++
		}
		if len(masters) < 2 {
			t.Fatalf("a queue of 4 shards has its jobs on masters %v, want at least 2", masters)
		}
	})
}

func TestShardGroups(t *testing.T) {
	// Shard 0 is the queue; shard i is in group (g + bitReverse6(i)) % 64,
	// so the first 4 shards are 16 groups apart.
	for _, q := range []string{"hot", "orders", "a"} {
		g := slotGroup("ns", q)
		if slotGroup("ns", shardName(q, 0)) != g || queueBase("ns", shardName(q, 0)) != queueBase("ns", q) ||
			queueMember("ns", shardName(q, 0)) != queueMember("ns", q) {
			t.Fatalf("shard 0 of %s is not the queue", q)
		}
		seen := map[int]bool{}
		for i := 0; i < 4; i++ {
			gi := slotGroup("ns", shardName(q, i))
			if gi != (g+16*[]int{0, 2, 1, 3}[i])%slotGroups {
				t.Fatalf("shard %d of %s in group %d (queue in %d)", i, q, gi, g)
			}
			seen[gi] = true
		}
		all := map[int]bool{}
		for i := 0; i < 64; i++ {
			all[slotGroup("ns", shardName(q, i))] = true
		}
		if len(seen) != 4 || len(all) != 64 {
			t.Fatalf("groups of shards: first 4 %v, all 64 cover %d groups", seen, len(all))
		}
	}
	for _, bad := range []string{"q~", "q~64", "q~01", "q~x", "~1", "_q~1", "q~1~2"} {
		if validQueue(bad) {
			t.Errorf("%q is a valid queue name", bad)
		}
	}
	if !validQueue("q~63") || !validQueue("q~0") {
		t.Error("shard names refused")
	}
}

func TestShardJobIDs(t *testing.T) {
	for s := 0; s < engine.MaxShards; s++ {
		for _, v := range []bool{false, true} {
			id := engine.NewShardJobID(time.UnixMilli(1700000000123), 90*time.Second, v, s)
			got, ok := engine.JobIDShard(id)
			info, err := engine.ParseJobID(id)
			if !ok || got != s || err != nil || info.Published.UnixMilli() != 1700000000123 || info.Delay != 90*time.Second || (info.Version == 1) != v {
				t.Fatalf("shard %d id %s: shard %d %v, info %+v %v", s, id, got, ok, info, err)
			}
		}
	}
	if _, ok := engine.JobIDShard("nope"); ok {
		t.Fatal("a non-ID has a shard")
	}
}

// TestShardedDashboard: the dashboard's queue list, queue details and job
// lists see a sharded queue as one queue.
func TestShardedDashboard(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngine(t, client, newTestClock())
	if err := e.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := 0; i < 20; i++ {
		r := &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1}
		if i%4 == 0 {
			r.Delay = time.Hour
		}
		id, err := e.Publish(bg, r)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = r.Delay == 0
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "cold", Body: []byte("x"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	qs, err := e.NamespaceQueues(bg, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Queue != "cold" || qs[1].Queue != "hot" || qs[1].Ready != 15 || qs[1].Timer != 5 {
		t.Fatalf("namespace queues = %+v", qs)
	}
	ds, err := e.QueueDetails(bg, "ns", []string{"hot", "cold"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Queue != "hot" || ds[0].Ready != 15 || ds[0].Delayed != 5 || ds[1].Ready != 1 || ds[0].OldestReady.IsZero() {
		t.Fatalf("queue details = %+v", ds)
	}
	listed := map[string]bool{}
	var cursor int64
	for pages := 0; ; pages++ {
		jobs, next, err := e.ListJobs(bg, "ns", "hot", engine.ListReady, cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if !want[j.ID] || listed[j.ID] || j.Queue != "hot" {
				t.Fatalf("listed %+v (ready %v, listed before %v)", j, want[j.ID], listed[j.ID])
			}
			listed[j.ID] = true
		}
		if next == 0 || pages > 20 {
			break
		}
		cursor = next
	}
	if len(listed) != 15 {
		t.Fatalf("ready pages listed %d jobs, want 15", len(listed))
	}
	for id := range want {
		j, err := e.FindJob(bg, id)
		if err != nil || j.Queue != "hot" {
			t.Fatalf("find job %s = %+v, %v", id, j, err)
		}
		break
	}
	st, err := e.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Queue == "hot" && (s.Ready != 15 || s.Timer != 5) || isShardName(s.Queue) {
			t.Fatalf("stats %+v", st)
		}
	}
}

// TestShardsFollowAndDrain: a second engine on the pool follows a change
// of K within a second, and lowering K leaves the shards past it draining
// (consumed, counted) until they are empty, when the span comes down.
func TestShardsFollowAndDrain(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	a := startEngine(t, client, newTestClock())
	b := startEngine(t, client, newTestClock())
	if err := a.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	pubN := func(e *Engine, n int) map[int]int {
		shards := map[int]int{}
		for i := 0; i < n; i++ {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := engine.JobIDShard(id)
			shards[s]++
		}
		return shards
	}
	if got := pubN(b, 20); len(got) != 4 {
		t.Fatalf("engine b, a second after a set shards=4, published to shards %v", got)
	}
	b.shardGrace.Store(int64(300 * time.Millisecond))
	if err := a.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got := pubN(b, 4); len(got) != 1 || got[0] != 4 {
		t.Fatalf("after shards=1 engine b published to shards %v", got)
	}
	// The jobs of shards 1..3 still count and are consumed; the span
	// stays while they are there.
	if n, _ := b.Size(bg, "ns", "hot"); n != 24 {
		t.Fatalf("size = %d, want 24", n)
	}
	sp, err := b.readShards(bg, "ns", "hot")
	if err != nil || sp.k != 1 || sp.span != 4 {
		t.Fatalf("shards entry %+v, %v; want k 1 span 4", sp, err)
	}
	for got := 0; got < 24; {
		jobs, err := b.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"hot"}, TTR: time.Minute, Count: 10})
		if err != nil || len(jobs) == 0 {
			t.Fatalf("consumed %d of 24, then %v", got, err)
		}
		for _, j := range jobs {
			if err := a.Delete(bg, "ns", "hot", j.ID); err != nil {
				t.Fatal(err)
			}
		}
		got += len(jobs)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sp, err := b.readShards(bg, "ns", "hot")
		if err != nil {
			t.Fatal(err)
		}
		if sp.span == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("span still %d 5 s after the shards past K were empty", sp.span)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, _ := client.HLen(bg, shardsKey).Result(); n != 0 {
		t.Fatalf("the shards hash keeps %d entries for an unsharded queue", n)
	}
}

// TestShardsGrowWakesWaiters: a consumer long-polling a queue on one
// server is served a job that another server, which just raised the
// queue's shards, published into a shard the waiting consumer did not
// know: the change wakes it and it looks over the new shards.
func TestShardsGrowWakesWaiters(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	a := startEngine(t, client, newTestClock())
	b := startEngine(t, client, newTestClock())
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, err := a.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"hot"}, TTR: time.Minute, Count: 1, Timeout: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	time.Sleep(300 * time.Millisecond) // a waits on hot's one channel
	if err := b.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	id, err := b.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := engine.JobIDShard(id); s == 0 {
		t.Fatalf("the first publish after shards=4 went to shard 0 (%s): the test needs another shard", id)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != id || jobs[0].Queue != "hot" {
			t.Fatalf("the waiting consumer got %v, want job %s", jobs, id)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the waiting consumer got the job after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a consumer waiting since before shards=4 was not served the job of a new shard")
	}
}
