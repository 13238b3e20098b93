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
