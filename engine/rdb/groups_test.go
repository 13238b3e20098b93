package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// Fair groups inside a queue (issue #32): the engine-level behaviours, on
// miniredis, a real Redis and the shared cluster.

// publishGroup publishes n jobs of group g to ns/q with PublishBatch, in
// batches of batch, bodies "g:i".
func publishGroup(t *testing.T, e *Engine, ns, q, g string, n, batch int) {
	t.Helper()
	for i := 0; i < n; i += batch {
		reqs := make([]*engine.PublishRequest, 0, batch)
		for k := i; k < min(n, i+batch); k++ {
			reqs = append(reqs, &engine.PublishRequest{Namespace: ns, Queue: q, Group: g, Body: []byte(fmt.Sprintf("%s:%d", g, k)), Tries: 1, TTL: time.Hour})
		}
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			t.Fatal(err)
		}
	}
}

// consumeN consumes up to n jobs of ns/q (batches of count), without
// waiting, and returns them in order.
func consumeN(t *testing.T, e *Engine, ns, q string, n, count int) []*engine.Job {
	t.Helper()
	var out []*engine.Job
	for len(out) < n {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: min(count, n-len(out)), TTR: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		out = append(out, jobs...)
	}
	return out
}

// groupsOf returns the groups of jobs, in order.
func groupsOf(jobs []*engine.Job) []string {
	gs := make([]string, len(jobs))
	for i, j := range jobs {
		gs[i] = j.Group
	}
	return gs
}

func TestGroups(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			clock := newTestClock()
			e := startEngine(t, client, clock)
			// miniredis runs Lua a hundred times slower: 2,000 jobs of big
			// there (more than the 600 consumes looked at), 20,000 on Redis.
			big := 20000
			if tier.name == "miniredis" {
				big = 2000
			}
			t.Run("fair", func(t *testing.T) { testGroupsFair(t, e, big) })
			t.Run("weights", func(t *testing.T) { testGroupsWeights(t, e, client) })
			t.Run("lifecycle", func(t *testing.T) { testGroupsLifecycle(t, e, clock) })
			t.Run("ungrouped", func(t *testing.T) { testGroupsUngrouped(t, e, client) })
			t.Run("counts", func(t *testing.T) { testGroupsCounts(t, e, client) })
			t.Run("shards", func(t *testing.T) { testGroupsShards(t, e) })
			t.Run("schedule", func(t *testing.T) { testGroupsSchedule(t, client) })
			t.Run("wake", func(t *testing.T) { testGroupsWake(t, client) })
			t.Run("keyed", func(t *testing.T) { testGroupsKeyed(t, e) })
			t.Run("reclaim", func(t *testing.T) { testGroupsReclaim(t, e, client) })
			t.Run("upgrade", func(t *testing.T) { testGroupsUpgrade(t, e, client) })
		})
	}
}

