package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"

	"github.com/kairos-dev/kairos/engine/enginetest"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The contract suite on a real Redis Cluster (three masters, one replica
// each): every script must touch one slot, and wake-ups must cross the
// cluster (sharded Pub/Sub).
func TestContractCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness {
		c.Flush(t)
		return harness(t, client, time.Sleep)
	})
}

func TestExtendedCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness {
		c.Flush(t)
		return harness(t, client, time.Sleep)
	})
}

// queuesOnMasters returns one queue name of ns per third of the slot
// groups, so that on a cluster made by redis-cli (equal slot ranges) they
// live on the three masters.
func queuesOnMasters(ns string) []string {
	var out []string
	for i := 0; len(out) < 3; i++ {
		q := fmt.Sprintf("q%d", i)
		if slotGroup(ns, q)*3/slotGroups == len(out) {
			out = append(out, q)
		}
	}
	return out
}

// TestClusterWakeups: on a cluster, wake-ups go through sharded Pub/Sub
// to the server that waits. Engine b publishes (it does not run: no pump,
// no Pub/Sub of its own); engine a, whose sweep and pump sleep are an hour
// long so that only messages can wake it, hands the jobs to its waiting
// consumers at once: ready jobs of queues on every master, and a delayed
// job whose wake-up reaches a's pump.
func TestClusterWakeups(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	a, err := New(ctx, c.Client(t), Options{MaxPumpSleep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.waiters.sweepEvery = time.Hour
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	b, err := New(ctx, c.Client(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "wake"
	queues := queuesOnMasters(ns)
	type result struct {
		jobs []*engine.Job
		at   time.Time
	}
	wait := func(q string) chan result {
		got := make(chan result, 1)
		go func() {
			jobs, err := a.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 1, Timeout: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- result{jobs, time.Now()}
		}()
		waitFor(t, "the waiter", func() bool { return waitingOn(a, ns, q) == 1 })
		return got
	}
	for _, q := range queues {
		got := wait(q)
		// The subscription is sharded: the master of the queue's slot
		// counts it (PUBSUB SHARDNUMSUB), where PUBSUB NUMSUB would not.
		ch := readyChannel(ns, q)
		node := redis.NewClient(&redis.Options{Addr: c.MasterOf(t, ch)})
		n, err := node.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).Slice()
		_ = node.Close()
		if err != nil || len(n) != 2 || n[1] != int64(1) {
			t.Errorf("%s: PUBSUB SHARDNUMSUB %s = %v, %v; want 1 subscriber", q, ch, n, err)
		}
		start := time.Now()
		if _, err := b.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(q), TTL: time.Hour, Tries: 1}); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if len(r.jobs) != 1 || string(r.jobs[0].Body) != q {
			t.Fatalf("%s: the waiter got %v", q, r.jobs)
		}
		if d := r.at.Sub(start); d > 500*time.Millisecond {
			t.Errorf("%s: the waiter got its job %v after the publish, want well under a second", q, d)
		}
	}
	// A delayed job published through b: its group's wake-up message
	// makes a's pump look at the due time.
	q := queues[2]
	got := wait(q)
	start := time.Now()
	if _, err := b.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("later"), TTL: time.Hour, Tries: 1, Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if len(r.jobs) != 1 || string(r.jobs[0].Body) != "later" {
		t.Fatalf("delayed: the waiter got %v", r.jobs)
	}
	if d := r.at.Sub(start); d < 300*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("delayed 300ms: the waiter got it after %v", d)
	}
}

