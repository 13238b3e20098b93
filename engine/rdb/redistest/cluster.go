package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions tune a test cluster.
type ClusterOptions struct {
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before its replica takes over. 0 means 3s, short enough
	// for failover tests and long enough for two busy cores.
	NodeTimeout time.Duration
	// AppendOnly turns AOF on (appendfsync everysec) on every node.
	AppendOnly bool
	// Extra config lines for every node.
	Extra []string
}

// Cluster is a throwaway Redis Cluster of six redis-servers on loopback
// ports: three masters, each with one replica, every slot served.
type Cluster struct {
	// Addrs are the six nodes' host:port, the seed list of a client.
	Addrs []string
	nodes map[string]*Server
	dirs  []string // removed by Close when the harness made them
	bin   string
}

// Shard is one master of the cluster, its replicas and its slot ranges.
type Shard struct {
	Master   string
	Replicas []string
	Slots    [][2]int // inclusive ranges
}

// ClusterBinaries returns the redis-server and redis-cli paths, skipping or
// failing tb (with REQUIRE_REDIS or CI) when either is missing.
func ClusterBinaries(tb testing.TB) (server, cli string) {
	tb.Helper()
	server = Binary(tb)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if Required() {
			tb.Fatalf("redis-cli not found and REQUIRE_REDIS/CI is set: run scripts/install-redis.sh")
		}
		tb.Skip("redis-cli not found; run scripts/install-redis.sh (set REQUIRE_REDIS=1 to fail instead)")
	}
	return server, cli
}

// StartCluster starts a cluster for tb alone, stopped at its cleanup. Use
// it for tests that kill nodes; others share one with SharedCluster.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, ClusterOptions{})
}