// testGroupsFair is the scenario: 20,000 jobs of group big first
// (big),
// then 50 of each of ten other groups (single publishes, coalesced
// PublishEach and bulk): at least 475 of those 500 are among the first 600
// consumes. Within a group the order stays FIFO.
func testGroupsFair(t *testing.T, e *Engine, big int) {
	ns, q := "fair", "emails"
	// Big batches: the test is about consume, and miniredis's Lua is slow
	// per call.
	publishGroup(t, e, ns, q, "big", big, 2000)
	small := map[string]bool{}
	for g := 0; g < 10; g++ {
		name := fmt.Sprintf("shop-%d", g)
		small[name] = true
		switch g % 3 {
		case 0: // bulk
			publishGroup(t, e, ns, q, name, 50, engine.MaxBulkPublish)
		case 1: // coalesced
			reqs := make([]*engine.PublishRequest, 50)
			for i := range reqs {
				reqs[i] = &engine.PublishRequest{Namespace: ns, Queue: q, Group: name, Body: []byte(fmt.Sprintf("%s:%d", name, i)), Tries: 1}
			}
			ids, errs := make([]string, 50), make([]error, 50)
			e.PublishEach(bg, reqs, ids, errs)
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		default: // one by one
			for i := 0; i < 50; i++ {
				if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: name, Body: []byte(fmt.Sprintf("%s:%d", name, i)), Tries: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	jobs := consumeN(t, e, ns, q, 600, 25)
	if len(jobs) != 600 {
		t.Fatalf("consumed %d jobs, want 600", len(jobs))
	}
	n := 0
	next := map[string]int{}
	for _, j := range jobs {
		if small[j.Group] {
			n++
		}
		// FIFO within a group.
		if want := fmt.Sprintf("%s:%d", j.Group, next[j.Group]); string(j.Body) != want {
			t.Fatalf("job %s of group %q = %q, want %q", j.ID, j.Group, j.Body, want)
		}
		next[j.Group]++
	}
	t.Logf("%d of the 500 jobs of small groups among the first 600 consumes", n)
	if n < 475 {
		t.Fatalf("%d of the 500 jobs of small groups among the first 600 consumes, want >= 475", n)
	}
	// The rest of big is still there: peek, size and stats see it.
	if j, err := e.PeekQueue(bg, ns, q); err != nil || j.Group != "big" {
		t.Fatalf("peek after: %v %v", j, err)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != int64(big+500-600) {
		t.Fatalf("size after = %d, %v; want %d", n, err, big+500-600)
	}
	stats, err := e.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, st := range stats {
		if st.Namespace == ns && st.Queue == q {
			seen = true
			if st.Ready != int64(big+500-600) || st.OldestReady.IsZero() {
				t.Fatalf("stats %+v: want %d ready and the oldest one's time", st, big+500-600)
			}
		}
	}
	if !seen {
		t.Fatalf("stats: no %s/%s", ns, q)
	}
}

// testGroupsWeights: a group of weight 3 is served three jobs for each of
// a group of weight 1 (SetQueueConfig's GroupWeights: config field w:G).
func testGroupsWeights(t *testing.T, e *Engine, client redis.UniversalClient) {
	ns, q := "weights", "q"
	publishGroup(t, e, ns, q, "heavy", 60, engine.MaxBulkPublish)
	publishGroup(t, e, ns, q, "light", 60, engine.MaxBulkPublish)
	if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{GroupWeights: map[string]int{"heavy": 3}}); err != nil {
		t.Fatal(err)
	}
	if w, err := client.HGet(bg, e.names.get([3]string{ns, q}).config, "w:heavy").Result(); err != nil || w != "3" {
		t.Fatalf("config w:heavy = %q, %v", w, err)
	}
	jobs := consumeN(t, e, ns, q, 40, 7)
	count := map[string]int{}
	for _, j := range jobs {
		count[j.Group]++
	}
	if count["heavy"] != 30 || count["light"] != 10 {
		t.Fatalf("first 40 consumes: %v, want heavy 30 light 10 (%v)", count, groupsOf(jobs))
	}
}

// testGroupsLifecycle: priorities within a group, pause, a delayed grouped
// job, a retry (release and TTR expiry) and the dead letter and respawn
// keep a job's group, and it shows on peek and dead-letter listings; a
// bad group is refused.
func testGroupsLifecycle(t *testing.T, e *Engine, clock *testClock) {
	ns, q := "life", "q"
	for _, bad := range []string{"a/b", strings.Repeat("g", engine.MaxGroupLength+1), "sp ace"} {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: bad, Tries: 1}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("group %q: %v, want ErrInvalid", bad, err)
		}
		if _, err := e.PublishBatch(bg, []*engine.PublishRequest{{Namespace: ns, Queue: q, Group: bad, Tries: 1}}); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("bulk group %q: %v, want ErrInvalid", bad, err)
		}
	}
	// Priorities first within a group; groups still take turns.
	for i, p := range []int{0, 5, 9} {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "a", Priority: p, Body: []byte(fmt.Sprint("a", i)), Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "b", Body: []byte("b0"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("d0"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	// Paused: nothing.
	if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if jobs := consumeN(t, e, ns, q, 5, 5); len(jobs) != 0 {
		t.Fatalf("paused queue gave %d jobs", len(jobs))
	}
	if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{Paused: false}); err != nil {
		t.Fatal(err)
	}
	jobs := consumeN(t, e, ns, q, 5, 5)
	var bodies []string
	for _, j := range jobs {
		bodies = append(bodies, string(j.Body))
	}
	// Groups join the rotation in the order they became non-empty: a and
	// b on publish, the default group ('') at its first consume.
	if got := strings.Join(bodies, " "); got != "a2 b0 d0 a1 a0" {
		t.Fatalf("order %q, want %q", got, "a2 b0 d0 a1 a0")
	}
	for _, j := range jobs {
		if err := e.Ack(bg, ns, q, j.ID, j.Receipt); err != nil {
			t.Fatal(err)
		}
	}

	// A delayed grouped job comes back to its group; so does a released
	// one and one whose TTR expired; then it dies and is respawned.
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "late", Body: []byte("x"), Tries: 3, Delay: time.Minute, TTL: time.Hour,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := e.PeekJob(bg, ns, q, id); err != nil || j.Group != "late" || j.State != engine.StateDelayed || string(j.Body) != "x" {
		t.Fatalf("peek delayed: %+v %v", j, err)
	}
	clock.Add(2 * time.Minute)
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	take := func(what string) *engine.Job {
		t.Helper()
		jobs := consumeN(t, e, ns, q, 1, 1)
		if len(jobs) != 1 || jobs[0].ID != id || jobs[0].Group != "late" || string(jobs[0].Body) != "x" || jobs[0].TraceParent == "" {
			t.Fatalf("%s: %v", what, jobs)
		}
		return jobs[0]
	}
	j := take("delayed job made ready")
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: id, Receipt: j.Receipt}); err != nil {
		t.Fatal(err)
	}
	take("released job")
	clock.Add(61 * time.Minute)
	if _, err := e.PumpOnce(bg); err != nil { // TTR expired: retried
		t.Fatal(err)
	}
	take("job whose TTR expired")
	clock.Add(61 * time.Minute)
	if _, err := e.PumpOnce(bg); err != nil { // no try left: dead
		t.Fatal(err)
	}
	dead, err := e.ListDeadLetter(bg, ns, q, 0, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != id || dead[0].Group != "late" {
		t.Fatalf("dead letter: %v %v", dead, err)
	}
	if n, err := e.RespawnDeadLetter(bg, ns, q, 10, time.Hour); err != nil || n != 1 {
		t.Fatalf("respawn: %d %v", n, err)
	}
	j = take("respawned job")
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: id, Receipt: j.Receipt}); err != nil {
		t.Fatal(err)
	}
	if j, err := e.PeekJob(bg, ns, q, id); err != nil || j.State != engine.StateDead || j.Group != "late" {
		t.Fatalf("dead again: %+v %v", j, err)
	}
	if err := e.RespawnDeadJob(bg, ns, q, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	j = take("job respawned by ID")
	if err := e.Ack(bg, ns, q, id, j.Receipt); err != nil {
		t.Fatal(err)
	}
	if jobs := consumeN(t, e, ns, q, 1, 1); len(jobs) != 0 {
		t.Fatalf("left: %v", jobs)
	}
}

