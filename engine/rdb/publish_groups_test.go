package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// publishCalls is a go-redis hook that counts the calls of a script
// (publishManyScript unless script is set) in flight, alone or in
// pipelines, and the most at once, and can hold the next one for a while.
type publishCalls struct {
	script    *redis.Script
	mu        sync.Mutex
	inFlight  int
	most      int
	total     int
	holdNext  atomic.Int64 // ns: the next call waits this long first
	holdCount atomic.Int32
}

func (h *publishCalls) counts(cmd redis.Cmder) bool {
	s := h.script
	if s == nil {
		s = publishManyScript
	}
	a := cmd.Args()
	return len(a) > 1 && cmd.Name() == "evalsha" && a[1] == s.Hash()
}

func (h *publishCalls) enter(n int) {
	if n == 0 {
		return
	}
	if d := h.holdNext.Swap(0); d > 0 {
		h.holdCount.Add(1)
		time.Sleep(time.Duration(d))
	}
	h.mu.Lock()
	h.inFlight += n
	h.total += n
	h.most = max(h.most, h.inFlight)
	h.mu.Unlock()
}

func (h *publishCalls) leave(n int) {
	h.mu.Lock()
	h.inFlight -= n
	h.mu.Unlock()
}

func (h *publishCalls) reset() (most, total int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	most, total = h.most, h.total
	h.most, h.total = 0, 0
	return most, total
}

func (h *publishCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *publishCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n := 0
		if h.counts(cmd) {
			n = 1
		}
		h.enter(n)
		defer h.leave(n)
		return next(ctx, cmd)
	}
}

func (h *publishCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if h.counts(c) {
				n++
			}
		}
		h.enter(n)
		defer h.leave(n)
		return next(ctx, cmds)
	}
}

// queuesInGroups returns n queue names of ns in n different slot groups.
func queuesInGroups(ns string, n int) []string {
	seen := map[int]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		q := fmt.Sprintf("g%d", i)
		if g := slotGroup(ns, q); !seen[g] {
			seen[g] = true
			out = append(out, q)
		}
	}
	return out
}

// TestClusterPublishEachGroups: on a cluster, PublishEach over queues of
// many slot groups sends the groups' script calls concurrently (before,
// one after the other: never two in flight), inside an event-loop pass
// too; each job gets its own ID or error, and the jobs of one queue keep
// their order.
func TestClusterPublishEachGroups(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	calls := &publishCalls{}
	client.AddHook(calls)
	e := startEngine(t, client, newTestClock())
	const ns = "pubgroups"
	qs := queuesInGroups(ns, 24)
	most := 0
	for round := 0; round < 5 && most < 2; round++ {
		var reqs []*engine.PublishRequest
		for _, q := range qs {
			reqs = append(reqs, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1})
		}
		ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
		calls.reset()
		// As the event loops call it: a step of a pass beside another.
		e.Together(bg, func(ctx context.Context) {
			e.PublishEach(ctx, reqs, ids, errs)
		}, func(ctx context.Context) {
			if _, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"none"}, TTR: time.Minute, Count: 1}); err != nil {
				t.Error(err)
			}
		})
		for i := range reqs {
			if errs[i] != nil || ids[i] == "" {
				t.Fatalf("job %d of %s: %q, %v", i, reqs[i].Queue, ids[i], errs[i])
			}
		}
		most, _ = calls.reset()
	}
	if most < 2 {
		t.Fatalf("PublishEach over %d slot groups had at most %d publish call in flight at once; want them concurrent", len(qs), most)
	}

	// Errors per job, and order per queue: three queues' jobs interleaved
	// with bad requests.
	const ons = "pubgroupsorder"
	qs = queuesInGroups(ons, 7)
	var reqs []*engine.PublishRequest
	for i := 0; i < 4; i++ {
		for _, q := range qs[:3] {
			reqs = append(reqs, &engine.PublishRequest{Namespace: ons, Queue: q, Body: []byte(fmt.Sprint(i)), TTL: time.Hour, Tries: 1})
		}
		reqs = append(reqs,
			&engine.PublishRequest{Namespace: ons, Queue: qs[i+3], Body: []byte("x"), Tries: 0},    // invalid: no tries
			&engine.PublishRequest{Namespace: ons, Queue: "bad name", Body: []byte("x"), Tries: 1}, // invalid: name
			nil)
	}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	e.PublishEach(bg, reqs, ids, errs)
	for i, r := range reqs {
		bad := r == nil || r.Tries == 0 || r.Queue == "bad name"
		if bad != (errs[i] != nil) || bad != (ids[i] == "") {
			t.Fatalf("request %d (%+v): %q, %v", i, r, ids[i], errs[i])
		}
		if bad && !errors.Is(errs[i], engine.ErrInvalid) {
			t.Fatalf("request %d: %v, want ErrInvalid", i, errs[i])
		}
	}
	for _, q := range qs[:3] {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ons, Queues: []string{q}, TTR: time.Minute, Count: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, j := range jobs {
			got += string(j.Body)
		}
		if got != "0123" {
			t.Fatalf("queue %s consumed %q; want 0123", q, got)
		}
	}
}

