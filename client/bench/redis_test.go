package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/config"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestRedisForking(t *testing.T) {
	for _, c := range []struct {
		info string
		want bool
	}{
		{"# Persistence\r\nloading:0\r\nrdb_bgsave_in_progress:0\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\nmodule_fork_in_progress:0\r\n", false},
		{"# Persistence\r\nrdb_bgsave_in_progress:1\r\naof_rewrite_in_progress:0\r\n", true},
		{"aof_rewrite_in_progress:1\r\n", true},
		{"aof_rewrite_scheduled:1\r\n", true},
		{"module_fork_in_progress:1\r\n", true},
		{"rdb_changes_since_last_save:12\r\naof_rewrites:3\r\n", false},
	} {
		if got := redisForking(c.info); got != c.want {
			t.Errorf("redisForking(%q) = %v, want %v", c.info, got, c.want)
		}
	}
}

// TestRedisProbe reads a real Redis's CPU time, and waits out a snapshot
// that rdb-key-save-delay stretches to about half a second.
func TestRedisProbe(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, err := NewRedisProbe(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if cpu, err := p.CPU(ctx); err != nil || cpu <= 0 {
		t.Fatalf("CPU = %v, %v", cpu, err)
	}
	start := time.Now()
	if waited, err := p.Quiet(ctx); err != nil || waited != 0 {
		t.Fatalf("Quiet on an idle Redis = %v, %v; want 0", waited, err)
	}
	if d := time.Since(start); d < quietFor || d > 5*time.Second {
		t.Fatalf("Quiet on an idle Redis took %v; want quietFor (%v) and a little", d, quietFor)
	}

	c := srv.Client()
	defer c.Close()
	for i := 0; i < 10; i++ {
		if err := c.Set(ctx, fmt.Sprint("k", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ConfigSet(ctx, "rdb-key-save-delay", "50000").Err(); err != nil { // µs per key
		t.Fatal(err)
	}
	if err := c.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waited, err := p.Quiet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited < 200*time.Millisecond || time.Since(start) < waited+quietFor {
		t.Fatalf("Quiet during a snapshot of about 500 ms waited %v, returned after %v", waited, time.Since(start))
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil || redisForking(info) {
		t.Fatalf("Quiet returned while Redis still forked (%v):\n%s", err, info)
	}

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := c.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Quiet(cctx); err == nil {
		t.Fatal("Quiet returned no error when its context ended during a snapshot")
	}
}

// A CLUSTER NODES reply of a 3-master cluster while a slot migrates, with
// a node that does not know its own host (":PORT"), a failed replica, a
// node in handshake and one without an address.
const clusterNodesReply = `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 [10923->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 slave,fail 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@31006 slave 292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 0 1426238317741 6 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca :30001@31001 myself,master - 0 0 1 connected 0-5459 5460
a1b2c3d4e5f60718293a4b5c6d7e8f9012345678 127.0.0.1:30007@31007 handshake - 0 0 0 connected
b1b2c3d4e5f60718293a4b5c6d7e8f9012345678 :0@0 master,noaddr - 0 0 0 disconnected
`

func TestParseClusterNodes(t *testing.T) {
	got, err := parseClusterNodes(clusterNodesReply, "10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	want := []RedisNode{
		{Addr: "10.0.0.9:30001", Master: true, Slots: 5461},
		{Addr: "127.0.0.1:30002", Master: true, Slots: 5462},
		{Addr: "127.0.0.1:30003", Master: true, Slots: 5461},
		{Addr: "127.0.0.1:30004"},
		{Addr: "127.0.0.1:30006"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parseClusterNodes =\n%+v\nwant\n%+v", got, want)
	}
	for _, bad := range []string{"", "abc 127.0.0.1:1@2 master", "id 127.0.0.1:1@2 master - 0 0 1 connected 10-x", "id 127.0.0.1:1@2 master - 0 0 1 connected 10-5", "id nohost master - 0 0 1 connected"} {
		if n, err := parseClusterNodes(bad, "h"); err == nil {
			t.Errorf("parseClusterNodes(%q) = %+v, want an error", bad, n)
		}
	}
}

// TestSetNodesCPU: the masters' total, each master's part and share, the
// replicas apart, and a node that changed role between the readings left
// out and named.
func TestSetNodesCPU(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	start := []NodeCPU{
		{RedisNode{"a:1", true, 5461}, ms(100)},
		{RedisNode{"b:1", true, 5462}, ms(100)},
		{RedisNode{"c:1", true, 5461}, ms(100)},
		{RedisNode{"d:1", false, 0}, ms(100)},
		{RedisNode{"e:1", false, 0}, ms(100)},
	}
	end := []NodeCPU{
		{RedisNode{"a:1", true, 5461}, ms(400)}, // +300
		{RedisNode{"b:1", true, 5462}, ms(200)}, // +100
		{RedisNode{"c:1", true, 5461}, ms(100)}, // +0
		{RedisNode{"d:1", false, 0}, ms(150)},   // +50
		{RedisNode{"e:1", true, 0}, ms(900)},    // a replica promoted
	}
	r := Result{Ops: 1000}
	cfg := Config{RedisNodes: func(context.Context) ([]NodeCPU, error) { return end, nil }}
	r.setCPU(context.Background(), &cfg, cpuMark{nodes: start})
	if r.RedisCPUUS != 400 || r.RedisReplicasCPUUS != 50 || len(r.RedisMasters) != 3 {
		t.Fatalf("setCPU = %+v; want masters 400 µs per job (3 of them), replicas 50", r)
	}
	for i, want := range []MasterCPU{{"a:1", 5461, 300, 0.75}, {"b:1", 5462, 100, 0.25}, {"c:1", 5461, 0, 0}} {
		if r.RedisMasters[i] != want {
			t.Errorf("master %d = %+v, want %+v", i, r.RedisMasters[i], want)
		}
	}
	if !strings.Contains(r.Note, "e:1") {
		t.Errorf("note %q does not name the promoted replica", r.Note)
	}

	// A standalone Redis: one node, no split.
	r = Result{Ops: 10}
	one := func(d time.Duration) []NodeCPU { return []NodeCPU{{RedisNode{"r:1", true, 0}, d}} }
	cfg.RedisNodes = func(context.Context) ([]NodeCPU, error) { return one(ms(3)), nil }
	r.setCPU(context.Background(), &cfg, cpuMark{nodes: one(ms(1))})
	if r.RedisCPUUS != 200 || r.RedisMasters != nil || r.RedisReplicasCPUUS != 0 {
		t.Fatalf("standalone setCPU = %+v; want 200 µs per job and no split", r)
	}
}

// TestRedisProbeCluster finds a real cluster's nodes from one seed (a
// replica) and meters each master: a publish spread over many queues (so
// over the slot groups, so over the masters) on a Kairos with a cluster
// pool costs CPU on every master, and the masters' parts add up to the
// total.
func TestRedisProbeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	cl := redistest.SharedCluster(t)
	shards := cl.Shards(t)
	ctx := context.Background()
	p, err := NewRedisProbe(shards[0].Replicas[0])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	nodes, err := p.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	masters, slots := 0, 0
	for _, n := range nodes {
		if n.Master {
			masters++
			slots += n.Slots
		}
	}
	if len(nodes) != 6 || masters != 3 || slots != 16384 {
		t.Fatalf("Nodes = %+v; want 3 masters serving 16384 slots and 3 replicas", nodes)
	}
	for i, sh := range shards {
		if nodes[i].Addr > nodes[min(i+1, 2)].Addr || !nodes[i].Master {
			t.Fatalf("Nodes = %+v: masters first, in address order", nodes)
		}
		found := false
		for _, n := range nodes[:3] {
			found = found || n.Addr == sh.Master
		}
		if !found {
			t.Fatalf("master %s not among %+v", sh.Master, nodes)
		}
	}
	if waited, err := p.Quiet(ctx); err != nil || waited != 0 {
		t.Fatalf("Quiet on an idle cluster = %v, %v", waited, err)
	}

	addr, token := startKairosOn(t, config.RedisConf{Cluster: true, Addrs: cl.Addrs})
	cfg := Config{Addr: addr, Token: token, Namespace: "bench", Queue: "probe", Concurrency: 8, Duration: time.Second,
		Queues: 64, RedisNodes: p.NodesCPU, Settle: func(ctx context.Context) { _, _ = p.Quiet(ctx) }}
	r, err := Publish(ctx, cfg)
	if err != nil || r.Ops == 0 || r.Errors != 0 {
		t.Fatalf("publish: %+v %v", r, err)
	}
	if len(r.RedisMasters) != 3 || r.RedisCPUUS <= 0 || r.RedisReplicasCPUUS <= 0 {
		t.Fatalf("publish over 64 queues on a cluster: %+v; want Redis CPU on 3 masters and on the replicas", r)
	}
	var sum, shares float64
	for _, m := range r.RedisMasters {
		if m.CPUUS <= 0 || m.Slots == 0 {
			t.Errorf("master %+v: no CPU or no slots from a publish over 64 queues", m)
		}
		sum += m.CPUUS
		shares += m.Share
	}
	if math.Abs(sum-r.RedisCPUUS) > 0.01*r.RedisCPUUS || math.Abs(shares-1) > 0.01 {
		t.Fatalf("masters add up to %.2f µs (shares %.3f), total %.2f", sum, shares, r.RedisCPUUS)
	}
	// The probe's total is the masters', not one node's.
	total, err := p.CPU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one, err := NewRedisProbe(shards[0].Master)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	oneNodes, err := one.NodesCPU(ctx)
	if err != nil || len(oneNodes) != 6 {
		t.Fatalf("a master as the seed: %+v %v", oneNodes, err)
	}
	for _, n := range oneNodes {
		if n.Master && n.CPU >= total {
			t.Fatalf("master %s alone has %v of CPU, the probe's total %v", n.Addr, n.CPU, total)
		}
	}
}