// TestClusterConsumeAcrossGroups: a consume over queues of several slot
// groups (several masters) takes jobs in the queues' order, as on one
// Redis, and a batch consume gathers jobs across them.
func TestClusterConsumeAcrossGroups(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	e := startEngine(t, c.Client(t), newTestClock())
	const ns = "across"
	qs := queuesOnMasters(ns)
	pub := func(q, body string) {
		t.Helper()
		if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(body), TTL: time.Hour, Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	pub(qs[2], "c1")
	pub(qs[2], "c2")
	pub(qs[0], "a1")
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: qs, TTR: time.Minute, Count: 1})
	if err != nil || len(jobs) != 1 || string(jobs[0].Body) != "a1" || jobs[0].Queue != qs[0] {
		t.Fatalf("first consume = %v, %v; want a1 of the first queue", jobs, err)
	}
	pub(qs[1], "b1")
	jobs, err = e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: qs, TTR: time.Minute, Count: 5})
	var got []string
	for _, j := range jobs {
		got = append(got, j.Queue+":"+string(j.Body))
	}
	if want := []string{qs[1] + ":b1", qs[2] + ":c1", qs[2] + ":c2"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("batch consume = %v, %v; want %v", got, err, want)
	}
	for _, j := range jobs {
		if err := e.Delete(ctx, ns, j.Queue, j.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterWaitReplicas: WaitReplicas on a cluster pool. go-redis's
// cluster pipeline sends a keyless command (WAIT) to the node of the
// command before it, over the same connection, so a publish returns once
// the master's replica has the job, on every master; asking for more
// replicas than there are fails with ErrNotReplicated, naming the job.
func TestClusterWaitReplicas(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	replicaOf := map[string]string{}
	for _, sh := range c.Shards(t) {
		if len(sh.Replicas) != 1 {
			t.Fatalf("shard %v: want one replica", sh)
		}
		replicaOf[sh.Master] = sh.Replicas[0]
	}
	const ns = "waitrep"
	e, err := New(bg, client, Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queuesOnMasters(ns) {
		for _, key := range []string{"", "k"} {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte("x"), Key: key})
			if err != nil {
				t.Fatalf("%s: publish with a replica: %v", q, err)
			}
			k := jobKey(ns, q, id)
			r := redis.NewClient(&redis.Options{Addr: replicaOf[c.MasterOf(t, k)]})
			n, err := r.Do(bg, "READONLY").Err(), error(nil)
			if n == nil {
				var v int64
				v, err = r.Exists(bg, k).Result()
				if err == nil && v != 1 {
					err = fmt.Errorf("not there")
				}
			} else {
				err = n
			}
			_ = r.Close()
			if err != nil {
				t.Fatalf("%s: job %s not on the replica when publish returned: %v", q, id, err)
			}
		}
		if again, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Key: "k"}); !errors.Is(err, engine.ErrKeyExists) || again == "" {
			t.Fatalf("%s: keyed retry: %q, %v; want the first ID and ErrKeyExists", q, again, err)
		}
	}
	two, err := New(bg, client, Options{WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := two.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Tries: 1}); !errors.Is(err, engine.ErrNotReplicated) || id == "" {
		t.Fatalf("publish waiting for 2 replicas of 1: %q, %v; want its ID and ErrNotReplicated", id, err)
	}
}