// testGroupsUngrouped: a queue without groups stores the same bytes as
// before and has no group key.
func testGroupsUngrouped(t *testing.T, e *Engine, client redis.UniversalClient) {
	ns, q := "plain", "q"
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("body"), Tries: 2, Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	qn := e.names.get([3]string{ns, q})
	v, err := client.Get(bg, qn.jobPrefix+id).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if want := newValue(true, 2, 3, 0, "", "", []byte("body")); string(v) != string(want) {
		t.Fatalf("value %q, want %q", v, want)
	}
	if grp, _ := client.HGet(bg, qn.config, "grp").Result(); grp != "" {
		t.Fatalf("ungrouped queue tracked: grp = %q", grp)
	}
	if n, err := client.Exists(bg, groupKeyPrefix(ns, q)+"r", groupKeyPrefix(ns, q)+"m").Result(); err != nil || n != 0 {
		t.Fatalf("ungrouped queue has a rotation: %d %v", n, err)
	}
	jobs := consumeN(t, e, ns, q, 2, 2)
	if len(jobs) != 1 || jobs[0].ID != id || jobs[0].Group != "" {
		t.Fatalf("consume: %v", jobs)
	}
}

// testGroupsCounts: Size, Stats and QueueGroups count the jobs of a
// queue's groups; Destroy deletes them and the group keys.
func testGroupsCounts(t *testing.T, e *Engine, client redis.UniversalClient) {
	ns, q := "counts", "q"
	publishGroup(t, e, ns, q, "x", 5, engine.MaxBulkPublish)
	publishGroup(t, e, ns, q, "y", 2, engine.MaxBulkPublish)
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "y", Priority: 4, Body: []byte("p"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("d"), Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 11 {
		t.Fatalf("size = %d, %v; want 11", n, err)
	}
	// The dashboard's ready list pages through the groups too.
	listed := map[string]int{}
	for cursor, pages := int64(0), 0; ; pages++ {
		if pages > 10 {
			t.Fatal("ready list does not end")
		}
		jobs, next, err := e.ListJobs(bg, ns, q, engine.ListReady, cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			listed[j.Group]++
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if listed[""] != 3 || listed["x"] != 5 || listed["y"] != 3 {
		t.Fatalf("ready list by group: %v, want '' 3, x 5, y 3", listed)
	}
	jobs := consumeN(t, e, ns, q, 4, 4) // one of each group and one more
	if got := strings.Join(groupsOf(jobs), ","); got != "x,y,,x" {
		t.Fatalf("consumed groups %q, want %q", got, "x,y,,x")
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 7 {
		t.Fatalf("size after 4 consumes = %d, %v; want 7", n, err)
	}
	stats, err := e.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range stats {
		if st.Namespace == ns && st.Queue == q {
			found = true
			if st.Ready != 7 || st.Timer != 4 {
				t.Fatalf("stats: %+v, want 7 ready, 4 in the timer", st)
			}
		}
	}
	if !found {
		t.Fatalf("stats: no %s/%s in %v", ns, q, stats)
	}
	if err := e.Ack(bg, ns, q, jobs[0].ID, jobs[0].Receipt); err != nil {
		t.Fatal(err)
	}
	qg, err := e.QueueGroups(bg, ns, q, 2)
	if err != nil {
		t.Fatal(err)
	}
	// x: 5 published, y 3, '' 3; the consume order is x y '' x (the order
	// they joined), and the first (x) was ACKed: x 3+1, y 2+1, '' 2+1 (a
	// tie with y, by name).
	want := []engine.GroupStats{{Group: "x", Ready: 3, InFlight: 1, Weight: 1}, {Group: "", Ready: 2, InFlight: 1, Weight: 1}}
	if qg.InFlight != 3 || qg.Total != 3 || !qg.Truncated || len(qg.Groups) != 2 || qg.Groups[0] != want[0] || qg.Groups[1] != want[1] {
		t.Fatalf("QueueGroups = %+v, want in flight 3, total 3, truncated, groups %+v (consumed %v)", qg, want, groupsOf(jobs))
	}
	n, err := e.Destroy(bg, ns, q)
	if err != nil || n != 10 { // 7 ready, 3 in flight
		t.Fatalf("destroy = %d, %v; want 10", n, err)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 0 {
		t.Fatalf("size after destroy = %d, %v", n, err)
	}
	gp := groupKeyPrefix(ns, q)
	if n, err := client.Exists(bg, gp+"r", gp+"m", gp+"a", gp+"b", gp+"i", gp+"c", gp+"q:x", gp+"q:y", gp+"p:y").Result(); err != nil || n != 0 {
		t.Fatalf("%d group keys left after destroy (%v)", n, err)
	}
	if qg, err := e.QueueGroups(bg, ns, q, 10); err != nil || qg.Total != 0 || len(qg.Groups) != 0 || qg.InFlight != 0 {
		t.Fatalf("QueueGroups after destroy = %+v, %v", qg, err)
	}
}

// testGroupsShards: on a queue of 4 shards, each group's jobs are in one
// shard (single, coalesced and bulk publishes, a bulk of several groups),
// and consume is still fair.
func testGroupsShards(t *testing.T, e *Engine) {
	ns, q := "sharded", "hot"
	if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	shardOf := map[string]map[int]bool{}
	note := func(g, id string) {
		s, _ := engine.JobIDShard(id)
		if shardOf[g] == nil {
			shardOf[g] = map[int]bool{}
		}
		shardOf[g][s] = true
	}
	var mixed []*engine.PublishRequest
	for g := 0; g < 8; g++ {
		name := fmt.Sprintf("t%d", g)
		for i := 0; i < 3; i++ {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: name, Body: []byte(name), Tries: 1})
			if err != nil {
				t.Fatal(err)
			}
			note(name, id)
		}
		reqs := []*engine.PublishRequest{{Namespace: ns, Queue: q, Group: name, Body: []byte(name), Tries: 1}, {Namespace: ns, Queue: q, Group: name, Body: []byte(name), Tries: 1}}
		ids, err := e.PublishBatch(bg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			note(name, id)
		}
		ids, errs := make([]string, 2), make([]error, 2)
		e.PublishEach(bg, reqs, ids, errs)
		for k, id := range ids {
			if errs[k] != nil {
				t.Fatal(errs[k])
			}
			note(name, id)
		}
		mixed = append(mixed, &engine.PublishRequest{Namespace: ns, Queue: q, Group: name, Body: []byte(name), Tries: 1})
	}
	ids, err := e.PublishBatch(bg, mixed)
	if err != nil {
		t.Fatal(err)
	}
	for k, id := range ids {
		note(mixed[k].Group, id)
	}
	shards := map[int]bool{}
	for g, ss := range shardOf {
		if len(ss) != 1 {
			t.Fatalf("group %s in shards %v, want one", g, ss)
		}
		for s := range ss {
			if s != groupShard(g, 4) {
				t.Fatalf("group %s in shard %d, want %d", g, s, groupShard(g, 4))
			}
			shards[s] = true
		}
	}
	if len(shards) < 2 {
		t.Fatalf("8 groups in shards %v, want at least 2", shards)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 8*8 {
		t.Fatalf("size = %d, %v; want %d", n, err, 8*8)
	}
	qg, err := e.QueueGroups(bg, ns, q, 100)
	if err != nil || qg.Total != 8 {
		t.Fatalf("QueueGroups = %+v, %v; want 8 groups", qg, err)
	}
	// Every group served in the first 3 rounds of consumes.
	jobs := consumeN(t, e, ns, q, 24, 6)
	served := map[string]int{}
	for _, j := range jobs {
		served[j.Group]++
	}
	if len(jobs) != 24 || len(served) != 8 {
		t.Fatalf("24 consumes served %v", served)
	}
}

// testGroupsSchedule: a schedule's template may carry a group; its ticks'
// jobs are in it.
func testGroupsSchedule(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 1)
	e := es[0]
	if _, err := e.PutSchedule(bg, &engine.Schedule{Namespace: "ns", Queue: "gq", Name: "bad", Spec: "@every 1s", Tries: 1, Group: "no/slash"}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("bad group: %v, want ErrInvalid", err)
	}
	s, err := e.PutSchedule(bg, &engine.Schedule{Namespace: "ns", Queue: "gq", Name: "tick", Spec: "@every 1s", Tries: 1, Body: []byte("t"), Group: "tenant-a"})
	if err != nil || s.Group != "tenant-a" {
		t.Fatalf("put: %+v %v", s, err)
	}
	if got, err := e.GetSchedule(bg, "ns", "gq", "tick"); err != nil || got.Group != "tenant-a" {
		t.Fatalf("get: %+v %v", got, err)
	}
	clock.Add(1500 * time.Millisecond)
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	jobs := drainQueue(t, e, "gq")
	if len(jobs) == 0 {
		t.Fatal("no tick fired")
	}
	for _, j := range jobs {
		if j.Group != "tenant-a" || string(j.Body) != "t" {
			t.Fatalf("tick job %+v, want group tenant-a", j)
		}
	}
	// Without a group again: the field goes.
	if s, err := e.PutSchedule(bg, &engine.Schedule{Namespace: "ns", Queue: "gq", Name: "tick", Spec: "@every 1s", Tries: 1}); err != nil || s.Group != "" {
		t.Fatalf("put without group: %+v %v", s, err)
	}
}

// testGroupsWake: a consumer waiting on a tracked queue with nothing ready
// gets a grouped job published meanwhile at once, not at its timeout.
func testGroupsWake(t *testing.T, client redis.UniversalClient) {
	// The sweep is an hour long, so that only the publish's message can
	// wake the consumer before its timeout (as TestInstancesSharePool).
	e, err := New(bg, client, Options{Now: newTestClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	e.waiters.sweepEvery = time.Hour
	ctx, cancel := context.WithCancel(bg)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	ns, q := "wake", "q"
	publishGroup(t, e, ns, q, "first", 1, 1)
	if jobs := consumeN(t, e, ns, q, 2, 2); len(jobs) != 1 {
		t.Fatalf("consume: %v", jobs)
	}
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: time.Minute, Timeout: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	time.Sleep(100 * time.Millisecond) // the consumer waits (or, if not yet, finds the job)
	start := time.Now()
	publishGroup(t, e, ns, q, "second", 1, 1)
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].Group != "second" {
			t.Fatalf("woken consume: %v", jobs)
		}
		t.Logf("woken %v after the publish", time.Since(start))
	case <-time.After(8 * time.Second):
		t.Fatal("waiting consumer not woken by a grouped publish")
	}
}

// testGroupsReclaim: the reclaimer cuts the entries of gone jobs at the
// consume ends of a queue's groups, without a consumer; the count gn and
// the rotation follow.
func testGroupsReclaim(t *testing.T, e *Engine, client redis.UniversalClient) {
	ns, q := "reclaim", "q"
	publishGroup(t, e, ns, q, "gone", 5, engine.MaxBulkPublish)
	publishGroup(t, e, ns, q, "kept", 2, engine.MaxBulkPublish)
	qn := e.names.get([3]string{ns, q})
	gp := groupKeyPrefix(ns, q)
	es, err := client.LRange(bg, gp+"q:gone", 0, -1).Result()
	if err != nil || len(es) != 5 {
		t.Fatalf("group list: %d entries, %v", len(es), err)
	}
	for _, en := range es { // the jobs go (as by their TTL); their entries stay
		_, id, err := unpackEntry(en)
		if err != nil {
			t.Fatal(err)
		}
		if err := client.Del(bg, qn.jobPrefix+id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(bg, client, Options{Now: newTestClock().Now}) // a reclaim state of its own
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.ReclaimOnce(bg)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(bg, gp+"q:gone").Result(); err != nil || n != 0 {
		t.Fatalf("stale group list left after reclaim (%+v): %d %v", st, n, err)
	}
	if rot, err := client.LRange(bg, gp+"r", 0, -1).Result(); err != nil || slices.Contains(rot, "gone") {
		t.Fatalf("empty group still in the rotation: %q %v", rot, err)
	}
	if _, err := client.HGet(bg, gp+"m", "gone").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("empty group still a member of the rotation: %v", err)
	}
	if n, err := e.Size(bg, ns, q); err != nil || n != 2 {
		t.Fatalf("size after reclaim = %d, %v; want 2", n, err)
	}
	if jobs := consumeN(t, e, ns, q, 3, 3); len(jobs) != 2 || jobs[0].Group != "kept" {
		t.Fatalf("consume after reclaim: %v", jobs)
	}
}

// testGroupsKeyed: a publish with an idempotency key or a caller's ID, and
// a re-publish that replaces a job, put grouped jobs in their group.
func testGroupsKeyed(t *testing.T, e *Engine) {
	ns, q := "keyed", "q"
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "k", Key: "order-1", Body: []byte("v1"), Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "k", Key: "order-1", Body: []byte("v1"), Tries: 1}); !errors.Is(err, engine.ErrKeyExists) || again != id {
		t.Fatalf("keyed again: %q %v, want %q and ErrKeyExists", again, err, id)
	}
	// Re-publish: the new job replaces the first, in its group.
	id2, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "k", Replaces: id, Body: []byte("v2"), Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	own := engine.NewJobID(time.Now(), 0, false)
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Group: "other", ID: own, Body: []byte("own"), Tries: 1}); err != nil {
		t.Fatal(err)
	}
	jobs := consumeN(t, e, ns, q, 3, 3)
	got := map[string]string{}
	for _, j := range jobs {
		got[j.ID] = j.Group + ":" + string(j.Body)
	}
	if len(jobs) != 2 || got[id2] != "k:v2" || got[own] != "other:own" {
		t.Fatalf("consumed %v, want %s k:v2 and %s other:own", got, id2, own)
	}
}

