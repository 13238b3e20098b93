package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// limitsEngine runs an engine on client whose sweep never rescues a
// waiter (only a wake-up message does) and whose clock the test moves.
func limitsEngine(t *testing.T, client redis.UniversalClient, clock *testClock) *Engine {
	t.Helper()
	e, err := New(context.Background(), client, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.waiters.sweepEvery = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

// inFlightCounts returns the in-flight records of queue ns/q: HLEN of
// its gp..'i' and the default group's count in gp..'c'.
func inFlightCounts(t *testing.T, client redis.UniversalClient, ns, q string) (records, dflt int64) {
	t.Helper()
	gp := groupKeyPrefix(ns, q)
	n, err := client.HLen(bg, gp+"i").Result()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.HGet(bg, gp+"c", "").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	d, _ := strconv.ParseInt(c, 10, 64)
	return n, d
}

// waitUntil polls cond until it holds, failing after a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waiting reports how many consumers wait on queue ns/q's ready channel.
func waiting(e *Engine, ns, q string) int {
	e.waiters.mu.Lock()
	defer e.waiters.mu.Unlock()
	st := e.waiters.chans[readyChannel(ns, q)]
	if st == nil {
		return 0
	}
	return st.waiting.Len()
}

// TestInFlightLimits: on miniredis, a real Redis and the cluster, a queue
// with max_in_flight 5 and 20 consumers hands out exactly 5 jobs; each
// path where a job leaves flight frees exactly one slot; a consume
// waiting on the limited queue is woken by an ACK (the sweep is off), and
// the limited queue is known empty meanwhile rather than looked at again
// and again; group_max_in_flight 2 holds 2 jobs of each of three groups
// and the default one, and the ACK of a blocked group's job wakes a
// waiting consume with that group's next job, and raising the limit
// frees the blocked groups; the counts are exact after the mix, and
// Destroy drops them.
func TestInFlightLimits(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			clock := newTestClock()
			e := limitsEngine(t, client, clock)
			const ns, q = "lim", "q"
			const ttr = 30 * time.Second
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{MaxInFlight: 5}); err != nil {
				t.Fatal(err)
			}
			if cfg, err := e.QueueConfig(bg, ns, q); err != nil || cfg.MaxInFlight != 5 {
				t.Fatalf("QueueConfig: %+v, %v; want max_in_flight 5", cfg, err)
			}
			pub := func(r engine.PublishRequest) string {
				t.Helper()
				r.Namespace, r.Queue = ns, q
				if r.Tries == 0 {
					r.Tries = 3
				}
				id, err := e.Publish(bg, &r)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			for i := range 20 {
				pub(engine.PublishRequest{Body: []byte(fmt.Sprint("job", i))})
			}

			// 20 consumers at once, each holding what it gets.
			var mu sync.Mutex
			var held []*engine.Job
			var wg sync.WaitGroup
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: ttr})
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					held = append(held, jobs...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			if len(held) != 5 {
				t.Fatalf("20 consumers got %d jobs, want exactly 5 (max_in_flight)", len(held))
			}
			check := func(when string, want int64) {
				t.Helper()
				if n, d := inFlightCounts(t, client, ns, q); n != want || d != want {
					t.Fatalf("%s: %d in-flight records, default group count %d; want %d", when, n, d, want)
				}
			}
			check("5 held", 5)
			consume := func(count int) []*engine.Job {
				t.Helper()
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: count, TTR: ttr})
				if err != nil {
					t.Fatal(err)
				}
				return jobs
			}
			if jobs := consume(10); len(jobs) != 0 {
				t.Fatalf("a batch consume at the limit got %d jobs", len(jobs))
			}

			// A consumer waits on the limited queue: the look that found
			// it limited marks it known empty (no spinning), and the
			// ACK's wake-up (not the sweep: it is off) brings it a job.
			got := make(chan []*engine.Job, 1)
			go func() {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: ttr, Timeout: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- jobs
			}()
			waitUntil(t, "the consumer to wait", func() bool { return waiting(e, ns, q) == 1 })
			waitUntil(t, "the limited queue to be known empty", func() bool { return e.waiters.knownEmpty(ns, []string{q}) })
			start := time.Now()
			if err := e.Ack(bg, ns, q, held[0].ID, held[0].Receipt); err != nil {
				t.Fatal(err)
			}
			select {
			case jobs := <-got:
				if len(jobs) != 1 {
					t.Fatalf("the waiting consumer got %d jobs after the ACK, want 1", len(jobs))
				}
				t.Logf("woken %v after the ACK", time.Since(start))
				held[0] = jobs[0]
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting consumer was not woken by the ACK")
			}
			check("after the ACK and the woken consume", 5)

			// frees runs one way out of flight of held[i] (a job in
			// flight), which must free exactly one slot: the next
			// consume gets exactly one job, which takes held[i]'s place.
			frees := func(what string, i int, out func(j *engine.Job)) {
				t.Helper()
				out(held[i])
				check("after "+what, 4)
				jobs := consume(10)
				if len(jobs) != 1 {
					t.Fatalf("after %s: a consume got %d jobs, want 1", what, len(jobs))
				}
				held[i] = jobs[0]
				check("after "+what+" and a consume", 5)
			}
			frees("an ACK without receipt (Delete)", 1, func(j *engine.Job) {
				if err := e.Delete(bg, ns, q, j.ID); err != nil {
					t.Fatal(err)
				}
			})
			frees("DeleteEach", 2, func(j *engine.Job) {
				errs := make([]error, 1)
				e.DeleteEach(bg, []engine.JobRef{{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}}, errs)
				if errs[0] != nil {
					t.Fatal(errs[0])
				}
			})
			frees("a release to ready", 3, func(j *engine.Job) {
				if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, KeepTry: true}); err != nil {
					t.Fatal(err)
				}
			})
			frees("a release to delayed", 4, func(j *engine.Job) {
				if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, Delay: 2 * time.Hour}); err != nil {
					t.Fatal(err)
				}
			})

			// Empty the queue (its ready jobs; the delayed one stays
			// delayed), then take the other ways out one job at a time.
			for _, j := range held {
				if err := e.Delete(bg, ns, q, j.ID); err != nil {
					t.Fatal(err)
				}
			}
			for {
				jobs := consume(10)
				if len(jobs) == 0 {
					break
				}
				for _, j := range jobs {
					if err := e.Delete(bg, ns, q, j.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			check("the ready jobs drained", 0)
			// one publishes r, consumes it (the only job: it must come),
			// runs out and checks that its slot is free.
			one := func(what string, r engine.PublishRequest, out func(j *engine.Job)) {
				t.Helper()
				pub(r)
				jobs := consume(10)
				if len(jobs) != 1 || string(jobs[0].Body) != string(r.Body) {
					t.Fatalf("%s: consume got %d jobs, want %q alone", what, len(jobs), r.Body)
				}
				check(what+": in flight", 1)
				out(jobs[0])
				check("after "+what, 0)
			}
			pump := func() {
				t.Helper()
				clock.Add(ttr + time.Second)
				if _, err := e.PumpOnce(bg); err != nil {
					t.Fatal(err)
				}
			}
			one("a job expired in flight (pump: gone entry)", engine.PublishRequest{Body: []byte("gone")}, func(j *engine.Job) {
				// What its TTL running out does: the key is gone.
				if err := client.Del(bg, jobKey(ns, q, j.ID)).Err(); err != nil {
					t.Fatal(err)
				}
				pump()
			})
			one("a job expired in flight (reclaimer: timer scan)", engine.PublishRequest{Body: []byte("reclaimed")}, func(j *engine.Job) {
				if err := client.Del(bg, jobKey(ns, q, j.ID)).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := e.ReclaimOnce(bg); err != nil {
					t.Fatal(err)
				}
			})
			one("a TTR expiry (pump: retry)", engine.PublishRequest{Body: []byte("retry")}, func(j *engine.Job) { pump() })
			// The retried job is ready again: its next delivery's ACK
			// frees its slot too.
			if jobs := consume(10); len(jobs) != 1 || string(jobs[0].Body) != "retry" {
				t.Fatalf("consume: %d jobs, want the retried job", len(jobs))
			} else {
				check("the retried job in flight", 1)
				if err := e.Ack(bg, ns, q, jobs[0].ID, jobs[0].Receipt); err != nil {
					t.Fatal(err)
				}
				check("after the retried job's ACK", 0)
			}
			one("a TTR expiry to the dead letter (pump)", engine.PublishRequest{Tries: 1, Body: []byte("dies")}, func(j *engine.Job) { pump() })
			one("a nack to the dead letter", engine.PublishRequest{Tries: 1, Body: []byte("nacked")}, func(j *engine.Job) {
				if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}); err != nil {
					t.Fatal(err)
				}
			})
			if n, err := e.DeadLetterSize(bg, ns, q); err != nil || n != 2 {
				t.Fatalf("dead letter: %d, %v; want 2 (dies, nacked)", n, err)
			}
			one("CancelKey", engine.PublishRequest{Body: []byte("cancelled"), Key: "k1"}, func(j *engine.Job) {
				if _, err := e.CancelKey(bg, ns, q, "k1"); err != nil {
					t.Fatal(err)
				}
			})
			one("a re-publish that replaces it", engine.PublishRequest{Body: []byte("replaced")}, func(j *engine.Job) {
				pub(engine.PublishRequest{Body: []byte("replacement"), Replaces: j.ID})
			})
			replacement := consume(10)
			if len(replacement) != 1 || string(replacement[0].Body) != "replacement" {
				t.Fatalf("consume: %d jobs, want the replacement", len(replacement))
			}
			check("the replacement in flight", 1)

			// group_max_in_flight 2 with three groups and the default
			// one: 2 each, whatever the consumers ask for.
			if err := e.Delete(bg, ns, q, replacement[0].ID); err != nil {
				t.Fatal(err)
			}
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{GroupMaxInFlight: 2}); err != nil {
				t.Fatal(err)
			}
			groups := []string{"ga", "gb", "gc", ""}
			for i := range 4 {
				for _, g := range groups {
					pub(engine.PublishRequest{Body: []byte(fmt.Sprint(g, i)), Group: g})
				}
			}
			perGroup := func(when string) map[string]int {
				t.Helper()
				c, err := client.HGetAll(bg, groupKeyPrefix(ns, q)+"c").Result()
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]int{}
				for g, v := range c {
					n, _ := strconv.Atoi(v)
					out[g] = n
				}
				return out
			}
			var inGroups []*engine.Job
			for range 3 {
				inGroups = append(inGroups, consume(10)...)
			}
			if len(inGroups) != 8 {
				t.Fatalf("group_max_in_flight 2, 4 groups: %d jobs delivered, want 8", len(inGroups))
			}
			for _, g := range groups {
				if n := perGroup("at the group limit")[g]; n != 2 {
					t.Fatalf("group %q: %d in flight, want 2 (%v)", g, n, perGroup(""))
				}
			}
			if n, _ := inFlightCounts(t, client, ns, q); n != 8 {
				t.Fatalf("%d in-flight records, want 8", n)
			}
			// A consumer waits; the ACK of a job of group gb wakes it
			// with gb's next job.
			go func() {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: ttr, Timeout: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- jobs
			}()
			waitUntil(t, "the consumer to wait on the blocked groups", func() bool { return waiting(e, ns, q) == 1 })
			var ackB *engine.Job
			for _, j := range inGroups {
				if j.Group == "gb" {
					ackB = j
				}
			}
			if ackB == nil {
				t.Fatal("no job of group gb delivered")
			}
			start = time.Now()
			if err := e.Ack(bg, ns, q, ackB.ID, ackB.Receipt); err != nil {
				t.Fatal(err)
			}
			var woken []*engine.Job
			select {
			case jobs := <-got:
				if len(jobs) != 1 || jobs[0].Group != "gb" {
					t.Fatalf("the waiting consumer got %d jobs after gb's ACK, want one of gb", len(jobs))
				}
				woken = jobs
				t.Logf("woken %v after the ACK of a blocked group's job", time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting consumer was not woken by the ACK of a blocked group's job")
			}
			if n, _ := inFlightCounts(t, client, ns, q); n != 8 {
				t.Fatalf("after the mix: %d in-flight records, want 8", n)
			}
			sum := 0
			for _, n := range perGroup("after the mix") {
				sum += n
			}
			if sum != 8 {
				t.Fatalf("after the mix: the groups' counts add up to %d, want 8", sum)
			}
			// Raising group_max_in_flight to 3 frees the blocked groups
			// at once: one more job of each.
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{MaxInFlight: 20, GroupMaxInFlight: 3}); err != nil {
				t.Fatal(err)
			}
			raised := consume(10)
			if len(raised) != 4 {
				t.Fatalf("group_max_in_flight raised to 3: consume got %d jobs, want 4 (one per group)", len(raised))
			}
			for _, g := range groups {
				if n := perGroup("at the raised group limit")[g]; n != 3 {
					t.Fatalf("group %q: %d in flight, want 3 (%v)", g, n, perGroup(""))
				}
			}
			// Lowering it to 1 gives nothing (each group holds 3: consume
			// reserves a slot, finds the group over its limit and blocks
			// it, the counts unchanged); gb's jobs leave flight one by
			// one, and only the third ACK takes it under the limit.
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{MaxInFlight: 20, GroupMaxInFlight: 1}); err != nil {
				t.Fatal(err)
			}
			if v, err := client.HExists(bg, configKey(ns, q), "unb").Result(); err != nil || v {
				t.Fatalf("after SetQueueConfig the config still marks the blocked set as unsettled (unb): %v, %v", v, err)
			}
			if jobs := consume(10); len(jobs) != 0 {
				t.Fatalf("group_max_in_flight lowered to 1: consume got %d jobs, want 0", len(jobs))
			}
			for _, g := range groups {
				if n := perGroup("over the lowered group limit")[g]; n != 3 {
					t.Fatalf("group %q: %d in flight after consumes over the lowered limit, want 3 (%v)", g, n, perGroup(""))
				}
			}
			var gb []*engine.Job
			for _, j := range append(append(append([]*engine.Job{}, inGroups...), woken...), raised...) {
				if j.Group == "gb" && j != ackB {
					gb = append(gb, j)
				}
			}
			if len(gb) != 3 {
				t.Fatalf("%d jobs of gb in flight, want 3", len(gb))
			}
			pub(engine.PublishRequest{Body: []byte("gb 4"), Group: "gb"})
			for i, j := range gb {
				if err := e.Ack(bg, ns, q, j.ID, j.Receipt); err != nil {
					t.Fatal(err)
				}
				jobs := consume(10)
				if want := map[bool]int{true: 1, false: 0}[i == 2]; len(jobs) != want || (want == 1 && jobs[0].Group != "gb") {
					t.Fatalf("after %d ACKs of gb at group_max_in_flight 1: consume got %d jobs, want %d of gb", i+1, len(jobs), want)
				}
			}
			if n := perGroup("gb back under the limit")["gb"]; n != 1 {
				t.Fatalf("group gb: %d in flight, want 1 (%v)", n, perGroup(""))
			}

			// Destroy drops the records.
			if _, err := e.Destroy(bg, ns, q); err != nil {
				t.Fatal(err)
			}
			check("after Destroy", 0)
			if n, err := client.Exists(bg, groupKeyPrefix(ns, q)+"b").Result(); err != nil || n != 0 {
				t.Fatalf("after Destroy the blocked set exists: %d, %v", n, err)
			}
		})
	}
}

