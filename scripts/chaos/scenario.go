package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// scenario is one chaos run: a fresh Redis setup, one kairos-server, a
// workload, and disruptions spread over Duration.
type scenario struct {
	Name     string
	Sentinel bool // one master, one replica, three sentinels
	// Cluster: a Redis Cluster of three masters with one replica each
	// (cluster.go) holds the pool and the tokens.
	Cluster  bool
	Fsync    string // appendfsync of every redis-server
	Tries    int
	TTR      int // seconds
	Droppers int
	Duration time.Duration
	// Disruption counts.
	ServerKills, RedisKills, Flushes, Pauses, Failovers int
	// Cluster disruptions: slot moves and SIGKILLs of masters.
	Reshards, MasterKills int
	// LossExpected marks scenarios where Redis itself may lose
	// acknowledged writes: lost jobs are reported, not a failure.
	LossExpected bool
	// MustLose marks the negative control (Redis without AOF, killed):
	// finding no loss there means the suite cannot see one.
	MustLose bool
	// WaitReplicas sets the pool's durability option (Redis WAIT after
	// every publish).
	WaitReplicas int
	// OptIn scenarios run only when named, not with "all".
	OptIn bool
}

// disruption kinds.
const (
	evServerKill = "server-kill"
	evRedisKill  = "redis-kill"
	evFlush      = "script-flush"
	evPause      = "client-pause"
	evFailover   = "failover"
)

// runConfig is what every scenario shares.
type runConfig struct {
	ServerBin, RedisBin   string
	Dir                   string // parent of the scenario directories
	Rate                  int
	Publishers, Consumers int
	DrainLimit            time.Duration
	Log                   logrus.FieldLogger
}

// setup is the processes of one scenario.
type setup struct {
	sup       *supervisor
	data      []*redisNode // data[0] is the first master
	sentinels []*redisNode
	others    []*redisNode // the negative control's admin Redis
	kairos    *kairosNode
	ports     map[int]bool
	log       logrus.FieldLogger
	// Failover statistics.
	failoverKinds []string
	// The cluster's: redis-cli, each node's ID, the workload's queues
	// (the busy ones whose slots move and whose masters die) and what the
	// disruptions measured.
	redisCli string
	nodeIDs  map[*redisNode]string
	queues   []string
	cstats   clusterStats
}

// chaosNamespace and chaosQueues are the workload's namespace and queues.
const chaosNamespace = "chaos"

var chaosQueues = []string{"q0", "q1", "q2", "q3"}

func (sc scenario) setupName() string {
	if sc.Cluster {
		s := fmt.Sprintf("cluster 3 masters + 3 replicas, node timeout %v", clusterNodeTimeout)
		if sc.WaitReplicas > 0 {
			s += fmt.Sprintf(", WaitReplicas %d", sc.WaitReplicas)
		}
		return s + ", appendfsync " + sc.Fsync
	}
	if sc.Sentinel {
		return "sentinel 1 master + 1 replica + 3 sentinels, appendfsync " + sc.Fsync
	}
	if sc.Fsync == fsyncOff {
		return "redis appendonly no"
	}
	return "redis appendfsync " + sc.Fsync
}