// testGroupsUpgrade: groups that servers of the layout before (the
// rotation as the sorted set g/…/a) joined, unblocked or joined a second
// time are served by this version, each once a round, and the old
// rotation goes (a rolling upgrade; doc/design.md).
func testGroupsUpgrade(t *testing.T, e *Engine, client redis.UniversalClient) {
	ns, q := "upg", "q"
	for _, g := range []string{"both", "new", "old", "freed"} {
		publishGroup(t, e, ns, q, g, 3, 3)
	}
	gp := groupKeyPrefix(ns, q)
	p := client.TxPipeline()
	// old: joined by an older server only (its first job published there).
	p.LRem(bg, gp+"r", 1, "old")
	p.HDel(bg, gp+"m", "old")
	// both: in both rotations.
	// freed: blocked by this version, unblocked by an older server (out of
	// the blocked set, joined to the old rotation).
	p.LRem(bg, gp+"r", 1, "freed")
	p.HSet(bg, gp+"m", "freed", -1)
	p.ZAdd(bg, gp+"a", redis.Z{Score: 1, Member: "old"}, redis.Z{Score: 2, Member: "both"}, redis.Z{Score: 3, Member: "freed"})
	if _, err := p.Exec(bg); err != nil {
		t.Fatal(err)
	}
	qg, err := e.QueueGroups(bg, ns, q, 10)
	if err != nil || qg.Total != 4 {
		t.Fatalf("QueueGroups before = %+v, %v; want 4 groups", qg, err)
	}
	jobs := consumeN(t, e, ns, q, 13, 4)
	if len(jobs) != 12 {
		t.Fatalf("consumed %d jobs, want 12", len(jobs))
	}
	// Each group once a round: both and new from the rotation, then old
	// and freed moved from the old one (both only once).
	for r := 0; r < 3; r++ {
		if got := strings.Join(groupsOf(jobs[4*r:4*r+4]), ","); got != "both,new,old,freed" {
			t.Fatalf("round %d: groups %q, want both,new,old,freed", r, got)
		}
	}
	if n, err := client.Exists(bg, gp+"a", gp+"r", gp+"m").Result(); err != nil || n != 0 {
		t.Fatalf("%d rotation keys left once every group is empty (%v)", n, err)
	}
}
