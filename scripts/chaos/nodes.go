package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// masterName is the Sentinel master set of the failover setup.
const masterName = "chaosmaster"

// fsyncOff in a scenario's Fsync turns AOF off (the negative control).
const fsyncOff = "off"

// redisNode is one redis-server (or sentinel) with its config file and
// data directory, restartable on the same port.
type redisNode struct {
	*proc
	port     int
	addr     string
	dir      string
	sentinel bool
	client   *redis.Client
}

// redisConf is what a data node's config file says.
type redisConf struct {
	fsync     string // appendfsync: "always" or "everysec", or fsyncOff
	replicaOf int    // port of the master, 0 for a master
	// cluster makes the node a Redis Cluster node with this
	// cluster-node-timeout (0: not a cluster node).
	clusterTimeout time.Duration
	// maxmemory, when set ("128mb"), caps the node's memory; with the
	// noeviction policy every node has, writes are then refused with OOM
	// (the noisy-neighbour scenario's full pool).
	maxmemory string
}

func (s *supervisor) newRedis(name, bin string, port int, rc redisConf) (*redisNode, error) {
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"protected-mode no",
		`save ""`,
		"maxmemory-policy noeviction",
		"loglevel notice",
		"logfile " + filepath.Join(dir, "redis.log"),
	}
	if rc.fsync == fsyncOff {
		lines = append(lines, "appendonly no")
	} else {
		lines = append(lines, "appendonly yes", "appendfsync "+rc.fsync)
	}
	if rc.maxmemory != "" {
		lines = append(lines, "maxmemory "+rc.maxmemory)
	}
	if rc.replicaOf != 0 {
		lines = append(lines, fmt.Sprintf("replicaof 127.0.0.1 %d", rc.replicaOf))
	}
	if rc.clusterTimeout > 0 {
		lines = append(lines,
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			fmt.Sprintf("cluster-node-timeout %d", rc.clusterTimeout.Milliseconds()),
			// A replica is listed in CLUSTER SLOTS once its offset is not 0,
			// and a master waits 5 s before a diskless sync by default: both
			// would slow the return of a killed master as a replica.
			"repl-diskless-sync-delay 0",
			"repl-ping-replica-period 1",
		)
	}
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return s.redisNode(name, bin, port, dir, conf, false), nil
}

func (s *supervisor) newSentinel(name, bin string, port, masterPort int) (*redisNode, error) {
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"protected-mode no",
		"logfile " + filepath.Join(dir, "sentinel.log"),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", masterName, masterPort),
		// 2 s, not less: a loaded 2-core machine delays answers by a
		// second now and then, and the sentinels would fail over on their own.
		fmt.Sprintf("sentinel down-after-milliseconds %s 2000", masterName),
		fmt.Sprintf("sentinel failover-timeout %s 4000", masterName),
		fmt.Sprintf("sentinel parallel-syncs %s 1", masterName),
	}
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return s.redisNode(name, bin, port, dir, conf, true), nil
}

func (s *supervisor) redisNode(name, bin string, port int, dir, conf string, sentinel bool) *redisNode {
	args := []string{conf}
	if sentinel {
		args = append(args, "--sentinel")
	}
	n := &redisNode{
		proc: s.newProc(name, bin, args...),
		port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, sentinel: sentinel,
	}
	n.proc.logPath = filepath.Join(dir, "stdout.log")
	// Never retry, never wait long: the chaos driver wants to see failures.
	n.client = redis.NewClient(&redis.Options{
		Addr: n.addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, PoolSize: 2,
	})
	return n
}

// up starts the node and waits until it answers PING (not LOADING).
func (n *redisNode) up(ctx context.Context) error {
	if err := n.start(); err != nil {
		return err
	}
	exited := n.exited()
	err := waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s %w", n.name, errExited)
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return n.client.Ping(pctx).Err()
	})
	if err != nil {
		return fmt.Errorf("%s on %s: %w; log:\n%s", n.name, n.addr, err, n.logTail(10))
	}
	return nil
}

// restart SIGKILLs the node, waits down, and brings it up again.
func (n *redisNode) restart(ctx context.Context, down time.Duration) error {
	n.kill()
	sleepCtx(ctx, down)
	return n.up(ctx)
}