// TestClusterRedisInfo: the pool's INFO figures on a cluster are the sums
// over its masters (a cluster client sends INFO to one node).
func TestClusterRedisInfo(t *testing.T) {
	c := redistest.SharedCluster(t)
	c.Flush(t)
	client := c.Client(t)
	e, err := New(bg, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if err := client.Set(bg, fmt.Sprintf("info-%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	f, err := e.redisInfo(bg)
	if err != nil || f["keys"] != 62 {
		t.Fatalf("keys = %v (%v), want the 60 keys of the three masters and the layout and usage markers", f["keys"], err)
	}
	if f["connected_clients"] < 3 {
		t.Errorf("connected_clients = %v, want a sum over three masters", f["connected_clients"])
	}
}

// TestClusterRedirectRetry: while the nodes disagree about a slot, go-redis
// follows MOVED and ASK only MaxRedirects times and then returns the last
// redirection; the engine retries it (within ClusterRetry) as it does
// TRYAGAIN, and the call succeeds once the slot settles. The master of a
// queue's empty slot is made to name another master as the owner, which
// names it back (MOVED back and forth), or to migrate the slot to a node
// that does not import it (ASK, then MOVED back), for 400 ms: a publish, a
// publish with WaitReplicas (its WAIT pinned to the script's node) and a
// consume issued meanwhile succeed, and the jobs are there once each. The
// shared cluster is fine: the slots are of this test's queues, empty, and
// set back within the test.
func TestClusterRedirectRetry(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	e, err := New(bg, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ew, err := New(bg, client, Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go func() { _ = e.Run(ctx) }()
	const ns = "redirect"
	for _, tc := range []struct {
		name, q string
		// confuse makes the owner redirect; restore undoes it.
		confuse func(owner *redis.Client, slot int64, otherID string) error
		restore func(owner *redis.Client, slot int64, ownerID string) error
	}{
		{"moved", "qm", func(owner *redis.Client, slot int64, otherID string) error {
			return owner.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", otherID).Err()
		}, func(owner *redis.Client, slot int64, ownerID string) error {
			return owner.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", ownerID).Err()
		}},
		{"ask", "qa", func(owner *redis.Client, slot int64, otherID string) error {
			return owner.Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", otherID).Err()
		}, func(owner *redis.Client, slot int64, _ string) error {
			return owner.Do(bg, "CLUSTER", "SETSLOT", slot, "STABLE").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slot := slotOf(t, client, ns, tc.q)
			ownerAddr := c.MasterOf(t, readyKey(ns, tc.q))
			otherAddr := ""
			for _, m := range c.Masters(t) {
				if m != ownerAddr {
					otherAddr = m
					break
				}
			}
			owner := redis.NewClient(&redis.Options{Addr: ownerAddr})
			defer owner.Close()
			other := redis.NewClient(&redis.Options{Addr: otherAddr})
			defer other.Close()
			ownerID, err := owner.Do(bg, "CLUSTER", "MYID").Text()
			if err != nil {
				t.Fatal(err)
			}
			otherID, err := other.Do(bg, "CLUSTER", "MYID").Text()
			if err != nil {
				t.Fatal(err)
			}
			if n, err := owner.ClusterCountKeysInSlot(bg, int(slot)).Result(); err != nil || n != 0 {
				t.Fatalf("slot %d holds %d keys (%v); want an empty slot", slot, n, err)
			}
			if err := tc.confuse(owner, slot, otherID); err != nil {
				t.Fatalf("confuse %s about slot %d: %v", ownerAddr, slot, err)
			}
			restored := make(chan error, 1)
			time.AfterFunc(400*time.Millisecond, func() { restored <- tc.restore(owner, slot, ownerID) })
			start := time.Now()
			var id, wid string
			var pubErr, wpubErr, conErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				id, pubErr = e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: tc.q, Tries: 1, Body: []byte("x")})
			})
			wg.Go(func() {
				wid, wpubErr = ew.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: tc.q, Tries: 1, Body: []byte("w")})
			})
			wg.Go(func() {
				_, conErr = e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{tc.q}, Count: 1, TTR: 30})
			})
			wg.Wait()
			took := time.Since(start)
			if err := <-restored; err != nil {
				t.Fatalf("restore slot %d: %v", slot, err)
			}
			if pubErr != nil || wpubErr != nil || conErr != nil {
				t.Fatalf("while slot %d redirects: publish: %v; publish with WaitReplicas: %v; consume: %v (after %v)",
					slot, pubErr, wpubErr, conErr, took)
			}
			if took < 300*time.Millisecond {
				t.Errorf("took %v: the calls never met the redirections", took)
			}
			var got []string
			for {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{tc.q}, Count: 10, TTR: 30})
				if err != nil {
					t.Fatal(err)
				}
				if len(jobs) == 0 {
					break
				}
				for _, j := range jobs {
					got = append(got, j.ID)
				}
			}
			// The consume of the redirections may have taken one of them.
			slices.Sort(got)
			want := []string{id, wid}
			slices.Sort(want)
			if !(slices.Equal(got, want) || len(got) == 1 && slices.Contains(want, got[0])) {
				t.Errorf("jobs left %v; want those published, %v, once each (one may have been consumed)", got, want)
			}
		})
	}
}

