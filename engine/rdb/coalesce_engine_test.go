package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// coalesceTiers are the servers the engine-level coalescing tests run on.
var coalesceTiers = []struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{
	{"miniredis", func(t *testing.T) redis.UniversalClient {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		return client
	}},
	{"redis", func(t *testing.T) redis.UniversalClient { return realClient(t) }},
}

// engineTiers are coalesceTiers and the shared 6-node cluster (flushed).
var engineTiers = append(coalesceTiers[:len(coalesceTiers):len(coalesceTiers)], struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}{"cluster", func(t *testing.T) redis.UniversalClient {
	c := redistest.SharedCluster(t)
	c.Flush(t)
	return c.Client(t)
}})

func TestCoalesceEngine(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			t.Run("roundtrip", func(t *testing.T) {
				e := startEngine(t, client, newTestClock())
				if e.pubs == nil || e.acks == nil || e.cons == nil {
					t.Fatal("coalescers off by default")
				}
				pubs, cons, acks := recordBatches(e.pubs), recordBatches(e.cons), recordBatches(e.acks)
				coalesceRoundTrip(t, e, client, "co", "q", 64, 50)
				for _, r := range []struct {
					name string
					rec  *batchRecorder
				}{{"publish", pubs}, {"consume", cons}, {"ack", acks}} {
					r.rec.mu.Lock()
					calls, batches, largest := r.rec.calls, r.rec.batches, r.rec.largest
					r.rec.mu.Unlock()
					t.Logf("%s: %d calls in %d batches, largest %d", r.name, calls, batches, largest)
					if largest < 2 || largest > coalesceMax {
						t.Errorf("%s: largest batch %d, want 2..%d (64 concurrent callers)", r.name, largest, coalesceMax)
					}
				}
			})
			t.Run("ackManyScript", func(t *testing.T) {
				testAckManyScript(t, startEngine(t, client, newTestClock()), client)
			})
			t.Run("noAutoPipeline", func(t *testing.T) {
				e := startEngineOpts(t, client, Options{Now: newTestClock().Now, NoAutoPipeline: true})
				if e.pubs != nil || e.acks != nil || e.cons != nil {
					t.Fatal("coalescers on with NoAutoPipeline")
				}
				coalesceRoundTrip(t, e, client, "nap", "q", 16, 20)
			})
		})
	}
}

// batchRecorder counts the batches a coalescer runs.
type batchRecorder struct {
	mu                      sync.Mutex
	calls, batches, largest int
}

// recordBatches wraps c's run function; call it before c is used.
func recordBatches[T any](c *coalescer[T]) *batchRecorder {
	r := &batchRecorder{}
	run := c.run
	c.run = func(ctx context.Context, batch []*batchCall[T]) {
		r.mu.Lock()
		r.calls += len(batch)
		r.batches++
		r.largest = max(r.largest, len(batch))
		r.mu.Unlock()
		run(ctx, batch)
	}
	return r
}

