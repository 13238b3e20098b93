package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestCluster: the harness gives a whole cluster: every node says
// cluster_state:ok, the 16384 slots are served by three masters with one
// replica each, and a key written through the cluster client is read back,
// from its master and from its replica.
func TestCluster(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t)
	t.Logf("cluster of %d nodes up in %v", len(c.Addrs), time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	if len(c.Addrs) != 6 {
		t.Fatalf("Addrs = %v, want 6 nodes", c.Addrs)
	}
	for _, addr := range c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		info, err := n.ClusterInfo(ctx).Result()
		_ = n.Close()
		if err != nil {
			t.Fatalf("CLUSTER INFO on %s: %v", addr, err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:6", "cluster_size:3"} {
			if !strings.Contains(info, want+"\r\n") {
				t.Errorf("%s: CLUSTER INFO lacks %s:\n%s", addr, want, info)
			}
		}
	}
	shards := c.Shards(t)
	if len(shards) != 3 {
		t.Fatalf("Shards = %+v, want 3 masters", shards)
	}
	next := 0
	seen := make(map[string]bool)
	for _, sh := range shards {
		if len(sh.Replicas) != 1 {
			t.Errorf("master %s has replicas %v, want 1", sh.Master, sh.Replicas)
		}
		for _, addr := range append([]string{sh.Master}, sh.Replicas...) {
			if seen[addr] {
				t.Errorf("node %s appears twice in %+v", addr, shards)
			}
			seen[addr] = true
		}
		for _, r := range sh.Slots {
			if r[0] != next {
				t.Fatalf("slots %d..%d: want a range starting at %d (shards %+v)", r[0], r[1], next, shards)
			}
			next = r[1] + 1
		}
	}
	if next != 16384 {
		t.Fatalf("slots covered up to %d, want 16384", next)
	}

	cl := c.Client(t)
	keys := []string{"a", "b", "c", "{tag}x", "{tag}y"}
	for _, k := range keys {
		if err := cl.Set(ctx, k, "v-"+k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	masters := make(map[string]bool)
	for _, k := range keys {
		if got, err := cl.Get(ctx, k).Result(); err != nil || got != "v-"+k {
			t.Fatalf("GET %s = %q, %v; want %q", k, got, err, "v-"+k)
		}
		slot := int(redisSlot(t, cl, k))
		wantMaster := c.MasterOf(t, k)
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if slot >= r[0] && slot <= r[1] {
					masters[sh.Master] = true
					if sh.Master != wantMaster {
						t.Errorf("MasterOf(%q) = %s, want %s (slot %d)", k, wantMaster, sh.Master, slot)
					}
					wantOnNode(t, sh.Master, k, "v-"+k, false)
					wantOnNode(t, sh.Replicas[0], k, "v-"+k, true)
				}
			}
		}
	}
	if len(masters) < 2 {
		t.Errorf("keys %v all landed on %v: want them spread over masters", keys, masters)
	}
	// A key of the shared cluster of another test is no key here.
	if n, err := cl.DBSize(ctx).Result(); err != nil || n != int64(len(keys)) {
		t.Errorf("DBSIZE = %d, %v; want %d", n, err, len(keys))
	}
}

func redisSlot(t *testing.T, cl *redis.ClusterClient, key string) int64 {
	t.Helper()
	slot, err := cl.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	return slot
}

// wantOnNode reads key on one node directly (READONLY on a replica, which
// may lag: it is polled for up to 5s).
func wantOnNode(t *testing.T, addr, key, want string, replica bool) {
	t.Helper()
	ctx := context.Background()
	n := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		if replica {
			return cn.ReadOnly(ctx).Err()
		}
		return nil
	}})
	defer n.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := n.Get(ctx, key).Result()
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on %s = %q, %v; want %q", key, addr, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSharedCluster: SharedCluster starts one cluster per test binary and
// hands the same one to every test.
func TestSharedCluster(t *testing.T) {
	var first *redistest.Cluster
	for _, name := range []string{"one", "two"} {
		t.Run(name, func(t *testing.T) {
			c := redistest.SharedCluster(t)
			if first == nil {
				first = c
			} else if c != first {
				t.Fatalf("second SharedCluster is another cluster")
			}
			cl := c.Client(t)
			if err := cl.Set(context.Background(), "shared-"+name, "1", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
		})
	}
	c := redistest.SharedCluster(t)
	c.Flush(t)
	if n, err := c.Client(t).DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Flush = %d, %v; want 0", n, err)
	}
}

// TestClusterFailover: a killed master's replica takes over, and the
// master restarted on its port and directory rejoins as a replica.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes the node timeout (3s) and more")
	}
	c := redistest.StartCluster(t)
	ctx := context.Background()
	cl := c.Client(t)
	if err := cl.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	old := c.MasterOf(t, "k")
	var replica string
	for _, sh := range c.Shards(t) {
		if sh.Master == old {
			replica = sh.Replicas[0]
		}
	}
	wantOnNode(t, replica, "k", "v", true) // replicated before the kill
	start := time.Now()
	c.Kill(t, old)
	c.Wait(t)
	if got := c.MasterOf(t, "k"); got != replica {
		t.Fatalf("after killing %s, k is served by %s, want its replica %s", old, got, replica)
	}
	t.Logf("failover in %v", time.Since(start).Round(time.Millisecond))
	// go-redis's cluster client keeps dialling the dead master until its
	// state is 10s old or a MOVED arrives: reload it.
	cl.ReloadState(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := cl.Get(ctx, "k").Result()
		if err == nil && got == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET k through the cluster client after the failover = %q, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Restart(t, old)
	c.Wait(t)
	for _, sh := range c.Shards(t) {
		if sh.Master == replica {
			if len(sh.Replicas) != 1 || sh.Replicas[0] != old {
				t.Fatalf("after the restart, %s has replicas %v, want [%s]", replica, sh.Replicas, old)
			}
			return
		}
	}
	t.Fatalf("after the restart, %s is no master: %+v", replica, c.Shards(t))
}