// TestQueueConfigLimits: SetQueueConfig validates the limits and weights,
// splits max_in_flight over a sharded queue's shards (refusing a limit
// below the shards), whose consumes then hand out exactly the limit,
// marks the queue tracked, and QueueConfig reads them
// back; an untracked queue's ACK leaves no group key.
func TestQueueConfigLimits(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngine(t, client, newTestClock())
	const ns = "cfg"
	for _, tc := range []struct {
		name string
		cfg  engine.QueueConfig
	}{
		{"negative max_in_flight", engine.QueueConfig{MaxInFlight: -1}},
		{"negative group_max_in_flight", engine.QueueConfig{GroupMaxInFlight: -1}},
		{"weight 0", engine.QueueConfig{GroupWeights: map[string]int{"a": 0}}},
		{"weight too big", engine.QueueConfig{GroupWeights: map[string]int{"a": engine.MaxGroupWeight + 1}}},
		{"bad group name", engine.QueueConfig{GroupWeights: map[string]int{"a b": 1}}},
		{"empty group name", engine.QueueConfig{GroupWeights: map[string]int{"": 1}}},
		{"limit below the shards", engine.QueueConfig{Shards: 4, MaxInFlight: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.SetQueueConfig(bg, ns, "bad", tc.cfg); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("SetQueueConfig(%+v): %v, want ErrInvalid", tc.cfg, err)
			}
		})
	}

	want := engine.QueueConfig{Shards: 3, MaxInFlight: 7, GroupMaxInFlight: 3, GroupWeights: map[string]int{"big": 1, "vip": 5}}
	if err := e.SetQueueConfig(bg, ns, "sh", want); err != nil {
		t.Fatal(err)
	}
	got, err := e.QueueConfig(bg, ns, "sh")
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxInFlight != 7 || got.GroupMaxInFlight != 3 || got.Shards != 3 || len(got.GroupWeights) != 2 || got.GroupWeights["vip"] != 5 || got.GroupWeights["big"] != 1 {
		t.Fatalf("QueueConfig: %+v, want %+v", got, want)
	}
	sum := 0
	for i := range 3 {
		h, err := client.HGetAll(bg, configKey(ns, shardName("sh", i))).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(h["mif"])
		// Limits and weights alone do not put a queue through the rotation
		// (grp): only its grouped publishes do.
		if n < 2 || n > 3 || h["grp"] != "" || h["gmif"] != "3" || h["w:vip"] != "5" {
			t.Fatalf("shard %d config %v: want mif 2 or 3, no grp, gmif 3, w:vip 5", i, h)
		}
		sum += n
	}
	if sum != 7 {
		t.Fatalf("the shards' max_in_flight add up to %d, want 7", sum)
	}
	// The shards together hand out exactly 7 (each shard's default
	// group is limited to 3 too: the default group spreads over the
	// shards).
	for i := range 30 {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "sh", Tries: 1, Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	delivered := 0
	for range 5 {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"sh"}, Count: 10, TTR: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		delivered += len(jobs)
	}
	if delivered != 7 {
		t.Fatalf("a sharded queue with max_in_flight 7 delivered %d, want 7", delivered)
	}
	// The weights are replaced, the limits removed.
	if err := e.SetQueueConfig(bg, ns, "sh", engine.QueueConfig{GroupWeights: map[string]int{"big": 3}}); err != nil {
		t.Fatal(err)
	}
	got, err = e.QueueConfig(bg, ns, "sh")
	if err != nil || got.MaxInFlight != 0 || got.GroupMaxInFlight != 0 || len(got.GroupWeights) != 1 || got.GroupWeights["big"] != 3 {
		t.Fatalf("QueueConfig after the change: %+v, %v", got, err)
	}
	if h, _ := client.HGetAll(bg, configKey(ns, "sh")).Result(); h["mif"] != "" || h["w:vip"] != "" || h["w:big"] != "3" {
		t.Fatalf("config after the change: %v", h)
	}

	// An untracked queue: consume and ACK write no group key.
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "plain", Tries: 1, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"plain"}, Count: 1, TTR: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("consume: %d, %v", len(jobs), err)
	}
	if err := e.Ack(bg, ns, "plain", jobs[0].ID, jobs[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if keys := m.Keys(); func() bool {
		for _, k := range keys {
			if strings.HasPrefix(k, "g/") && strings.Contains(k, "plain") {
				return true
			}
		}
		return false
	}() {
		t.Fatalf("an untracked queue wrote group keys: %v", keys)
	}
}

// TestInFlightLimitConcurrent: 16 consumers (coalesced consumes) take,
// hold for a moment and ACK or release 150 jobs of a queue with
// max_in_flight 4 and group_max_in_flight 2 over three groups; a ledger
// of the jobs held (counted after the consume returns, uncounted before
// the ACK: never more than are in flight) never exceeds either limit,
// every job is ACKed once, and no slot is left taken.
func TestInFlightLimitConcurrent(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			e := startEngine(t, client, newTestClock())
			const ns, q, jobs = "limc", "q", 150
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{MaxInFlight: 4, GroupMaxInFlight: 2}); err != nil {
				t.Fatal(err)
			}
			groups := []string{"x", "y", "z"}
			reqs := make([]*engine.PublishRequest, jobs)
			for i := range reqs {
				reqs[i] = &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 5, Group: groups[i%3], Body: []byte(strconv.Itoa(i))}
			}
			if _, err := e.PublishBatch(bg, reqs); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			held, most := 0, 0
			perGroup := map[string]int{}
			acked := map[string]bool{}
			var wg sync.WaitGroup
			for c := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; ; n++ {
						mu.Lock()
						done := len(acked) == jobs
						mu.Unlock()
						if done {
							return
						}
						js, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: time.Minute, Timeout: 100 * time.Millisecond})
						if err != nil {
							t.Error(err)
							return
						}
						if len(js) == 0 {
							continue
						}
						j := js[0]
						mu.Lock()
						held++
						perGroup[j.Group]++
						most = max(most, held)
						if held > 4 || perGroup[j.Group] > 2 {
							t.Errorf("%d jobs held, %d of group %q: over the limits (4, 2)", held, perGroup[j.Group], j.Group)
						}
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						held--
						perGroup[j.Group]--
						mu.Unlock()
						if (c+n)%5 == 0 {
							if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt, KeepTry: true}); err != nil {
								t.Error(err)
							}
							continue
						}
						if err := e.Ack(bg, ns, q, j.ID, j.Receipt); err != nil {
							t.Error(err)
						}
						mu.Lock()
						if acked[j.ID] {
							t.Errorf("job %s ACKed twice", j.ID)
						}
						acked[j.ID] = true
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if n, d := inFlightCounts(t, client, ns, q); n != 0 || d != 0 {
				t.Fatalf("after every job was ACKed: %d in-flight records, %d in the default group; want 0", n, d)
			}
			if c, err := client.HLen(bg, groupKeyPrefix(ns, q)+"c").Result(); err != nil || c != 0 {
				t.Fatalf("after every job was ACKed: %d groups counted in flight, %v", c, err)
			}
			t.Logf("at most %d held at once", most)
			if most < 2 {
				t.Errorf("at most %d held at once: the consumers never overlapped", most)
			}
		})
	}
}