// StartClusterWith starts a cluster for tb with opts.
func StartClusterWith(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	srv, cli := ClusterBinaries(tb)
	dirs := make([]string, 6)
	for i := range dirs {
		dirs[i] = tb.TempDir()
	}
	c, err := startCluster(srv, cli, dirs, opts)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

func startCluster(bin, cli string, dirs []string, opts ClusterOptions) (_ *Cluster, err error) {
	timeout := opts.NodeTimeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	c := &Cluster{nodes: make(map[string]*Server), bin: bin}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ports, err := clusterPorts(len(dirs))
	if err != nil {
		return nil, err
	}
	// Start the six servers at once: each waits only for its own PING.
	errs := make([]error, len(dirs))
	servers := make([]*Server, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		o := Options{Port: ports[i], Dir: dir, AppendOnly: opts.AppendOnly, Extra: append([]string{
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			// A master waits 5s by default before a diskless full sync, in
			// case more replicas come: the replicas would be in CLUSTER
			// SLOTS only that much later.
			"repl-diskless-sync-delay 0",
			// CLUSTER SLOTS lists a replica only once its replication
			// offset is not 0, which on an empty master takes the first
			// PING of the master to its replicas (10s by default).
			"repl-ping-replica-period 1",
			fmt.Sprintf("cluster-node-timeout %d", timeout.Milliseconds()),
		}, opts.Extra...)}
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", o.Port), Port: o.Port, Dir: dir, opts: o}
		servers[i] = s
		c.Addrs = append(c.Addrs, s.Addr)
		c.nodes[s.Addr] = s
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.start(bin, false) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.wait(ctx); err != nil {
		return nil, fmt.Errorf("cluster on %s: %w (redis-cli said: %s)", strings.Join(c.Addrs, ","), err, out)
	}
	return c, nil
}

// clusterPorts picks n client ports that were free a moment ago, each with
// its cluster bus port (port + 10000, as on Redis 6.2) free too.
func clusterPorts(n int) ([]int, error) {
	var ports []int
	var hold []net.Listener
	defer func() {
		for _, l := range hold {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no free port pairs (port, port+10000) on 127.0.0.1")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hold = append(hold, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000))
		if err != nil {
			continue
		}
		hold = append(hold, bus)
		ports = append(ports, p)
	}
	return ports, nil
}

// Wait waits until every running node says cluster_state:ok and sees
// every slot served, and, when no node is killed, every master with a
// replica: after a Kill, until a replica has taken over; after a Restart,
// until the node is back (at most 30s).
func (c *Cluster) Wait(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.wait(ctx); err != nil {
		tb.Fatalf("redistest: cluster: %v", err)
	}
}

func (c *Cluster) wait(ctx context.Context) error {
	var last error
	for {
		last = c.healthy(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy in time: %w", last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// healthy checks every running node's view of the cluster.
func (c *Cluster) healthy(ctx context.Context) error {
	whole := true
	for _, s := range c.nodes {
		whole = whole && s.cmd != nil
	}
	for _, addr := range c.Addrs {
		s := c.nodes[addr]
		if s.cmd == nil {
			continue // killed
		}
		n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		err := c.nodeHealthy(ctx, n, whole)
		_ = n.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
	}
	return nil
}

func (c *Cluster) nodeHealthy(ctx context.Context, n *redis.Client, replicas bool) error {
	info, err := n.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster_state is not ok")
	}
	//lint:ignore SA1019 CLUSTER SHARDS is Redis 7; Kairos supports 6.2.
	slots, err := n.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	covered := 0
	for _, s := range slots {
		if m := c.nodes[s.Nodes[0].Addr]; m != nil && m.cmd == nil {
			return fmt.Errorf("slots %d-%d are still served by the killed %s", s.Start, s.End, m.Addr)
		}
		if replicas && len(s.Nodes) < 2 {
			return fmt.Errorf("slots %d-%d have no replica", s.Start, s.End)
		}
		covered += s.End - s.Start + 1
	}
	if covered != 16384 {
		return fmt.Errorf("%d of 16384 slots served", covered)
	}
	return nil
}

// Shards returns the masters as the cluster reports them (CLUSTER SLOTS on
// the first running node), sorted by their first slot.
func (c *Cluster) Shards(tb testing.TB) []Shard {
	tb.Helper()
	for _, addr := range c.Addrs {
		if c.nodes[addr].cmd == nil {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: addr})
		//lint:ignore SA1019 CLUSTER SHARDS is Redis 7; Kairos supports 6.2.
		slots, err := n.ClusterSlots(context.Background()).Result()
		_ = n.Close()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER SLOTS on %s: %v", addr, err)
		}
		byMaster := make(map[string]*Shard)
		var shards []*Shard
		for _, s := range slots {
			if len(s.Nodes) == 0 {
				continue
			}
			sh := byMaster[s.Nodes[0].Addr]
			if sh == nil {
				sh = &Shard{Master: s.Nodes[0].Addr}
				for _, r := range s.Nodes[1:] {
					sh.Replicas = append(sh.Replicas, r.Addr)
				}
				byMaster[sh.Master] = sh
				shards = append(shards, sh)
			}
			sh.Slots = append(sh.Slots, [2]int{int(s.Start), int(s.End)})
		}
		out := make([]Shard, len(shards))
		for i, sh := range shards {
			sort.Slice(sh.Slots, func(a, b int) bool { return sh.Slots[a][0] < sh.Slots[b][0] })
			out[i] = *sh
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Slots[0][0] < out[b].Slots[0][0] })
		return out
	}
	tb.Fatalf("redistest: every cluster node is down")
	return nil
}

// Masters returns the masters' addresses, in slot order.
func (c *Cluster) Masters(tb testing.TB) []string {
	tb.Helper()
	var out []string
	for _, sh := range c.Shards(tb) {
		out = append(out, sh.Master)
	}
	return out
}

// MasterOf returns the address of the master serving key's slot.
func (c *Cluster) MasterOf(tb testing.TB, key string) string {
	tb.Helper()
	slot := int(crc16([]byte(hashTag(key))) % 16384)
	for _, sh := range c.Shards(tb) {
		for _, r := range sh.Slots {
			if slot >= r[0] && slot <= r[1] {
				return sh.Master
			}
		}
	}
	tb.Fatalf("redistest: no master serves slot %d of %q", slot, key)
	return ""
}

// hashTag returns the part of key that Redis Cluster hashes: the text
// between the first { and the next } when it is not empty, else key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is Redis Cluster's CRC16 (XMODEM: polynomial 0x1021, initial 0).
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Client returns a cluster client seeded with every node, closed at tb's
// cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Flush empties every master (FLUSHALL), for tests sharing a cluster.
func (c *Cluster) Flush(tb testing.TB) {
	tb.Helper()
	for _, addr := range c.Masters(tb) {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.FlushAll(context.Background()).Err()
		_ = n.Close()
		if err != nil {
			tb.Fatalf("redistest: FLUSHALL on %s: %v", addr, err)
		}
	}
}

// Kill stops the node at addr at once (SIGKILL); its replica takes over
// after NodeTimeout. Do this only on a cluster of your own (StartCluster).
func (c *Cluster) Kill(tb testing.TB, addr string) {
	tb.Helper()
	c.node(tb, addr).Kill()
}

// Restart starts the node at addr again (killing it first if it runs), on
// its port and directory: it rejoins the cluster from its nodes.conf, as a
// replica if it was a master that lost its slots meanwhile. Call Wait to
// wait for the cluster to be whole again.
func (c *Cluster) Restart(tb testing.TB, addr string) {
	tb.Helper()
	s := c.node(tb, addr)
	s.Kill()
	if err := s.start(c.bin, false); err != nil {
		tb.Fatalf("redistest: restart %s: %v", addr, err)
	}
}

func (c *Cluster) node(tb testing.TB, addr string) *Server {
	tb.Helper()
	s := c.nodes[addr]
	if s == nil {
		tb.Fatalf("redistest: %s is not a node of this cluster (%s)", addr, strings.Join(c.Addrs, ","))
	}
	return s
}

// Close kills every node and removes the directories the harness made.
// Safe to call twice.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, s := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); s.Kill() }()
	}
	wg.Wait()
	for _, d := range c.dirs {
		_ = os.RemoveAll(d)
	}
	c.dirs = nil
}