// start brings up Redis (and sentinels) and one kairos-server.
func (sc scenario) start(ctx context.Context, rc runConfig, dir string) (*setup, error) {
	s := &setup{sup: newSupervisor(dir), ports: map[int]bool{}, log: rc.Log, queues: chaosQueues}
	fail := func(err error) (*setup, error) { s.sup.killAll(); return nil, err }
	if sc.Cluster {
		seeds, err := s.startCluster(ctx, rc, sc)
		if err != nil {
			return fail(err)
		}
		k, err := s.sup.newKairos("kairos", rc.ServerBin, s.ports,
			kairosRedis{addr: seeds, cluster: true, waitReplicas: sc.WaitReplicas})
		if err != nil {
			return fail(err)
		}
		if err := k.up(ctx); err != nil {
			return fail(err)
		}
		s.kairos = k
		return s, nil
	}
	n := 1
	if sc.Sentinel {
		n = 2
	}
	for i := range n {
		port, err := freePort(s.ports)
		if err != nil {
			return fail(err)
		}
		replicaOf := 0
		if i > 0 {
			replicaOf = s.data[0].port
		}
		node, err := s.sup.newRedis("redis-"+string(rune('a'+i)), rc.RedisBin, port, redisConf{fsync: sc.Fsync, replicaOf: replicaOf})
		if err != nil {
			return fail(err)
		}
		if err := node.up(ctx); err != nil {
			return fail(err)
		}
		s.data = append(s.data, node)
	}
	kr := kairosRedis{addr: s.data[0].addr}
	if sc.Sentinel {
		if err := s.waitReplicaOnline(ctx, s.data[0]); err != nil {
			return fail(err)
		}
		var addrs []string
		for i := range 3 {
			port, err := freePort(s.ports)
			if err != nil {
				return fail(err)
			}
			node, err := s.sup.newSentinel("sentinel-"+strconv.Itoa(i+1), rc.RedisBin, port, s.data[0].port)
			if err != nil {
				return fail(err)
			}
			if err := node.up(ctx); err != nil {
				return fail(err)
			}
			s.sentinels = append(s.sentinels, node)
			addrs = append(addrs, node.addr)
		}
		if err := s.waitSentinelsReady(ctx); err != nil {
			return fail(err)
		}
		kr = kairosRedis{addr: strings.Join(addrs, ","), masterName: masterName, waitReplicas: sc.WaitReplicas}
	}
	if sc.Fsync == fsyncOff {
		// Tokens must survive the kills of the negative control.
		port, err := freePort(s.ports)
		if err != nil {
			return fail(err)
		}
		admin, err := s.sup.newRedis("redis-admin", rc.RedisBin, port, redisConf{fsync: "always"})
		if err != nil {
			return fail(err)
		}
		if err := admin.up(ctx); err != nil {
			return fail(err)
		}
		s.others = append(s.others, admin)
		kr.adminAddr = admin.addr
	}
	k, err := s.sup.newKairos("kairos", rc.ServerBin, s.ports, kr)
	if err != nil {
		return fail(err)
	}
	if err := k.up(ctx); err != nil {
		return fail(err)
	}
	s.kairos = k
	return s, nil
}

// waitSentinelsReady waits until every sentinel knows the replica and the
// two other sentinels (else a failover cannot be agreed on).
func (s *setup) waitSentinelsReady(ctx context.Context) error {
	return waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		for _, sn := range s.sentinels {
			m, err := sn.client.Do(ctx, "SENTINEL", "MASTER", masterName).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", sn.name, err)
			}
			f := sentinelFields(m)
			if f["num-slaves"] != "1" || f["num-other-sentinels"] != "2" {
				return fmt.Errorf("%s: num-slaves %s, num-other-sentinels %s", sn.name, f["num-slaves"], f["num-other-sentinels"])
			}
		}
		return nil
	})
}

// sentinelFields turns a SENTINEL MASTER reply (a flat list or a map) into
// a map.
func sentinelFields(v any) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
		}
	case map[any]any:
		for k, val := range m {
			out[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	}
	return out
}

// master asks the sentinels which data node is the master (the first
// answer wins, as for go-redis's failover client).
func (s *setup) master(ctx context.Context) (*redisNode, error) {
	if len(s.sentinels) == 0 {
		return s.data[0], nil
	}
	var errs []error
	for _, sn := range s.sentinels {
		addr, err := sn.client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName).StringSlice()
		if err != nil || len(addr) != 2 {
			errs = append(errs, fmt.Errorf("%s: %v %v", sn.name, addr, err))
			continue
		}
		for _, d := range s.data {
			if strconv.Itoa(d.port) == addr[1] {
				return d, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s names unknown master %v", sn.name, addr))
	}
	return nil, errors.Join(errs...)
}

// waitReplicaOnline waits (up to 60 s, or ctx) until master has its
// replica online and the replica reports its link up.
func (s *setup) waitReplicaOnline(ctx context.Context, master *redisNode) error {
	return waitFor(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		if role, err := master.info(ctx, "replication", "role"); err != nil || role != "master" {
			return fmt.Errorf("%s: role %q: %v", master.name, role, err)
		}
		for _, d := range s.data {
			if d == master {
				continue
			}
			info, err := d.client.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(master.port) ||
				infoField(info, "master_link_status") != "up" {
				return fmt.Errorf("%s: role %s, master_port %s, link %s", d.name, infoField(info, "role"),
					infoField(info, "master_port"), infoField(info, "master_link_status"))
			}
		}
		return nil
	})
}