// logTail prefers Redis's own log file.
func (n *redisNode) logTail(lines int) string {
	name := "redis.log"
	if n.sentinel {
		name = "sentinel.log"
	}
	return fileTail(filepath.Join(n.dir, name), lines)
}

// info returns one field of INFO section.
func (n *redisNode) info(ctx context.Context, section, field string) (string, error) {
	s, err := n.client.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	return infoField(s, field), nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// kairosNode is one kairos-server process on fixed ports.
type kairosNode struct {
	*proc
	api   string // http://127.0.0.1:port
	admin string
	hc    *http.Client
}

// kairosRedis says where a Kairos server finds its Redis: one address, or
// a Sentinel list with a master name.
type kairosRedis struct {
	addr       string
	masterName string
	// adminAddr, when set, holds the tokens instead of addr.
	adminAddr string
	// waitReplicas is the pool's WaitReplicas (0: off).
	waitReplicas int
	// cluster: addr is a comma-separated list of the seed nodes of a
	// Redis Cluster (Cluster = true, for the pool and the admin Redis).
	cluster bool
}

func (s *supervisor) newKairos(name, bin string, avoid map[int]bool, rr kairosRedis) (*kairosNode, error) {
	port, err := freePort(avoid)
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort(avoid)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	redisKeys := fmt.Sprintf("Addr = %q\n", rr.addr)
	if rr.cluster {
		redisKeys = fmt.Sprintf("Cluster = true\nAddrs = [\"%s\"]\n", strings.Join(strings.Split(rr.addr, ","), `", "`))
	}
	if rr.masterName != "" {
		redisKeys += fmt.Sprintf("MasterName = %q\n", rr.masterName)
	}
	adminKeys := redisKeys
	if rr.waitReplicas > 0 {
		redisKeys += fmt.Sprintf("WaitReplicas = %d\nWaitTimeoutMs = 100\n", rr.waitReplicas)
	}
	if rr.adminAddr != "" {
		adminKeys = fmt.Sprintf("Addr = %q\n", rr.adminAddr)
	}
	cfg := fmt.Sprintf(`# written by scripts/chaos
Host = "127.0.0.1"
Port = %d
AdminHost = "127.0.0.1"
AdminPort = %d
LogLevel = "warn"

[AdminRedis]
%s
[Pool.default]
%s
[Kairos]
ShutdownTimeoutSecond = 2
`, port, adminPort, adminKeys, redisKeys)
	conf := filepath.Join(dir, "kairos.toml")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	p := s.newProc(name, bin, "-c", conf)
	p.logPath = filepath.Join(dir, "server.log")
	return &kairosNode{
		proc:  p,
		api:   fmt.Sprintf("http://127.0.0.1:%d", port),
		admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		hc:    &http.Client{Timeout: time.Second},
	}, nil
}

// up starts the server and waits until its public API answers.
func (k *kairosNode) up(ctx context.Context) error {
	if err := k.start(); err != nil {
		return err
	}
	exited := k.exited()
	err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s %w", k.name, errExited)
		default:
		}
		return k.ready(ctx)
	})
	if err != nil {
		return fmt.Errorf("%s: %w; log:\n%s", k.name, err, k.logTail(20))
	}
	return nil
}

// ready reports whether the public API serves a request that reaches Redis.
func (k *kairosNode) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.api+"/api/chaosready/q/size", nil)
	if err != nil {
		return err
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("size: status %d", resp.StatusCode)
	}
	return nil
}

// token creates a token for namespace ns through the admin API.
func (k *kairosNode) token(ctx context.Context, ns string) (string, error) {
	var tok string
	err := waitFor(ctx, 20*time.Second, 100*time.Millisecond, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.admin+"/token/"+ns+"?description=chaos", nil)
		if err != nil {
			return err
		}
		resp, err := k.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("create token: status %d: %s", resp.StatusCode, body)
		}
		var t struct{ Token string }
		if err := json.Unmarshal(body, &t); err != nil || t.Token == "" {
			return fmt.Errorf("create token: %q: %v", body, err)
		}
		tok = t.Token
		return nil
	})
	return tok, err
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// stop and cont pause and resume a node (SIGSTOP/SIGCONT): a hung Redis.
func (n *redisNode) stop() error { return n.signal(syscall.SIGSTOP) }
func (n *redisNode) cont() error { return n.signal(syscall.SIGCONT) }