// TestClusterPublishEachGroupsWaitReplicas: with WaitReplicas, each
// group's call waits for its own node's replicas: every job returns its
// ID, and ErrNotReplicated (with its ID) when more replicas are asked for
// than there are. (A guard: it passes on the sequential groups too.)
func TestClusterPublishEachGroupsWaitReplicas(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	const ns = "pubgroupswait"
	qs := queuesInGroups(ns, 12)
	for _, tc := range []struct {
		replicas int
		want     error
	}{{1, nil}, {2, engine.ErrNotReplicated}} {
		e, err := New(bg, client, Options{WaitReplicas: tc.replicas, WaitTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var reqs []*engine.PublishRequest
		for _, q := range qs {
			reqs = append(reqs, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1})
		}
		ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
		e.PublishEach(bg, reqs, ids, errs)
		for i := range reqs {
			if ids[i] == "" || !errors.Is(errs[i], tc.want) {
				t.Fatalf("WaitReplicas %d, job %d: %q, %v; want an ID and %v", tc.replicas, i, ids[i], errs[i], tc.want)
			}
			if n, err := client.Exists(bg, jobKey(ns, reqs[i].Queue, ids[i])).Result(); err != nil || n != 1 {
				t.Fatalf("job %s not stored: %d, %v", ids[i], n, err)
			}
		}
	}
}

// TestShardedPublishCoalescedOneShard: plain publishes to a sharded queue
// that coalesce into one batch go to one shard (one script call), the
// next batch to the next shard. Before, each publish took the next shard
// before coalescing, so a batch of 8 spread over the 4 shards: 4 queues in
// the script on one Redis, 4 script calls (one per slot group) on a
// cluster.
func TestShardedPublishCoalescedOneShard(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	calls := &publishCalls{}
	client.AddHook(calls)
	e := startEngine(t, client, newTestClock())
	if err := e.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	pub := func() (string, error) {
		return e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1})
	}
	shardOf := func(id string) int {
		s, _ := engine.JobIDShard(id)
		return s
	}
	var prev = -1
	for round := 0; round < 3; round++ {
		// The first publish is held in Redis while 8 more arrive: they
		// wait for it and go together as the next batch.
		calls.holdNext.Store(int64(300 * time.Millisecond))
		first := make(chan error, 1)
		go func() { _, err := pub(); first <- err }()
		for calls.holdCount.Load() != int32(round+1) {
			time.Sleep(time.Millisecond)
		}
		calls.reset()
		var wg sync.WaitGroup
		ids := make([]string, 8)
		errs := make([]error, 8)
		for i := range ids {
			wg.Add(1)
			go func() { defer wg.Done(); ids[i], errs[i] = pub() }()
		}
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		shards := map[int]bool{}
		for i := range ids {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			shards[shardOf(ids[i])] = true
		}
		_, total := calls.reset()
		if len(shards) != 1 {
			t.Fatalf("round %d: 8 coalesced publishes went to shards %v in %d script calls; want one shard", round, shards, total)
		}
		var s int
		for s = range shards {
		}
		if s == prev {
			t.Fatalf("round %d: the batch went to shard %d again", round, s)
		}
		prev = s
	}
	if n, err := e.Size(bg, "ns", "hot"); err != nil || n != 27 {
		t.Fatalf("size %d, %v; want 27", n, err)
	}
}