// The cluster SharedCluster hands out, started at its first call in the
// test binary and stopped by Main.
var shared struct {
	sync.Mutex
	main    bool // Main runs the tests
	cluster *Cluster
	err     error
}

// Main runs a package's tests and then stops the cluster SharedCluster
// started, if any. A package whose tests use SharedCluster calls it from
// its TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it returns m.Run's code, for a TestMain
// that has more to clean up after the tests.
func Run(m *testing.M) int {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.cluster != nil {
		shared.cluster.Close()
		shared.cluster = nil
	}
	shared.Unlock()
	return code
}

// SharedCluster returns the test binary's one cluster, starting it at the
// first call: starting six servers costs about a second, so a package's
// tests share one. Tests using it must not kill nodes, and should use keys
// of their own (or Flush). It needs TestMain to call Main, which stops the
// cluster when the tests end. If the start failed, every later call fails
// with the same error.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	srv, cli := ClusterBinaries(tb)
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		tb.Fatalf("redistest: SharedCluster needs the package's TestMain to call redistest.Main(m), which stops the cluster")
	}
	if shared.cluster == nil && shared.err == nil {
		dirs := make([]string, 6)
		for i := range dirs {
			d, err := os.MkdirTemp("", "redistest-cluster-")
			if err != nil {
				shared.err = err
				break
			}
			dirs[i] = d
		}
		if shared.err == nil {
			shared.cluster, shared.err = startCluster(srv, cli, dirs, ClusterOptions{})
		}
		if shared.cluster != nil {
			shared.cluster.dirs = dirs
		} else {
			for _, d := range dirs {
				if d != "" {
					_ = os.RemoveAll(d)
				}
			}
		}
	}
	if shared.err != nil {
		tb.Fatalf("redistest: shared cluster: %v", shared.err)
	}
	return shared.cluster
}
