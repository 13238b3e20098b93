package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProbe reads the INFO of the Redis under a server for the benchmark:
// the CPU time its main thread has spent, and whether a fork of it (a
// snapshot or an AOF rewrite) is running. On a Redis Cluster (a seed whose
// INFO cluster says cluster_enabled:1) it finds the nodes with CLUSTER
// NODES at each reading and reads every node: the CPU of each master and
// of the replicas, and a fork on any node.
type RedisProbe struct {
	seeds []string
	opt   redis.Options // a template: Addr is set per node

	mu      sync.Mutex
	clients map[string]*redis.Client
	cluster int8 // 0 not known yet, 1 a cluster, -1 a standalone Redis
}

// RedisNode is one Redis server of the probe's Redis: the only one of a
// standalone Redis, or a node of a cluster.
type RedisNode struct {
	Addr   string
	Master bool
	// Slots is how many of the 16384 hash slots a cluster master serves
	// (0 for a replica and a standalone Redis).
	Slots int
}

// NodeCPU is one node's cumulative CPU time (INFO cpu: used_cpu_sys +
// used_cpu_user).
type NodeCPU struct {
	RedisNode
	CPU time.Duration
}

// NewRedisProbe connects a probe to addr: HOST:PORT, a redis:// URL, or
// several HOST:PORT seeds of a cluster separated by commas. Whether it is
// a cluster is found at the first reading.
func NewRedisProbe(addr string) (*RedisProbe, error) {
	p := &RedisProbe{clients: make(map[string]*redis.Client)}
	if strings.Contains(addr, "://") {
		opt, err := redis.ParseURL(addr)
		if err != nil {
			return nil, fmt.Errorf("bench: redis address: %w", err)
		}
		p.opt = *opt
		p.seeds = []string{opt.Addr}
	} else {
		for _, a := range strings.Split(addr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return nil, fmt.Errorf("bench: redis address %q: %w", a, err)
				}
				p.seeds = append(p.seeds, a)
			}
		}
		if len(p.seeds) == 0 {
			return nil, errors.New("bench: no redis address")
		}
	}
	p.opt.PoolSize = 1
	return p, nil
}

// Close closes the probe's connections.
func (p *RedisProbe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for a, c := range p.clients {
		errs = append(errs, c.Close())
		delete(p.clients, a)
	}
	return errors.Join(errs...)
}

// client returns the probe's connection to addr.
func (p *RedisProbe) client(addr string) *redis.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[addr]
	if c == nil {
		opt := p.opt
		opt.Addr = addr
		c = redis.NewClient(&opt)
		p.clients[addr] = c
	}
	return c
}

// Nodes returns the nodes the probe reads: the standalone Redis, or every
// cluster node that is not failing, masters first, each in address order.
func (p *RedisProbe) Nodes(ctx context.Context) ([]RedisNode, error) {
	var errs []error
	for _, seed := range p.seeds {
		nodes, err := p.nodesVia(ctx, seed)
		if err == nil {
			return nodes, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (p *RedisProbe) nodesVia(ctx context.Context, seed string) ([]RedisNode, error) {
	c := p.client(seed)
	p.mu.Lock()
	known := p.cluster
	p.mu.Unlock()
	if known == 0 {
		info, err := c.Info(ctx, "cluster").Result()
		if err != nil {
			return nil, fmt.Errorf("bench: redis INFO cluster on %s: %w", seed, err)
		}
		known = -1
		if infoField(info, "cluster_enabled") == "1" {
			known = 1
		}
		p.mu.Lock()
		p.cluster = known
		p.mu.Unlock()
	}
	if known < 0 {
		return []RedisNode{{Addr: seed, Master: true}}, nil
	}
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("bench: redis CLUSTER NODES on %s: %w", seed, err)
	}
	host, _, _ := net.SplitHostPort(seed)
	nodes, err := parseClusterNodes(text, host)
	if err != nil {
		return nil, fmt.Errorf("bench: CLUSTER NODES on %s: %w", seed, err)
	}
	return nodes, nil
}

// parseClusterNodes reads a CLUSTER NODES reply: the nodes that are
// connected and not failing, masters first, each in address order.
// seedHost stands in for an empty host (a node that does not know its own
// address lists itself as ":PORT@BUSPORT").
func parseClusterNodes(text, seedHost string) ([]RedisNode, error) {
	var nodes []RedisNode
	seen := make(map[string]bool)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
		// <pong-recv> <config-epoch> <link-state> <slot>...
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("malformed address in %q: %w", line, err)
		}
		if host == "" {
			host = seedHost
		}
		flags := strings.Split(f[2], ",")
		skip, master := port == "0", false
		for _, fl := range flags {
			switch fl {
			case "master":
				master = true
			case "fail", "fail?", "handshake", "noaddr":
				skip = true
			}
		}
		if skip || f[7] != "connected" && !hasFlag(flags, "myself") {
			continue
		}
		n := RedisNode{Addr: net.JoinHostPort(host, port), Master: master}
		if seen[n.Addr] {
			continue
		}
		seen[n.Addr] = true
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("malformed slot %q in %q", s, line)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil || b < a {
					return nil, fmt.Errorf("malformed slot range %q in %q", s, line)
				}
			}
			n.Slots += b - a + 1
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, errors.New("no connected node")
	}
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].Master != nodes[j].Master {
			return nodes[i].Master
		}
		return nodes[i].Addr < nodes[j].Addr
	})
	return nodes, nil
}