// coalesceRoundTrip publishes workers×per plain jobs to ns/q concurrently,
// consumes them one by one with workers consumers, and ACKs them all
// concurrently, checking every step.
func coalesceRoundTrip(t *testing.T, e *Engine, client redis.UniversalClient, ns, q string, workers, per int) {
	ctx := context.Background()
	total := workers * per

	// Publish.
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		ids[g] = make([]string, per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				id, err := e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(fmt.Sprintf("job-%d-%d", g, i))})
				if err != nil {
					t.Errorf("publish job-%d-%d: %v", g, i, err)
					return
				}
				ids[g][i] = id
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	bodyOf := make(map[string]string, total) // published ID → body
	for g := range ids {
		for i, id := range ids[g] {
			body := fmt.Sprintf("job-%d-%d", g, i)
			if id == "" {
				t.Fatalf("%s: empty ID", body)
			}
			if prev, dup := bodyOf[id]; dup {
				t.Fatalf("ID %s given to %s and %s", id, prev, body)
			}
			bodyOf[id] = body
		}
	}
	if n, err := e.Size(ctx, ns, q); err != nil || n != int64(total) {
		t.Fatalf("size after publish = %d, %v; want %d", n, err, total)
	}

	// Consume, one job per call, until the queue is empty.
	got := make([][]*engine.Job, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: 30 * time.Second})
				if err != nil {
					t.Errorf("consumer %d: %v", g, err)
					return
				}
				if len(jobs) == 0 {
					return
				}
				if len(jobs) > 1 {
					t.Errorf("consumer %d: %d jobs for Count 1", g, len(jobs))
				}
				got[g] = append(got[g], jobs...)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var all []*engine.Job
	seen := make(map[string]bool, total)
	receipts := make(map[string]string, total)
	for _, jobs := range got {
		for _, j := range jobs {
			all = append(all, j)
			want, ok := bodyOf[j.ID]
			switch {
			case !ok:
				t.Errorf("delivered unknown job %s (%q)", j.ID, j.Body)
			case seen[j.ID]:
				t.Errorf("job %s (%s) delivered twice", j.ID, want)
			case string(j.Body) != want:
				t.Errorf("job %s: body %q, want %q", j.ID, j.Body, want)
			}
			seen[j.ID] = true
			if j.Receipt == "" {
				t.Errorf("job %s: no receipt", j.ID)
			} else if other, dup := receipts[j.Receipt]; dup {
				t.Errorf("jobs %s and %s share receipt %s", other, j.ID, j.Receipt)
			}
			receipts[j.Receipt] = j.ID
		}
	}
	if len(seen) != total {
		missing := 0
		for id := range bodyOf {
			if !seen[id] {
				missing++
			}
		}
		t.Errorf("%d distinct jobs delivered, %d missing; want %d", len(seen), missing, total)
	}
	if t.Failed() {
		t.FailNow()
	}
	if n, err := e.Size(ctx, ns, q); err != nil || n != 0 {
		t.Fatalf("size after consume = %d, %v; want 0", n, err)
	}
	if n, err := client.ZCard(ctx, timerKey(ns, q)).Result(); err != nil || n != int64(total) {
		t.Fatalf("in-flight timer entries = %d, %v; want %d", n, err, total)
	}

	// ACK every job with its receipt, concurrently; then again.
	ackAll := func(check func(j *engine.Job, err error)) {
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := g; k < len(all); k += workers {
					check(all[k], e.Ack(ctx, ns, q, all[k].ID, all[k].Receipt))
				}
			}()
		}
		wg.Wait()
	}
	ackAll(func(j *engine.Job, err error) {
		if err != nil {
			t.Errorf("ack %s (%s): %v", j.ID, j.Body, err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	if n, err := e.Size(ctx, ns, q); err != nil || n != 0 {
		t.Errorf("size after ack = %d, %v; want 0", n, err)
	}
	if n, err := client.ZCard(ctx, timerKey(ns, q)).Result(); err != nil || n != 0 {
		t.Errorf("timer entries after ack = %d, %v; want 0", n, err)
	}
	if keys, err := client.Keys(ctx, jobKeyPrefix(ns, q)+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("job bodies after ack: %d (%v), want none", len(keys), err)
	}
	ackAll(func(j *engine.Job, err error) {
		if !errors.Is(err, engine.ErrJobNotFound) {
			t.Errorf("second ack of %s: %v, want ErrJobNotFound", j.ID, err)
		}
	})
	// lmstfy's ACK (no receipt) of an unknown job is not an error.
	if err := e.Ack(ctx, ns, q, "01M7YVBFN8AAS205RQ04000000", ""); err != nil {
		t.Errorf("ack without receipt of an unknown job: %v, want nil", err)
	}
	if err := e.Ack(ctx, ns, q, all[0].ID, ""); err != nil {
		t.Errorf("ack without receipt of an ACKed job: %v, want nil", err)
	}
}

// testAckManyScript calls ackManyScript directly on in-flight jobs.
func testAckManyScript(t *testing.T, e *Engine, client redis.UniversalClient) {
	ctx := context.Background()
	const ns, q = "ackmany", "q"
	for i := 0; i < 3; i++ {
		if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, Body: []byte(fmt.Sprint("b", i))}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 3, TTR: 30 * time.Second})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("consume: %d jobs, %v", len(jobs), err)
	}
	a, b, c := jobs[0], jobs[1], jobs[2]
	nonce := func(j *engine.Job) string {
		n, err := decodeReceipt(j.Receipt)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	wrong := []byte(nonce(a))
	wrong[7] ^= 0xff
	// ack runs the script on (id, nonce) pairs.
	ack := func(pairs ...string) []int64 {
		t.Helper()
		keys := []string{timerKey(ns, q)}
		var args []interface{}
		for i := 0; i < len(pairs); i += 2 {
			keys = append(keys, jobKey(ns, q, pairs[i]))
			args = append(args, pairs[i], pairs[i+1])
		}
		keys = append(keys, configKey(ns, q), usageKey(slotGroup(ns, q)))
		args = append(args, "PUBLISH", readyChannel(ns, q))
		codes, err := ackManyScript.Run(ctx, client, keys, args...).Int64Slice()
		if err != nil {
			t.Fatalf("ackManyScript %q: %v", pairs, err)
		}
		return codes
	}
	// present reports whether job j has its body and its timer entry.
	present := func(j *engine.Job) (body, timer bool) {
		n, err := client.Exists(ctx, jobKey(ns, q, j.ID)).Result()
		if err != nil {
			t.Fatal(err)
		}
		err = client.ZScore(ctx, timerKey(ns, q), j.ID).Err()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return n == 1, err == nil
	}
	check := func(what string, got []int64, want ...int64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: codes %v, want %v", what, got, want)
		}
	}

	check("wrong receipt", ack(a.ID, string(wrong)), -2)
	if body, timer := present(a); !body || !timer {
		t.Errorf("after a wrong receipt: body %v, timer entry %v; want both kept", body, timer)
	}
	check("wrong receipt then the right one twice", ack(a.ID, string(wrong), a.ID, nonce(a), a.ID, nonce(a)), -2, 1, -1)
	if body, timer := present(a); body || timer {
		t.Errorf("after ACK: body %v, timer entry %v; want both gone", body, timer)
	}
	check("same job twice without receipt", ack(b.ID, "", b.ID, ""), 1, 1)
	if body, timer := present(b); body || timer {
		t.Errorf("after ACK without receipt: body %v, timer entry %v; want both gone", body, timer)
	}
	check("valid receipt, then an ACKed job with its receipt, then an unknown job without", ack(c.ID, nonce(c), a.ID, nonce(a), "nosuchjob", ""), 1, -1, 1)
	if body, timer := present(c); body || timer {
		t.Errorf("after ACK: body %v, timer entry %v; want both gone", body, timer)
	}
}