// TestClusterDeleteEachGroups: on a cluster, DeleteEach over queues of
// several slot groups (a sharded queue's shards among them) sends the
// queues' ACK calls concurrently (before, one after the other), and each
// ACK gets its own result.
func TestClusterDeleteEachGroups(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	calls := &publishCalls{script: ackManyScript}
	client.AddHook(calls)
	e := startEngine(t, client, newTestClock())
	const ns = "ackgroups"
	qs := queuesInGroups(ns, 12)
	if err := e.SetQueueConfig(bg, ns, qs[0], engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	most := 0
	for round := 0; round < 5 && most < 2; round++ {
		var refs []engine.JobRef
		for _, q := range qs {
			for i := 0; i < 4; i++ { // 4 publishes: each shard of qs[0]
				id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1})
				if err != nil {
					t.Fatal(err)
				}
				refs = append(refs, engine.JobRef{Namespace: ns, Queue: q, ID: id})
			}
		}
		refs = append(refs, engine.JobRef{Namespace: ns, Queue: "bad name", ID: refs[0].ID})
		errs := make([]error, len(refs))
		calls.reset()
		e.DeleteEach(bg, refs, errs)
		most, _ = calls.reset()
		for i, r := range refs {
			switch {
			case i == len(refs)-1:
				if !errors.Is(errs[i], engine.ErrInvalid) {
					t.Fatalf("ACK on a bad queue name: %v, want ErrInvalid", errs[i])
				}
			case errs[i] != nil:
				t.Fatalf("ACK %d of %s: %v", i, r.Queue, errs[i])
			}
		}
		for _, q := range qs {
			if n, err := e.Size(bg, ns, q); err != nil || n != 0 {
				t.Fatalf("%s after DeleteEach: size %d, %v", q, n, err)
			}
		}
	}
	if most < 2 {
		t.Fatalf("DeleteEach over %d queues had at most %d ACK call in flight at once; want them concurrent", len(qs), most)
	}
}

// TestShardedConsumeEachOneCall: the single-job consumes of a sharded
// queue in one ConsumeEach take the shards from the same start and share
// one script call (on one Redis); before, each took a start of its own,
// which split them into a call each.
func TestShardedConsumeEachOneCall(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	calls := &publishCalls{script: consumeScript}
	client.AddHook(calls)
	e := startEngine(t, client, newTestClock())
	if err := e.SetQueueConfig(bg, "ns", "hot", engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ { // two in each shard
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "hot", Body: []byte("x"), TTL: time.Hour, Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ {
		reqs := make([]*engine.ConsumeRequest, 4)
		for i := range reqs {
			reqs[i] = &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"hot"}, TTR: time.Minute, Count: 1}
		}
		jobs, errs := make([][]*engine.Job, len(reqs)), make([]error, len(reqs))
		calls.reset()
		e.ConsumeEach(bg, reqs, jobs, errs)
		_, total := calls.reset()
		seen := map[string]bool{}
		for i := range reqs {
			if errs[i] != nil || len(jobs[i]) != 1 || seen[jobs[i][0].ID] || reqs[i].Queues[0] != "hot" {
				t.Fatalf("round %d, consumer %d: %v, %v", round, i, jobs[i], errs[i])
			}
			seen[jobs[i][0].ID] = true
		}
		if total != 1 {
			t.Fatalf("round %d: 4 consumes of a sharded queue in one ConsumeEach made %d script calls; want 1", round, total)
		}
	}
}