func hasFlag(flags []string, want string) bool {
	for _, f := range flags {
		if f == want {
			return true
		}
	}
	return false
}

// infoField returns the value of key in an INFO reply ("" when absent).
func infoField(info, key string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// NodesCPU reads every node's CPU time, all at once.
func (p *RedisProbe) NodesCPU(ctx context.Context) ([]NodeCPU, error) {
	nodes, err := p.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]NodeCPU, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		out[i].RedisNode = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := p.client(n.Addr).Info(ctx, "cpu").Result()
			if err != nil {
				errs[i] = fmt.Errorf("bench: redis INFO cpu on %s: %w", n.Addr, err)
				return
			}
			out[i].CPU, errs[i] = parseRedisCPU(info)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// CPU is a CPUMeter: used_cpu_sys + used_cpu_user of INFO cpu of the
// Redis, or the sum over a cluster's masters.
func (p *RedisProbe) CPU(ctx context.Context) (time.Duration, error) {
	nodes, err := p.NodesCPU(ctx)
	if err != nil {
		return 0, err
	}
	return mastersCPU(nodes), nil
}

func mastersCPU(nodes []NodeCPU) time.Duration {
	var d time.Duration
	for _, n := range nodes {
		if n.Master {
			d += n.CPU
		}
	}
	return d
}

// quietFor is how long Quiet wants Redis without a fork before it returns:
// more than a serverCron period (100 ms at the default hz 10), in which
// Redis starts an AOF rewrite that the writes before have made due.
const quietFor = 250 * time.Millisecond

// Quiet waits until no node of the Redis runs a snapshot or AOF rewrite,
// and none has run one for quietFor, and returns how long it waited for
// them to end (0 when there was none). A fork's child competes with the
// server, Redis and the load generator for the machine's cores, and its
// copy-on-write faults slow Redis itself; a measured phase that starts
// inside a rewrite that its set-up (a preload, a fill) set off measures the
// rewrite. On a cluster every node counts, replicas included: on one
// machine their forks take the same cores.
func (p *RedisProbe) Quiet(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var busy time.Duration
	var quietSince time.Time
	for {
		forking, err := p.forking(ctx)
		if err != nil {
			return busy, err
		}
		now := time.Now()
		switch {
		case forking:
			quietSince = time.Time{}
			busy = now.Sub(start)
		case quietSince.IsZero():
			quietSince = now
		case now.Sub(quietSince) >= quietFor:
			return busy, nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return busy, ctx.Err()
		case <-t.C:
		}
	}
}

// forking reports whether any node runs a fork.
func (p *RedisProbe) forking(ctx context.Context) (bool, error) {
	nodes, err := p.Nodes(ctx)
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		info, err := p.client(n.Addr).Info(ctx, "persistence").Result()
		if err != nil {
			return false, fmt.Errorf("bench: redis INFO persistence on %s: %w", n.Addr, err)
		}
		if redisForking(info) {
			return true, nil
		}
	}
	return false, nil
}

// redisForking reports whether an INFO persistence reply shows a snapshot,
// an AOF rewrite (running or scheduled) or a module's fork in progress.
func redisForking(info string) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || v == "0" {
			continue
		}
		switch k {
		case "rdb_bgsave_in_progress", "aof_rewrite_in_progress", "aof_rewrite_scheduled", "module_fork_in_progress":
			return true
		}
	}
	return false
}

// parseRedisCPU returns used_cpu_sys + used_cpu_user of an INFO reply.
func parseRedisCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: redis INFO %s: %w", k, err)
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, errors.New("bench: redis INFO cpu lacks used_cpu_sys or used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}