// TestCoalescePublishAcrossQueues publishes concurrently to many queues, so
// that batches mix queues (publishManyScript), with delayed, priority and
// plain jobs, and checks every queue's ready jobs, timer, registries and
// due index entry; then that a batch is all or nothing.
func TestCoalescePublishAcrossQueues(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			clock := newTestClock()
			e := startEngine(t, client, clock)
			var mixed sync.Mutex
			mostQueues := 0 // most distinct queues in one publish batch
			run := e.pubs.run
			e.pubs.run = func(ctx context.Context, batch []*batchCall[pubOp]) {
				qs := map[string]bool{}
				for _, c := range batch {
					qs[c.in.req.Queue] = true
				}
				mixed.Lock()
				mostQueues = max(mostQueues, len(qs))
				mixed.Unlock()
				run(ctx, batch)
			}
			const ns, queues, workers, per = "mq", 50, 32, 40
			type want struct{ ready, delayed int }
			var mu sync.Mutex
			wants := make(map[string]*want)
			bodies := make(map[string]string) // id → body
			var wg sync.WaitGroup
			errs := make(chan error, workers*per)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < per; i++ {
						n := w*per + i
						q := fmt.Sprintf("q%d", n%queues)
						req := &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 2, TTL: time.Hour, Body: []byte(fmt.Sprintf("job-%d", n))}
						switch {
						case n%5 == 0:
							req.Delay = time.Hour + time.Duration(n)*time.Millisecond
						case n%7 == 0:
							req.Priority = 5
						}
						id, err := e.Publish(ctx, req)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						if _, dup := bodies[id]; dup {
							errs <- fmt.Errorf("id %s given twice", id)
						}
						bodies[id] = string(req.Body)
						wq := wants[q]
						if wq == nil {
							wq = &want{}
							wants[q] = wq
						}
						if req.Delay > 0 {
							wq.delayed++
						} else {
							wq.ready++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if mostQueues < 2 {
				t.Errorf("no publish batch mixed queues (most %d)", mostQueues)
			}
			for q, w := range wants {
				size, err := e.Size(ctx, ns, q)
				if err != nil || size != int64(w.ready) {
					t.Errorf("%s: size %d (%v), want %d", q, size, err, w.ready)
				}
				if n := client.ZCard(ctx, timerKey(ns, q)).Val(); n != int64(w.delayed) {
					t.Errorf("%s: %d timer entries, want %d", q, n, w.delayed)
				}
				if w.delayed > 0 {
					first := client.ZRangeWithScores(ctx, timerKey(ns, q), 0, 0).Val()
					idx, err := client.ZScore(ctx, timerIndexKey(slotGroup(ns, q)), queueMember(ns, q)).Result()
					if err != nil || len(first) != 1 || idx != first[0].Score {
						t.Errorf("%s: index score %v (%v), earliest timer entry %v", q, idx, err, first)
					}
				}
				if !inRegistry(ctx, client, ns, q) {
					t.Errorf("%s: not in the queue registry", q)
				}
			}
			// Every ready job is consumable once, with its body, priority
			// jobs of a queue before its plain ones.
			for q, w := range wants {
				seenPlain := false
				for i := 0; i < w.ready; i++ {
					jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: time.Minute})
					if err != nil || len(jobs) != 1 {
						t.Fatalf("%s: consume %d of %d: %v %v", q, i+1, w.ready, jobs, err)
					}
					j := jobs[0]
					if bodies[j.ID] != string(j.Body) {
						t.Fatalf("%s: job %s body %q, published %q", q, j.ID, j.Body, bodies[j.ID])
					}
					if j.Priority == 0 {
						seenPlain = true
					} else if seenPlain {
						t.Fatalf("%s: priority job %s after a plain one", q, j.ID)
					}
				}
			}

			// All or nothing: job 2's body key exists, so job 1 (another
			// queue of the group) is not written either.
			mates := groupMates(ns, 2)
			taken := engine.NewJobID(clock.Now(), 0, false)
			if err := client.Set(ctx, jobKey(ns, mates[1], taken), "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			fresh := engine.NewJobID(clock.Now(), 0, false)
			now := clock.Now().UnixMilli()
			qa, qb := newQueueNames(ns, "a"), newQueueNames(ns, mates[1])
			keys := []string{qa.ready, qa.registry, qa.usage, qb.ready, qb.registry, qb.usage,
				jobKey(ns, "a", fresh), jobKey(ns, mates[1], taken)}
			args := []interface{}{"PUBLISH", 2, 6, 15, "0", "pr", 1, qa.channel, 0, qa.member, "pr", 1, qb.channel, 0, qb.member,
				packEntry(1, fresh), packEntry(1, taken),
				newValue(true, 1, 0, now, "", "", []byte("a")), 0, 0, 0,
				newValue(true, 1, 0, now, "", "", []byte("b")), 0, 0, 0}
			res, err := publishManyScript.Run(ctx, client, keys, args...).Int64Slice()
			if err != nil || len(res) != 1 || res[0] != 2 {
				t.Fatalf("publishManyScript with a taken key = %v, %v; want [2]", res, err)
			}
			if client.Exists(ctx, jobKey(ns, "a", fresh)).Val() != 0 || client.LLen(ctx, readyKey(ns, "a")).Val() != 0 ||
				inRegistry(ctx, client, ns, "a") {
				t.Fatal("a batch with a taken key wrote part of itself")
			}
		})
	}
}

