package main

// The cluster scenarios: a real Redis Cluster of six redis-servers (three
// masters, one replica each) made by redis-cli --cluster create, a
// kairos-server whose pool and admin Redis are that cluster
// (Cluster = true), and three disruptions: slot moves of the busy queues'
// slots (and more) between masters while jobs flow, SIGKILLs of the
// master serving a busy queue (its replica takes over; the killed node
// comes back as a replica), and SIGKILLs of the kairos-server.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine/rdb"
)

// clusterNodeTimeout is the cluster-node-timeout of the chaos cluster: how
// long a master may be unreachable before its replica takes over. 2 s, as
// the sentinels' down-after: less and a loaded 2-core machine makes the
// cluster fail over on its own.
const clusterNodeTimeout = 2 * time.Second

// Cluster disruption kinds.
const (
	evReshard    = "reshard"
	evMasterKill = "master-kill"
)

// clusterStats are what the cluster disruptions measured.
type clusterStats struct {
	// failovers are the times from a master's SIGKILL until every live
	// node saw its slots served by its former replica, cluster_state:ok.
	failovers []time.Duration
	// rejoins are the times from the restart of a killed master until it
	// was a replica in sync and every slot had a replica again.
	rejoins []time.Duration
	// slotsMoved counts slots moved by reshards (targeted and
	// redis-cli's); keysMoved the keys MIGRATEd by the targeted moves.
	slotsMoved, keysMoved int
	// reshardTimes are the durations of the targeted slot moves (from
	// MIGRATING to the slot's new owner set everywhere).
	reshardTimes []time.Duration
}