// disrupt runs one disruption of kind ev, returning once the setup is
// healthy again.
func (s *setup) disrupt(ctx context.Context, ev string, nth int) error {
	switch ev {
	case evServerKill:
		s.kairos.kill()
		sleepCtx(ctx, rand.N(300*time.Millisecond))
		return s.kairos.up(ctx)
	case evRedisKill:
		down := 200*time.Millisecond + rand.N(1300*time.Millisecond)
		return s.data[0].restart(ctx, down)
	case evFlush:
		m, err := s.master(ctx)
		if err != nil {
			return err
		}
		return m.client.ScriptFlush(ctx).Err()
	case evPause:
		m, err := s.master(ctx)
		if err != nil {
			return err
		}
		d := 300*time.Millisecond + rand.N(1200*time.Millisecond)
		mode := "WRITE"
		if nth%2 == 1 {
			mode = "ALL"
		}
		if err := m.client.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), mode).Err(); err != nil {
			return fmt.Errorf("CLIENT PAUSE: %w", err)
		}
		sleepCtx(ctx, d)
		return nil
	case evFailover:
		return s.failover(ctx, nth)
	case evReshard:
		return s.reshard(ctx, nth)
	case evMasterKill:
		return s.masterKill(ctx, nth)
	}
	return fmt.Errorf("unknown disruption %q", ev)
}

// failoverKind is the kind of the n-th failover: they take turns.
func failoverKind(n int) string {
	switch n % 3 {
	case 0:
		return "kill-master"
	case 1:
		return "hang-master"
	default:
		return "sentinel-failover"
	}
}

// failover makes the sentinels elect the replica: by SIGKILLing the
// master (restarted once the replica is promoted, it comes back as a
// replica), by hanging it (SIGSTOP until the replica is promoted, then
// SIGCONT: it serves its old clients until the sentinels demote it), or by
// SENTINEL FAILOVER. It returns when the new master has its replica online.
func (s *setup) failover(ctx context.Context, nth int) error {
	kind := failoverKind(nth)
	old, err := s.master(ctx)
	if err != nil {
		return err
	}
	s.failoverKinds = append(s.failoverKinds, kind)
	switch kind {
	case "kill-master":
		old.kill()
	case "hang-master":
		if err := old.stop(); err != nil {
			return err
		}
	case "sentinel-failover":
		sn := s.sentinels[rand.IntN(len(s.sentinels))]
		err := waitFor(ctx, 20*time.Second, 200*time.Millisecond, func() error {
			return sn.client.Do(ctx, "SENTINEL", "FAILOVER", masterName).Err()
		})
		if err != nil {
			return fmt.Errorf("SENTINEL FAILOVER: %w", err)
		}
	}
	var newMaster *redisNode
	err = waitFor(ctx, 60*time.Second, 50*time.Millisecond, func() error {
		m, err := s.master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("sentinels still name %s", old.name)
		}
		newMaster = m
		return nil
	})
	// Bring the old master back whatever happened.
	switch kind {
	case "kill-master":
		sleepCtx(ctx, rand.N(500*time.Millisecond))
		if uerr := old.up(ctx); uerr != nil {
			return errors.Join(err, uerr)
		}
	case "hang-master":
		if cerr := old.cont(); cerr != nil {
			return errors.Join(err, cerr)
		}
	}
	if err != nil {
		return fmt.Errorf("failover (%s): %w; sentinel log:\n%s", kind, err, s.sentinels[0].logTail(15))
	}
	s.log.Debugf("failover (%s): sentinels name %s", kind, newMaster.name)
	return s.waitTopology(ctx)
}