// slotOf is the hash slot of queue q of ns.
func slotOf(t *testing.T, c *redis.ClusterClient, ns, q string) int64 {
	t.Helper()
	slot, err := c.ClusterKeySlot(bg, readyKey(ns, q)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// TestClusterWakeupsAfterSlotMove: a slot move does not break a sharded
// Pub/Sub connection; the old master unsubscribes it from the slot's
// channels and keeps it open. The engine subscribes again on the new
// master, so that a consumer waiting through the move is woken by the
// next publish at once, not by the sweep (an hour long here), and so is
// the pump by the group's wake-up channel. The slot then moves back, and
// the same holds.
func TestClusterWakeupsAfterSlotMove(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	client := c.Client(t)
	a, err := New(ctx, c.Client(t), Options{MaxPumpSleep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.waiters.sweepEvery = time.Hour
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	b, err := New(ctx, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "slotmove", "q"
	ch := readyChannel(ns, q)
	slot := slotOf(t, client, ns, q)
	home := c.MasterOf(t, ch)
	var away string
	for _, m := range c.Masters(t) {
		if m != home {
			away = m
			break
		}
	}
	for i, to := range []string{away, home} {
		got := make(chan []*engine.Job, 1)
		go func() {
			jobs, err := a.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 1, Timeout: 20 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- jobs
		}()
		waitFor(t, "the waiter", func() bool { return waitingOn(a, ns, q) == 1 })
		waitFor(t, "the subscription", func() bool { return shardSubs(t, c.MasterOf(t, ch), ch) == 1 })
		moveSlot(t, c, int(slot), to)
		// a subscribes on the new master (the waiter still waits).
		waitFor(t, "the subscription on the new master", func() bool { return shardSubs(t, to, ch) == 1 })
		start := time.Now()
		body := fmt.Sprintf("after move %d", i+1)
		if _, err := b.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(body), TTL: time.Hour, Tries: 1}); err != nil {
			t.Fatal(err)
		}
		select {
		case jobs := <-got:
			if len(jobs) != 1 || string(jobs[0].Body) != body {
				t.Fatalf("move %d: the waiter got %v", i+1, jobs)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("move %d: the waiter got its job %v after the publish, want well under a second", i+1, d)
			}
			if err := a.Delete(ctx, ns, q, jobs[0].ID); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("move %d: the waiter was not woken by a publish after the slot move", i+1)
		}
		// The pump's wake-up channel moved too: a delayed job reaches a
		// waiter through a's pump, whose own sleep is an hour.
		go func() {
			jobs, err := a.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 1, Timeout: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- jobs
		}()
		waitFor(t, "the waiter", func() bool { return waitingOn(a, ns, q) == 1 })
		if _, err := b.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("later"), TTL: time.Hour, Tries: 1, Delay: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		select {
		case jobs := <-got:
			if len(jobs) != 1 || string(jobs[0].Body) != "later" {
				t.Fatalf("move %d, delayed: the waiter got %v", i+1, jobs)
			}
			if err := a.Delete(ctx, ns, q, jobs[0].ID); err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("move %d: a delayed job did not reach the waiter: the pump was not woken after the slot move", i+1)
		}
	}
}

// shardSubs is PUBSUB SHARDNUMSUB of channel ch on node addr.
func shardSubs(t *testing.T, addr, ch string) int64 {
	t.Helper()
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	n, err := node.Do(bg, "PUBSUB", "SHARDNUMSUB", ch).Slice()
	if err != nil || len(n) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB %s on %s: %v, %v", ch, addr, n, err)
	}
	v, _ := n[1].(int64)
	return v
}

// moveSlot moves slot to the master at addr as redis-cli --cluster
// reshard does: IMPORTING on the target, MIGRATING on the source, MIGRATE
// of its keys, then the new owner on every master.
func moveSlot(t *testing.T, c *redistest.Cluster, slot int, to string) {
	t.Helper()
	var from string
	for _, sh := range c.Shards(t) {
		for _, r := range sh.Slots {
			if slot >= r[0] && slot <= r[1] {
				from = sh.Master
			}
		}
	}
	if from == to {
		return
	}
	nodes := map[string]*redis.Client{}
	for _, m := range c.Masters(t) {
		nodes[m] = redis.NewClient(&redis.Options{Addr: m})
		defer nodes[m].Close()
	}
	id := func(addr string) string {
		s, err := nodes[addr].Do(bg, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	fromID, toID := id(from), id(to)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("move slot %d from %s to %s: %v", slot, from, to, err)
		}
	}
	must(nodes[to].Do(bg, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(nodes[from].Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	host, port, _ := strings.Cut(to, ":")
	for {
		keys, err := nodes[from].ClusterGetKeysInSlot(bg, slot, 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(nodes[from].Do(bg, args...).Err())
	}
	must(nodes[to].Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	must(nodes[from].Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	for addr, n := range nodes {
		if addr != from && addr != to {
			must(n.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
		}
	}
	c.Wait(t)
}

// TestClusterConsumePassesOverFailedGroup: a consume over queues of
// several slot groups goes on past a group whose call fails (here a slot
// that redirects back and forth, with no engine retry) and hands out the
// jobs of the others; alone, the failing queue's consume fails. Before,
// the whole consume failed, and jobs already taken from an earlier group
// waited for their TTR.
func TestClusterConsumePassesOverFailedGroup(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	e, err := New(bg, client, Options{ClusterRetry: -1})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "passover"
	qs := queuesOnMasters(ns)
	good, bad, late := qs[0], qs[1], qs[2]
	for _, q := range []string{good, late} {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(q)}); err != nil {
			t.Fatal(err)
		}
	}
	slot := slotOf(t, client, ns, bad)
	ownerAddr := c.MasterOf(t, readyKey(ns, bad))
	owner := redis.NewClient(&redis.Options{Addr: ownerAddr})
	defer owner.Close()
	ownerID, err := owner.Do(bg, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	var otherID string
	for _, m := range c.Masters(t) {
		if m != ownerAddr {
			o := redis.NewClient(&redis.Options{Addr: m})
			otherID, err = o.Do(bg, "CLUSTER", "MYID").Text()
			_ = o.Close()
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if err := owner.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", otherID).Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := owner.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", ownerID).Err(); err != nil {
			t.Errorf("restore slot %d: %v", slot, err)
		}
	}()
	// The failing group first, then two groups with a job each.
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{bad, good, late}, Count: 2, TTR: 30})
	if err != nil {
		t.Fatalf("consume over %s (failing), %s and %s: %v; want the jobs of the two others", bad, good, late, err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, string(j.Body))
	}
	if want := []string{good, late}; !slices.Equal(got, want) {
		t.Fatalf("consume got %v, want %v", got, want)
	}
	if jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{bad}, Count: 1, TTR: 30}); err == nil {
		t.Fatalf("consume of the failing queue alone: %v, nil; want its error", jobs)
	}
}

// TestClusterConsumeDuringMigration: while a queue's slot migrates, with
// its job keys already on the target and its lists still on the source,
// consumes and the pump are refused (the job key prefix in KEYS never
// exists: TRYAGAIN) instead of popping entries whose jobs they cannot
// read ("Script attempted to access a non local key", after the pop).
// Once the move ends, every job is there.
func TestClusterConsumeDuringMigration(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	e, err := New(bg, client, Options{ClusterRetry: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q, n = "midmove", "q", 10
	ids := map[string]bool{}
	for i := range n {
		id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	slot := slotOf(t, client, ns, q)
	from := c.MasterOf(t, readyKey(ns, q))
	to := ""
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	src, dst := redis.NewClient(&redis.Options{Addr: from}), redis.NewClient(&redis.Options{Addr: to})
	defer src.Close()
	defer dst.Close()
	srcID, _ := src.Do(bg, "CLUSTER", "MYID").Text()
	dstID, _ := dst.Do(bg, "CLUSTER", "MYID").Text()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(bg, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(to, ":")
	migrate := func(jobs bool) {
		keys, err := src.ClusterGetKeysInSlot(bg, int(slot), 1000).Result()
		must(err)
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			if strings.HasPrefix(k, "j/") == jobs {
				args = append(args, k)
			}
		}
		if len(args) > 7 {
			must(src.Do(bg, args...).Err())
		}
	}
	migrate(true) // the job keys first
	if jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: n, TTR: 30}); err == nil {
		t.Fatalf("consume mid-migration: %d jobs, no error; want it refused (TRYAGAIN)", len(jobs))
	}
	migrate(false)
	must(dst.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	must(src.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	for _, m := range c.Masters(t) {
		if m != from && m != to {
			o := redis.NewClient(&redis.Options{Addr: m})
			must(o.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
			_ = o.Close()
		}
	}
	c.Wait(t)
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: n, TTR: 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		delete(ids, j.ID)
	}
	if len(ids) > 0 || len(jobs) != n {
		t.Fatalf("after the move: consumed %d jobs, missing %v; want all %d", len(jobs), ids, n)
	}
}