// TestLimitsCountJobsInFlight: limits set on a queue with jobs in flight
// (delivered before it was tracked) count them: recordInFlightScript
// records each in-flight job of the timer once, also when its windows
// cut a run of entries with one score (a batch consume's) and skip the
// delayed ones; and the limit then holds, freeing as those jobs leave.
func TestLimitsCountJobsInFlight(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngine(t, client, newTestClock())
	const ns = "pre"
	setup := func(q string) []*engine.Job {
		t.Helper()
		for i := range 8 {
			r := &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(strconv.Itoa(i))}
			if i >= 5 {
				r.Delay = time.Hour
			}
			if _, err := e.Publish(bg, r); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(fmt.Sprint("r", i))}); err != nil {
				t.Fatal(err)
			}
		}
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 5, TTR: time.Minute})
		if err != nil || len(jobs) != 5 {
			t.Fatalf("consume: %d, %v", len(jobs), err)
		}
		return jobs
	}

	// The script alone, two entries a window.
	setup("direct")
	if err := client.HSet(bg, configKey(ns, "direct"), "grp", "1").Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{timerKey(ns, "direct"), jobKeyPrefix(ns, "direct")}
	score, member, total, calls := "-inf", "", int64(0), 0
	for score != "" {
		res, err := recordInFlightScript.Run(bg, client, keys, score, member, 2).Slice()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := res[0].(int64)
		total += n
		score, _ = res[1].(string)
		member, _ = res[2].(string)
		if calls++; calls > 20 {
			t.Fatal("the cursor does not advance")
		}
	}
	if n, d := inFlightCounts(t, client, ns, "direct"); total != 5 || n != 5 || d != 5 {
		t.Fatalf("recorded %d, %d records, default group count %d; want 5 each", total, n, d)
	}

	// Through SetQueueConfig: max_in_flight 6 with 5 in flight leaves 1.
	held := setup("cfg")
	if err := e.SetQueueConfig(bg, ns, "cfg", engine.QueueConfig{MaxInFlight: 6}); err != nil {
		t.Fatal(err)
	}
	if n, _ := inFlightCounts(t, client, ns, "cfg"); n != 5 {
		t.Fatalf("%d in-flight records after the limit was set, want 5", n)
	}
	consume := func() int {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"cfg"}, Count: 10, TTR: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs)
	}
	if n := consume(); n != 1 {
		t.Fatalf("consume under max_in_flight 6 with 5 in flight: %d jobs, want 1", n)
	}
	if err := e.Ack(bg, ns, "cfg", held[0].ID, held[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if n := consume(); n != 1 {
		t.Fatalf("consume after the ACK of a job delivered before the limit: %d jobs, want 1", n)
	}
	// Setting the config again records nothing twice.
	if err := e.SetQueueConfig(bg, ns, "cfg", engine.QueueConfig{MaxInFlight: 6}); err != nil {
		t.Fatal(err)
	}
	if n, d := inFlightCounts(t, client, ns, "cfg"); n != 6 || d != 6 {
		t.Fatalf("%d in-flight records, default group count %d; want 6", n, d)
	}
}

// TestLimitsTracking: on miniredis, a real Redis and the cluster, only a
// queue with a limit records its jobs in flight (gp..'i', gp..'c'), and
// the records stay exact through the transitions: a grouped queue
// without limits writes none (the groups answer counts its jobs in flight
// from the timer); limits set with jobs out count them; removing them
// drops the records at once, and the frees of jobs taken while limited
// then drive no count below 0; limits set again count what is out. A
// queue without groups under group_max_in_flight blocks its default group
// without a rotation, and the ACK that frees a slot wakes a waiter.
func TestLimitsTracking(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			e := limitsEngine(t, client, newTestClock())
			const ns, q = "trk", "q"
			gp := groupKeyPrefix(ns, q)
			records := func() (int64, map[string]string) {
				t.Helper()
				n, err := client.HLen(bg, gp+"i").Result()
				if err != nil {
					t.Fatal(err)
				}
				c, err := client.HGetAll(bg, gp+"c").Result()
				if err != nil {
					t.Fatal(err)
				}
				return n, c
			}
			held := map[string]*engine.Job{}
			perGroup := func() map[string]int {
				m := map[string]int{}
				for _, j := range held {
					m[j.Group]++
				}
				return m
			}
			// exact checks the records against the jobs held.
			exact := func(when string) {
				t.Helper()
				n, c := records()
				want := perGroup()
				if n != int64(len(held)) || len(c) != len(want) {
					t.Fatalf("%s: %d records, counts %v; want %d, %v", when, n, c, len(held), want)
				}
				for g, k := range want {
					if c[g] != strconv.Itoa(k) {
						t.Fatalf("%s: counts %v, want %v", when, c, want)
					}
				}
			}
			consume := func(count int) int {
				t.Helper()
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: count, TTR: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range jobs {
					held[j.ID] = j
				}
				return len(jobs)
			}
			ack := func(n int) {
				t.Helper()
				for id, j := range held {
					if n == 0 {
						return
					}
					if err := e.Ack(bg, ns, q, j.ID, j.Receipt); err != nil {
						t.Fatal(err)
					}
					delete(held, id)
					n--
				}
			}
			for i := range 30 {
				r := &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(strconv.Itoa(i)), Group: []string{"x", "y", ""}[i%3]}
				if _, err := e.Publish(bg, r); err != nil {
					t.Fatal(err)
				}
			}

			// Groups without limits: no record, the in flight per group
			// from the timer.
			if n := consume(6); n != 6 {
				t.Fatalf("consume: %d jobs, want 6", n)
			}
			if n, err := client.Exists(bg, gp+"i", gp+"c").Result(); err != nil || n != 0 {
				t.Fatalf("a queue without limits recorded its jobs in flight: %d keys, %v", n, err)
			}
			qg, err := e.QueueGroups(bg, ns, q, 10)
			if err != nil || qg.InFlight != 6 || qg.Truncated {
				t.Fatalf("groups: %+v, %v; want 6 in flight", qg, err)
			}
			want := perGroup()
			for _, g := range qg.Groups {
				if g.InFlight != int64(want[g.Group]) {
					t.Fatalf("groups: %+v, want in flight %v", qg.Groups, want)
				}
			}

			// Limits set: the jobs out are counted, and the group limit holds.
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{MaxInFlight: 20, GroupMaxInFlight: 3}); err != nil {
				t.Fatal(err)
			}
			exact("limits set with 6 out")
			consume(20)
			if n := len(held); n != 9 {
				t.Fatalf("%d held under group_max_in_flight 3 over 3 groups, want 9", n)
			}
			exact("at the group limits")
			ack(2)
			exact("after 2 ACKs")

			// Limits removed with 7 out (taken while limited): the records
			// go at once; their frees count nothing.
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{}); err != nil {
				t.Fatal(err)
			}
			if n, err := client.Exists(bg, gp+"i", gp+"c", gp+"b").Result(); err != nil || n != 0 {
				t.Fatalf("limits removed: %d record keys left, %v", n, err)
			}
			ack(3)
			consume(4)
			if n, err := client.Exists(bg, gp+"i", gp+"c").Result(); err != nil || n != 0 {
				t.Fatalf("frees and consumes after the limits went recorded something: %d keys, %v", n, err)
			}

			// Set again: exactly what is out, and every free brings it down.
			if err := e.SetQueueConfig(bg, ns, q, engine.QueueConfig{GroupMaxInFlight: 4}); err != nil {
				t.Fatal(err)
			}
			exact("limits set again")
			consume(30)
			exact("limits set again and a consume")
			ack(len(held))
			if n, err := client.Exists(bg, gp+"i", gp+"c").Result(); err != nil || n != 0 {
				t.Fatalf("after every ACK: %d record keys, %v", n, err)
			}

			// A queue without groups: no rotation, its default group
			// blocked at group_max_in_flight and woken by an ACK.
			const pq = "plain"
			if err := e.SetQueueConfig(bg, ns, pq, engine.QueueConfig{GroupMaxInFlight: 2}); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: pq, Tries: 1, Body: []byte(strconv.Itoa(i))}); err != nil {
					t.Fatal(err)
				}
			}
			jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{pq}, Count: 5, TTR: time.Minute})
			if err != nil || len(jobs) != 2 {
				t.Fatalf("consume under group_max_in_flight 2: %d jobs, %v", len(jobs), err)
			}
			got := make(chan []*engine.Job, 1)
			go func() {
				js, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{pq}, Count: 1, TTR: time.Minute, Timeout: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- js
			}()
			waitUntil(t, "the consumer to wait", func() bool { return waiting(e, ns, pq) == 1 })
			if err := e.Ack(bg, ns, pq, jobs[0].ID, jobs[0].Receipt); err != nil {
				t.Fatal(err)
			}
			select {
			case js := <-got:
				if len(js) != 1 {
					t.Fatalf("the waiting consumer got %d jobs after the ACK, want 1", len(js))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting consumer was not woken by the ACK")
			}
			pgp := groupKeyPrefix(ns, pq)
			if n, err := client.Exists(bg, pgp+"a", pgp+"r", pgp+"m").Result(); err != nil || n != 0 {
				t.Fatalf("a queue without groups has a rotation: %d, %v", n, err)
			}
			if c, err := client.HGet(bg, pgp+"c", "").Result(); err != nil || c != "2" {
				t.Fatalf("default group count %q, %v; want 2", c, err)
			}
		})
	}
}