// waitTopology waits until every sentinel names the same master and that
// master has its replica online. On a loaded machine the sentinels may
// fail over once more on their own (a master slow to answer for
// down-after-milliseconds): whoever is master at the end counts.
func (s *setup) waitTopology(ctx context.Context) error {
	var last error
	err := waitFor(ctx, 90*time.Second, 200*time.Millisecond, func() error {
		m, err := s.agreedMaster(ctx)
		if err != nil {
			last = err
			return err
		}
		// Short: the sentinels may still move the master.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		last = s.waitReplicaOnline(wctx, m)
		return last
	})
	if err != nil {
		return fmt.Errorf("topology not healthy: %w (last: %v); sentinel log:\n%s", err, last, s.sentinels[0].logTail(15))
	}
	return nil
}

// agreedMaster returns the master every sentinel names.
func (s *setup) agreedMaster(ctx context.Context) (*redisNode, error) {
	var port string
	for _, sn := range s.sentinels {
		addr, err := sn.client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName).StringSlice()
		if err != nil || len(addr) != 2 {
			return nil, fmt.Errorf("%s: %v %v", sn.name, addr, err)
		}
		if port != "" && addr[1] != port {
			return nil, fmt.Errorf("sentinels disagree: %s names port %s, another %s", sn.name, addr[1], port)
		}
		port = addr[1]
	}
	for _, d := range s.data {
		if strconv.Itoa(d.port) == port {
			return d, nil
		}
	}
	return nil, fmt.Errorf("sentinels name unknown master port %s", port)
}

// healthy checks that every process is up and serving.
func (s *setup) healthy(ctx context.Context) error {
	if !s.kairos.alive() {
		return fmt.Errorf("kairos-server died on its own:\n%s", s.kairos.logTail(30))
	}
	for _, n := range slices.Concat(s.data, s.sentinels, s.others) {
		if !n.alive() {
			return fmt.Errorf("%s is not running", n.name)
		}
	}
	if s.nodeIDs != nil {
		if err := s.waitCluster(ctx, 60*time.Second, true); err != nil {
			return err
		}
	}
	return waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() error { return s.kairos.ready(ctx) })
}

// schedule spreads the disruptions of sc over its duration: the k-th of m
// at a random moment of the k-th m-th of the duration. Failovers come in
// their kinds' order; the rest is shuffled.
func (sc scenario) schedule() []string {
	var evs []string
	add := func(ev string, n int) {
		for range n {
			evs = append(evs, ev)
		}
	}
	add(evServerKill, sc.ServerKills)
	add(evRedisKill, sc.RedisKills)
	add(evFlush, sc.Flushes)
	add(evPause, sc.Pauses)
	add(evReshard, sc.Reshards)
	add(evMasterKill, sc.MasterKills)
	rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	if sc.Failovers > 0 {
		// Failovers take seconds each: interleave them evenly.
		var out []string
		per := len(evs)/sc.Failovers + 1
		for i := 0; i < sc.Failovers; i++ {
			out = append(out, evFailover)
			lo := min(i*per, len(evs))
			hi := min(lo+per, len(evs))
			out = append(out, evs[lo:hi]...)
		}
		if rest := sc.Failovers * per; rest < len(evs) {
			out = append(out, evs[rest:]...)
		}
		evs = out
	}
	return evs
}