// TestCoalescePublishInterleaved runs one coalesced batch whose queues
// interleave (a b a c b a …): publishManyScript takes the jobs grouped by
// queue, and each queue must still get its jobs in the batch's order, plain
// ones in one LPUSH, a queue with delayed and priority jobs the slow way.
func TestCoalescePublishInterleaved(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			e := startEngine(t, client, newTestClock())
			const ns = "il"
			// Three queues of one slot group, as a publish lane's batch
			// is on a cluster.
			g := groupMates(ns, 3)
			qa, qb, qc := g[0], g[1], g[2]
			queues := []string{qa, qb, qa, qc, qb, qa, qc, qc, qa, qb}
			var batch []*batchCall[pubOp]
			for i, q := range queues {
				req := &engine.PublishRequest{Namespace: ns, Queue: q, Tries: 1, TTL: time.Hour, Body: []byte(fmt.Sprint(i))}
				switch {
				case q == qc && i == 6:
					req.Delay = time.Hour
				case q == qc && i == 7:
					req.Priority = 3
				}
				batch = append(batch, &batchCall[pubOp]{in: pubOp{req: req}})
			}
			e.publishCoalesced(ctx, batch)
			for i, c := range batch {
				if c.err != nil || c.in.id == "" {
					t.Fatalf("job %d: id %q, err %v", i, c.in.id, c.err)
				}
			}
			if n := client.ZCard(ctx, timerKey(ns, qc)).Val(); n != 1 {
				t.Errorf("queue c: %d timer entries, want the delayed job", n)
			}
			want := map[string][]string{ // queue → bodies in consume order
				qa: {"0", "2", "5", "8"},
				qb: {"1", "4", "9"},
				qc: {"7", "3"}, // the priority job first; 6 is delayed
			}
			for q, bodies := range want {
				var got []string
				for {
					jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: time.Minute})
					if err != nil {
						t.Fatal(err)
					}
					if len(jobs) == 0 {
						break
					}
					got = append(got, string(jobs[0].Body))
				}
				if fmt.Sprint(got) != fmt.Sprint(bodies) {
					t.Errorf("queue %s gave %v, want %v", q, got, bodies)
				}
			}
			for _, q := range g {
				if !inRegistry(ctx, client, ns, q) {
					t.Errorf("%s: not in the queue registry", q)
				}
			}
		})
	}
}