// clusterPorts picks n ports of 127.0.0.1 that were free a moment ago,
// each with its cluster bus port (port + 10000) free too, never one of
// avoid.
func clusterPorts(n int, avoid map[int]bool) ([]int, error) {
	var ports []int
	var hold []net.Listener
	defer func() {
		for _, l := range hold {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, errors.New("no free port pairs (port, port+10000) on 127.0.0.1")
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
		if !claimPorts(avoid, p, p+10000) {
			continue
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// startCluster starts six cluster nodes, joins them with redis-cli
// --cluster create --cluster-replicas 1 and waits until every node says
// cluster_state:ok, every slot has a master and a replica, and the nodes
// agree. It returns the seed list (every node).
func (s *setup) startCluster(ctx context.Context, rc runConfig, sc scenario) (string, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli not found (scripts/install-redis.sh installs it): %w", err)
	}
	s.redisCli = cli
	ports, err := clusterPorts(6, s.ports)
	if err != nil {
		return "", err
	}
	errs := make(chan error, len(ports))
	for i, port := range ports {
		node, err := s.sup.newRedis("redis-"+string(rune('a'+i)), rc.RedisBin, port,
			redisConf{fsync: sc.Fsync, clusterTimeout: clusterNodeTimeout})
		if err != nil {
			return "", err
		}
		s.data = append(s.data, node)
		go func() { errs <- node.up(ctx) }()
	}
	var all []error
	for range ports {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return "", err
	}
	var addrs []string
	for _, n := range s.data {
		addrs = append(addrs, n.addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	s.nodeIDs = map[*redisNode]string{}
	for _, n := range s.data {
		id, err := n.client.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return "", fmt.Errorf("%s: CLUSTER MYID: %w", n.name, err)
		}
		s.nodeIDs[n] = id
	}
	if err := s.waitCluster(ctx, 60*time.Second, true); err != nil {
		return "", fmt.Errorf("cluster did not form: %w (redis-cli said: %s)", err, out)
	}
	return strings.Join(addrs, ","), nil
}

// nodeByAddr returns the data node listening on addr (host:port).
func (s *setup) nodeByAddr(addr string) *redisNode {
	for _, n := range s.data {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

// slotMap is a node's view of the cluster: for each slot, its master and
// how many nodes (master and replicas) serve it.
type slotMap struct {
	master [16384]*redisNode
	nodes  [16384]int
}

// slotsOf reads CLUSTER SLOTS of node n.
func (s *setup) slotsOf(ctx context.Context, n *redisNode) (*slotMap, error) {
	//lint:ignore SA1019 CLUSTER SHARDS is Redis 7; this reads what go-redis reads.
	slots, err := n.client.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	m := &slotMap{}
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		master := s.nodeByAddr(r.Nodes[0].Addr)
		if master == nil {
			return nil, fmt.Errorf("slots %d-%d: unknown master %s", r.Start, r.End, r.Nodes[0].Addr)
		}
		for slot := r.Start; slot <= r.End; slot++ {
			m.master[slot] = master
			m.nodes[slot] = len(r.Nodes)
		}
	}
	return m, nil
}

// clusterView checks every live node's view: cluster_state:ok, every slot
// served by a live master (and a replica, with replicas), no slot
// migrating or importing, and every node naming the same master for each
// slot. It returns the agreed view.
func (s *setup) clusterView(ctx context.Context, replicas bool) (*slotMap, error) {
	var agreed *slotMap
	for _, n := range s.data {
		if !n.alive() {
			continue
		}
		info, err := n.client.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.name, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return nil, fmt.Errorf("%s: cluster_state is not ok", n.name)
		}
		nodes, err := n.client.ClusterNodes(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.name, err)
		}
		if strings.Contains(nodes, "->-") || strings.Contains(nodes, "-<-") {
			return nil, fmt.Errorf("%s: a slot is still migrating or importing", n.name)
		}
		m, err := s.slotsOf(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.name, err)
		}
		for slot := range m.master {
			switch master := m.master[slot]; {
			case master == nil:
				return nil, fmt.Errorf("%s: slot %d has no master", n.name, slot)
			case !master.alive():
				return nil, fmt.Errorf("%s: slot %d is still served by the killed %s", n.name, slot, master.name)
			case replicas && m.nodes[slot] < 2:
				return nil, fmt.Errorf("%s: slot %d has no replica", n.name, slot)
			case agreed != nil && agreed.master[slot] != master:
				return nil, fmt.Errorf("nodes disagree: slot %d is served by %s or %s", slot, agreed.master[slot].name, master.name)
			}
		}
		if agreed == nil {
			agreed = m
		}
	}
	if agreed == nil {
		return nil, errors.New("every node is down")
	}
	return agreed, nil
}

// waitCluster waits until clusterView is happy.
func (s *setup) waitCluster(ctx context.Context, limit time.Duration, replicas bool) error {
	var last error
	err := waitFor(ctx, limit, 50*time.Millisecond, func() error {
		_, last = s.clusterView(ctx, replicas)
		return last
	})
	if err != nil {
		return fmt.Errorf("cluster not healthy: %w", err)
	}
	return nil
}

// queueSlot is the hash slot of queue q of the chaos namespace (all its
// keys, its group's timer index and registry share it).
func (s *setup) queueSlot(ctx context.Context, q string) (int, error) {
	for _, n := range s.data {
		if n.alive() {
			slot, err := n.client.ClusterKeySlot(ctx, rdb.ReadyKey(chaosNamespace, q)).Result()
			return int(slot), err
		}
	}
	return 0, errors.New("every node is down")
}

// masters returns the live masters of view m, in the order of s.data.
func (s *setup) masters(m *slotMap) []*redisNode {
	var out []*redisNode
	for _, n := range s.data {
		if slices.Contains(m.master[:], n) {
			out = append(out, n)
		}
	}
	return out
}

// reshard moves the slot of the nth busy queue (in turn) to another
// master, key by key while jobs flow (the MIGRATE protocol redis-cli
// follows), then has redis-cli --cluster reshard move 200 more slots from
// one master to another, and waits until the cluster agrees again.
func (s *setup) reshard(ctx context.Context, nth int) error {
	m, err := s.clusterView(ctx, true)
	if err != nil {
		return err
	}
	q := s.queues[nth%len(s.queues)]
	slot, err := s.queueSlot(ctx, q)
	if err != nil {
		return fmt.Errorf("slot of %s: %w", q, err)
	}
	masters := s.masters(m)
	src := m.master[slot]
	var others []*redisNode
	for _, n := range masters {
		if n != src {
			others = append(others, n)
		}
	}
	dst := others[rand.IntN(len(others))]
	start := time.Now()
	keys, err := s.moveSlot(ctx, slot, src, dst, masters)
	if err != nil {
		return fmt.Errorf("move slot %d (queue %s) from %s to %s: %w", slot, q, src.name, dst.name, err)
	}
	s.cstats.reshardTimes = append(s.cstats.reshardTimes, time.Since(start))
	s.cstats.slotsMoved++
	s.cstats.keysMoved += keys
	s.log.Debugf("reshard #%d: slot %d of %s (%d keys) moved from %s to %s in %v", nth+1, slot, q, keys,
		src.name, dst.name, time.Since(start).Round(time.Millisecond))
	if err := s.waitCluster(ctx, 30*time.Second, true); err != nil {
		return err
	}
	// And more: redis-cli's reshard of 200 slots between two masters, the
	// operator's tool (it picks the slots itself; the busy queues' slots
	// are among them now and then).
	from := masters[rand.IntN(len(masters))]
	to := masters[(slices.Index(masters, from)+1+rand.IntN(len(masters)-1))%len(masters)]
	const more = 200
	err = waitFor(ctx, 30*time.Second, 200*time.Millisecond, func() error {
		out, err := exec.CommandContext(ctx, s.redisCli, "--cluster", "reshard", to.addr,
			"--cluster-from", s.nodeIDs[from], "--cluster-to", s.nodeIDs[to],
			"--cluster-slots", strconv.Itoa(more), "--cluster-yes").CombinedOutput()
		if err != nil {
			// It refuses while the nodes do not agree yet: try again.
			return fmt.Errorf("redis-cli --cluster reshard: %w: %s", err, lastLines(string(out), 5))
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.cstats.slotsMoved += more
	return s.waitCluster(ctx, 30*time.Second, true)
}

// moveSlot moves slot from src to dst as redis-cli --cluster reshard
// does: dst IMPORTING, src MIGRATING, MIGRATE the keys in batches of 10,
// then the new owner on dst, src and every other master. Between batches
// it pauses 5 ms, so that the window in which the slot's keys are split
// between the two nodes (TRYAGAIN, ASK) lasts as it would for a slot with
// many more keys. It returns the number of keys moved.
func (s *setup) moveSlot(ctx context.Context, slot int, src, dst *redisNode, masters []*redisNode) (int, error) {
	srcID, dstID := s.nodeIDs[src], s.nodeIDs[dst]
	if err := dst.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return 0, fmt.Errorf("%s: SETSLOT IMPORTING: %w", dst.name, err)
	}
	if err := src.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return 0, fmt.Errorf("%s: SETSLOT MIGRATING: %w", src.name, err)
	}
	moved := 0
	for {
		keys, err := src.client.ClusterGetKeysInSlot(ctx, slot, 10).Result()
		if err != nil {
			return moved, fmt.Errorf("%s: GETKEYSINSLOT: %w", src.name, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.client.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return moved, fmt.Errorf("%s: MIGRATE: %w", src.name, err)
		}
		moved += len(keys)
		sleepCtx(ctx, 5*time.Millisecond)
	}
	// The new owner: on dst first (it stops answering ASK-only), then src
	// (it redirects with MOVED), then the others (they learn it by gossip
	// too; this makes it immediate).
	order := []*redisNode{dst, src}
	for _, n := range masters {
		if n != src && n != dst {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return moved, fmt.Errorf("%s: SETSLOT NODE: %w", n.name, err)
		}
	}
	return moved, nil
}

// masterKill SIGKILLs the master of the nth busy queue's slot (in turn),
// measures the time until its replica serves its slots (every live node
// agreeing, cluster_state:ok), restarts it (it rejoins as a replica of the
// new master, from its nodes.conf) and waits until every slot has a
// replica again.
func (s *setup) masterKill(ctx context.Context, nth int) error {
	m, err := s.clusterView(ctx, true)
	if err != nil {
		return err
	}
	q := s.queues[nth%len(s.queues)]
	slot, err := s.queueSlot(ctx, q)
	if err != nil {
		return fmt.Errorf("slot of %s: %w", q, err)
	}
	victim := m.master[slot]
	start := time.Now()
	victim.kill()
	err = s.waitCluster(ctx, 60*time.Second, false)
	failover := time.Since(start)
	if err == nil {
		s.cstats.failovers = append(s.cstats.failovers, failover)
		s.log.Debugf("master-kill #%d: %s (slot %d of %s) killed; replica took over in %v", nth+1, victim.name, slot, q,
			failover.Round(time.Millisecond))
	}
	// Bring the killed node back whatever happened.
	sleepCtx(ctx, rand.N(500*time.Millisecond))
	upStart := time.Now()
	if uerr := victim.up(ctx); uerr != nil {
		return errors.Join(err, uerr)
	}
	if err != nil {
		return fmt.Errorf("failover after killing %s: %w", victim.name, err)
	}
	if err := s.waitCluster(ctx, 60*time.Second, true); err != nil {
		return fmt.Errorf("%s back as a replica: %w; its log:\n%s", victim.name, err, victim.logTail(15))
	}
	// In sync, not only listed: the next kill may be of its new master.
	err = waitFor(ctx, 60*time.Second, 50*time.Millisecond, func() error {
		info, err := victim.client.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if infoField(info, "role") != "slave" || infoField(info, "master_link_status") != "up" ||
			infoField(info, "master_sync_in_progress") != "0" {
			return fmt.Errorf("%s: role %s, link %s, sync in progress %s", victim.name, infoField(info, "role"),
				infoField(info, "master_link_status"), infoField(info, "master_sync_in_progress"))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s back as a replica: %w", victim.name, err)
	}
	s.cstats.rejoins = append(s.cstats.rejoins, time.Since(upStart))
	return nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// msList is durations in whole milliseconds.
func msList(ds []time.Duration) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.Milliseconds())
	}
	return out
}