// run runs the scenario and returns its result. An error means the
// harness itself could not run it (a process would not start …).
func (sc scenario) run(ctx context.Context, rc runConfig) (res Result, err error) {
	log := rc.Log.WithField("scenario", sc.Name)
	rc.Log = log
	dir := filepath.Join(rc.Dir, sc.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	log.Infof("starting %s", sc.setupName())
	s, err := sc.start(ctx, rc, dir)
	if err != nil {
		return res, err
	}
	defer s.sup.killAll()
	token, err := s.kairos.token(ctx, chaosNamespace)
	if err != nil {
		return res, err
	}
	w := newWorkload(workloadConfig{
		API: s.kairos.api, Token: token, Namespace: chaosNamespace, Queues: s.queues,
		Tries: sc.Tries, TTR: sc.TTR, Rate: rc.Rate,
		Publishers: rc.Publishers, Consumers: rc.Consumers, Droppers: sc.Droppers,
	}, log)
	defer w.close()
	w.start(ctx)

	evs := sc.schedule()
	done := map[string]int{}
	var timeline []disruption
	start := time.Now()
	hardStop := start.Add(2*sc.Duration + 2*time.Minute)
	for k, ev := range evs {
		at := start.Add(time.Duration((float64(k) + 0.2 + 0.6*rand.Float64()) * float64(sc.Duration) / float64(len(evs))))
		sleepCtx(ctx, time.Until(at))
		if ctx.Err() != nil || time.Now().After(hardStop) {
			log.Warnf("stopping the disruptions after %d of %d (time is up)", k, len(evs))
			break
		}
		evStart := time.Now()
		if err := s.disrupt(ctx, ev, done[ev]); err != nil {
			return res, fmt.Errorf("%s #%d: %w", ev, done[ev]+1, err)
		}
		name := ev
		if ev == evFailover {
			name = failoverKind(done[ev])
		}
		timeline = append(timeline, disruption{name: name, from: evStart, to: time.Now()})
		done[ev]++
		if ev == evFailover || ev == evRedisKill || ev == evMasterKill || ev == evReshard || done[ev]%10 == 0 {
			log.Infof("%s #%d done", ev, done[ev])
		}
	}
	sleepCtx(ctx, time.Until(start.Add(sc.Duration)))
	chaosTime := time.Since(start)
	if err := s.healthy(ctx); err != nil {
		return res, err
	}
	log.Infof("chaos over after %v; draining", chaosTime.Round(time.Millisecond))
	drainStart := time.Now()
	residual, err := w.drain(ctx, rc.DrainLimit)
	if err != nil {
		return res, fmt.Errorf("drain: %w", err)
	}
	c := w.led.summarize()
	res = sc.result(c, done, s.failoverKinds)
	res.addCluster(s.cstats)
	res.LostByDisruption = attribute(c.LostSent, timeline)
	logLosses(log, c.LostSent, timeline)
	res.ChaosS = chaosTime.Seconds()
	res.DrainS = time.Since(drainStart).Seconds()
	res.Residual = residual
	res.judge(sc)
	return res, nil
}

// disruption is one disruption as it happened.
type disruption struct {
	name     string
	from, to time.Time
}

// attribute counts lost jobs by the disruption during which (or up to 2 s
// before which, for writes not yet replicated) they were published; where
// windows overlap, the disruption that started last wins. Jobs published
// outside every window count as "none".
func attribute(sent []int64, timeline []disruption) map[string]int {
	if len(sent) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, at := range sent {
		name := "none"
		if d, ok := blame(time.UnixMilli(at), timeline); ok {
			name = d.name
		}
		out[name]++
	}
	return out
}

// blame returns the disruption a write published at t is attributed to.
func blame(t time.Time, timeline []disruption) (disruption, bool) {
	var found disruption
	ok := false
	for _, d := range timeline {
		if !t.Before(d.from.Add(-2*time.Second)) && !t.After(d.to.Add(time.Second)) {
			if !ok || d.from.After(found.from) {
				found, ok = d, true
			}
		}
	}
	return found, ok
}

// logLosses logs (at debug level, -v) each disruption's window and the
// publish times of the lost jobs relative to it, to explain losses.
func logLosses(log logrus.FieldLogger, sent []int64, timeline []disruption) {
	if len(sent) == 0 {
		return
	}
	for _, d := range timeline {
		var rel []string
		for _, at := range sent {
			t := time.UnixMilli(at)
			if b, ok := blame(t, timeline); ok && b == d {
				rel = append(rel, fmt.Sprintf("%+d", t.Sub(d.from).Milliseconds()))
			}
		}
		if len(rel) > 0 {
			log.Debugf("%s at %s, lasted %v: %d lost jobs published at (ms from its start) %s", d.name,
				d.from.Format("15:04:05.000"), d.to.Sub(d.from).Round(time.Millisecond), len(rel), strings.Join(rel, " "))
		}
	}
}