// TestPublishEach: the engine.Batcher operations of the server's event
// loops. Independent publishes of several queues in one call each get their
// own ID or error: 300 jobs (more than one batch) with delayed and plain
// ones, an invalid one and a job-keyed one among them. ConsumeEach then
// hands out every ready job once, with its body, to consumers that share
// calls, and DeleteEach acknowledges them.
func TestPublishEach(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			e := startEngine(t, client, newTestClock())
			const n = 300
			reqs := make([]*engine.PublishRequest, n)
			for i := range reqs {
				reqs[i] = &engine.PublishRequest{Namespace: "each", Queue: fmt.Sprintf("q%d", i%3), Tries: 1, TTL: time.Hour, Body: []byte(fmt.Sprintf("job-%d", i))}
				if i%10 == 0 {
					reqs[i].Delay = time.Hour
				}
			}
			reqs[7].Tries = 0            // invalid: fails alone
			reqs[8].Key = "idempotent-8" // not a plain publish: one by one
			ids, errs := make([]string, n), make([]error, n)
			e.PublishEach(ctx, reqs, ids, errs)
			seen := map[string]bool{}
			ready := map[string]map[string]string{} // queue → id → body
			for i := range reqs {
				if i == 7 {
					if !errors.Is(errs[i], engine.ErrInvalid) || ids[i] != "" {
						t.Errorf("invalid job: %q, %v", ids[i], errs[i])
					}
					continue
				}
				if errs[i] != nil || ids[i] == "" || seen[ids[i]] {
					t.Fatalf("job %d: %q, %v", i, ids[i], errs[i])
				}
				seen[ids[i]] = true
				if i%10 != 0 {
					q := reqs[i].Queue
					if ready[q] == nil {
						ready[q] = map[string]string{}
					}
					ready[q][ids[i]] = string(reqs[i].Body)
				}
			}
			// Consume everything ready with ConsumeEach: several consumers
			// per queue (sharing script calls), one asking too much.
			var got []engine.JobRef
			for round := 0; ; round++ {
				var reqs []*engine.ConsumeRequest
				for q := range ready {
					for _, count := range []int{1, 7, 100} {
						reqs = append(reqs, &engine.ConsumeRequest{Namespace: "each", Queues: []string{q}, TTR: time.Minute, Count: count, Timeout: time.Hour})
					}
				}
				reqs = append(reqs, &engine.ConsumeRequest{Namespace: "each", Queues: []string{"q0"}, Count: engine.MaxBatchConsume + 1})
				jobs, errs := make([][]*engine.Job, len(reqs)), make([]error, len(reqs))
				e.ConsumeEach(ctx, reqs, jobs, errs)
				if last := len(reqs) - 1; !errors.Is(errs[last], engine.ErrInvalid) || jobs[last] != nil {
					t.Fatalf("count %d: %v, %v", reqs[last].Count, jobs[last], errs[last])
				}
				n := 0
				for i, js := range jobs[:len(reqs)-1] {
					if errs[i] != nil || len(js) > reqs[i].Count {
						t.Fatalf("consumer %d: %d jobs, %v", i, len(js), errs[i])
					}
					for _, j := range js {
						want := ready[j.Queue]
						if want[j.ID] != string(j.Body) {
							t.Errorf("%s: job %s body %q, want %q", j.Queue, j.ID, j.Body, want[j.ID])
						}
						delete(want, j.ID)
						got = append(got, engine.JobRef{Namespace: "each", Queue: j.Queue, ID: j.ID})
						n++
					}
				}
				if n == 0 {
					break
				}
				if round > 100 {
					t.Fatal("ConsumeEach does not end")
				}
			}
			for q, want := range ready {
				if len(want) != 0 {
					t.Errorf("%s: %d published jobs not consumed", q, len(want))
				}
			}
			// ACK them all (and one unknown job, which is no error).
			got = append(got, engine.JobRef{Namespace: "each", Queue: "q1", ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, engine.JobRef{Namespace: "each", Queue: "_bad"})
			errs = make([]error, len(got))
			e.DeleteEach(ctx, got, errs)
			for i, r := range got[:len(got)-1] {
				if errs[i] != nil {
					t.Errorf("ack %s: %v", r.ID, errs[i])
				}
				if _, err := e.PeekJob(ctx, r.Namespace, r.Queue, r.ID); !errors.Is(err, engine.ErrJobNotFound) {
					t.Errorf("job %s after the ACK: %v", r.ID, err)
				}
			}
			if !errors.Is(errs[len(got)-1], engine.ErrInvalid) {
				t.Errorf("ack in an invalid queue: %v", errs[len(got)-1])
			}
		})
	}
}

// TestRegistryAfterDestroy: a queue is recorded in lmstfy's registries at
// its first publish through this engine, and again at the first publish
// after it was destroyed, on both publish paths (coalesced and batch).
func TestRegistryAfterDestroy(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			e := startEngine(t, client, newTestClock())
			const ns, q = "rd", "q"
			job := func() *engine.PublishRequest {
				return &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1}
			}
			publishes := map[string]func() error{
				"coalesced": func() error { _, err := e.Publish(ctx, job()); return err },
				"batch":     func() error { _, err := e.PublishBatch(ctx, []*engine.PublishRequest{job(), job()}); return err },
			}
			for _, path := range []string{"coalesced", "batch", "coalesced"} {
				if err := publishes[path](); err != nil {
					t.Fatalf("%s publish: %v", path, err)
				}
				if !inRegistry(ctx, client, ns, q) {
					t.Fatalf("after a %s publish the queue is not in the registry", path)
				}
				if _, err := e.Destroy(ctx, ns, q); err != nil {
					t.Fatal(err)
				}
				if inRegistry(ctx, client, ns, q) {
					t.Fatal("the destroyed queue is still in the registry")
				}
			}
		})
	}
}

// inRegistry reports whether queue ns/q is in its slot group's registry.
func inRegistry(ctx context.Context, client redis.UniversalClient, ns, q string) bool {
	return client.HExists(ctx, registryKey(slotGroup(ns, q)), queueMember(ns, q)).Val()
}

// groupMates returns n queue names of ns in one slot group.
func groupMates(ns string, n int) []string {
	out := []string{"a"}
	for i := 0; len(out) < n; i++ {
		if q := fmt.Sprintf("m%d", i); slotGroup(ns, q) == slotGroup(ns, "a") {
			out = append(out, q)
		}
	}
	return out
}
