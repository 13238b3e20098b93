package rdb

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// looks counts the consume script calls a client sends.
type looks struct{ n atomic.Int64 }

func (h *looks) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 1 && strings.HasPrefix(cmd.Name(), "eval") && args[1] == consumeScript.Hash() {
		h.n.Add(1)
	}
}

func (h *looks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *looks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *looks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// listeningAll waits until e's Pub/Sub is subscribed to every group's
// wake-up channel: on a cluster, Run dials a connection per group, and a
// first wait's subscription queues behind that.
func listeningAll(t *testing.T, e *Engine) {
	t.Helper()
	waitFor(t, "the wake-up subscriptions", func() bool { return e.waiters.wakeSubs.Load() >= slotGroups })
}

// waitingOn is the number of consumers waiting on ns/q in e.
func waitingOn(e *Engine, ns, q string) int {
	e.waiters.mu.Lock()
	defer e.waiters.mu.Unlock()
	if st := e.waiters.chans[readyChannel(ns, q)]; st != nil {
		return st.waiting.Len()
	}
	return 0
}

// TestKnownEmpty: once a look finds a queue empty while the server listens
// to it, consumers that may wait skip the look until a message comes for
// the queue, and they still get the next job at once.
func TestKnownEmpty(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			h := &looks{}
			client.AddHook(h)
			e := startEngine(t, client, newTestClock())
			listeningAll(t, e)
			const ns, q = "ke", "q"
			queues := []string{q}
			wait := &engine.ConsumeRequest{Namespace: ns, Queues: queues, TTR: time.Minute, Count: 1, Timeout: 50 * time.Millisecond}

			// Not listening yet: the first wait subscribes and looks.
			if jobs, err := e.Consume(ctx, wait); err != nil || len(jobs) != 0 {
				t.Fatalf("first wait: %v, %v", jobs, err)
			}
			if !e.waiters.knownEmpty(ns, queues) {
				t.Fatal("an empty look while listening did not make the queue known empty")
			}

			// Known empty: waits and ConsumeEach with a Timeout skip the look;
			// a consume that will not wait still looks.
			before := h.n.Load()
			if jobs, err := e.Consume(ctx, wait); err != nil || len(jobs) != 0 {
				t.Fatalf("second wait: %v, %v", jobs, err)
			}
			jobs, errs := make([][]*engine.Job, 2), make([]error, 2)
			now := *wait
			now.Timeout = 0
			e.ConsumeEach(ctx, []*engine.ConsumeRequest{wait, &now}, jobs, errs)
			if errs[0] != nil || errs[1] != nil || len(jobs[0]) != 0 || len(jobs[1]) != 0 {
				t.Fatalf("ConsumeEach: %v %v", jobs, errs)
			}
			if n := h.n.Load() - before; n != 1 {
				t.Errorf("%d looks for two waits and a ConsumeEach of one wait and one non-wait, want 1", n)
			}

			// A job published to a known-empty queue reaches a consumer that
			// waits without looking, at once (not at the 1 s sweep).
			got := make(chan []*engine.Job, 1)
			long := *wait
			long.Timeout = 5 * time.Second
			before = h.n.Load()
			go func() {
				jobs, _ := e.Consume(ctx, &long)
				got <- jobs
			}()
			waitFor(t, "the waiter", func() bool { return waitingOn(e, ns, q) == 1 })
			if n := h.n.Load() - before; n != 0 {
				t.Errorf("the waiter looked %d times", n)
			}
			start := time.Now()
			id, err := e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case jobs := <-got:
				if len(jobs) != 1 || jobs[0].ID != id {
					t.Fatalf("waiter got %v, want %s", jobs, id)
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Errorf("delivered after %v", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter got nothing")
			}

			// The waiter's look took the last job: the queue is known empty
			// again.
			if !e.waiters.knownEmpty(ns, queues) {
				t.Error("not known empty after the look that took the last job")
			}

			// A publish's message makes it unknown; whether or not the
			// message is handled yet, a wait gets the job.
			msgs := func() uint64 {
				e.waiters.mu.Lock()
				defer e.waiters.mu.Unlock()
				return e.waiters.chans[readyChannel(ns, q)].msgs
			}
			for _, body := range []string{"y", "z"} {
				m0 := msgs()
				id, err = e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(body), TTL: time.Hour, Tries: 1})
				if err != nil {
					t.Fatal(err)
				}
				if body == "z" {
					waitFor(t, "the publish's message", func() bool { return msgs() > m0 })
					if e.waiters.knownEmpty(ns, queues) {
						t.Error("still known empty after a message")
					}
				}
				if jobs, err := e.Consume(ctx, &long); err != nil || len(jobs) != 1 || jobs[0].ID != id {
					t.Fatalf("wait after publish %s: %v, %v", body, jobs, err)
				}
			}
			// And a look that finds nothing when not listening teaches
			// nothing.
			if e.waiters.knownEmpty("ke", []string{"other"}) {
				t.Error("a queue never looked at is known empty")
			}
			other := now
			other.Queues = []string{"other"}
			e.ConsumeEach(ctx, []*engine.ConsumeRequest{&other}, jobs[:1], errs[:1])
			if errs[0] != nil || len(jobs[0]) != 0 || e.waiters.knownEmpty("ke", []string{"other"}) {
				t.Errorf("ConsumeEach of a queue not listened to: %v %v, known empty %v", jobs[0], errs[0], e.waiters.knownEmpty("ke", []string{"other"}))
			}
		})
	}
}

// TestSweepPriority: a job made ready without a message (one lost while
// Pub/Sub reconnected) reaches a waiting consumer at the next sweep, also
// when it is in the queue's priority set rather than its ready list.
func TestSweepPriority(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			clock := newTestClock()
			e := startEngine(t, client, clock)
			listeningAll(t, e)
			const ns, q = "sw", "q"
			req := engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 1, Timeout: 50 * time.Millisecond}
			// A first wait leaves the queue known empty, so that the next
			// one is parked as soon as it is registered (it does not look).
			if jobs, err := e.Consume(ctx, &req); err != nil || len(jobs) != 0 || !e.waiters.knownEmpty(ns, req.Queues) {
				t.Fatalf("first wait: %v, %v, known empty %v", jobs, err, e.waiters.knownEmpty(ns, req.Queues))
			}
			req.Timeout = 10 * time.Second
			got := make(chan []*engine.Job, 1)
			go func() {
				jobs, _ := e.Consume(ctx, &req)
				got <- jobs
			}()
			waitFor(t, "the waiter", func() bool { return waitingOn(e, ns, q) == 1 })

			// A priority job written as the publish script would, with no
			// message.
			payload, err := encodePayload(0, []byte("p"), nil)
			if err != nil {
				t.Fatal(err)
			}
			id := engine.NewJobID(clock.Now(), 0, false)
			if err := client.HSet(ctx, configKey(ns, q), "seq", 1).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.Set(ctx, jobKey(ns, q, id), newValue(true, 1, 5, 0, "", "", payload), 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.ZAdd(ctx, prioKey(ns, q), redis.Z{Score: 1, Member: packEntry(1, id)}).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case jobs := <-got:
				t.Fatalf("the waiter got %v before any sweep", jobs)
			case <-time.After(50 * time.Millisecond):
			}
			e.waiters.sweep(ctx)
			select {
			case jobs := <-got:
				if len(jobs) != 1 || jobs[0].ID != id || string(jobs[0].Body) != "p" {
					t.Fatalf("waiter got %v, want job %s", jobs, id)
				}
			case <-time.After(500 * time.Millisecond):
				t.Fatal("the sweep did not wake the waiter of a queue holding a priority job")
			}
		})
	}
}

// TestResumeWakesEveryWaiter: resuming a paused queue that holds N jobs
// hands them to the N consumers waiting on it at once, not one now and
// the others at the sweep (disabled here, so that it cannot rescue them).
func TestResumeWakesEveryWaiter(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			e, err := New(ctx, tier.client(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			e.waiters.sweepEvery = time.Hour
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = e.Run(runCtx) }()
			t.Cleanup(func() { cancel(); <-done })

			const ns, q, n = "rs", "q", 5
			if err := e.SetQueueConfig(ctx, ns, q, engine.QueueConfig{Paused: true}); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				pri := 0
				if i%2 == 1 {
					pri = 3 // priority jobs count too
				}
				if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1, Priority: pri}); err != nil {
					t.Fatal(err)
				}
			}
			type result struct {
				jobs []*engine.Job
				at   time.Time
			}
			got := make(chan result, n)
			for range n {
				go func() {
					jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 1, Timeout: 3 * time.Second})
					if err != nil {
						t.Error(err)
					}
					got <- result{jobs, time.Now()}
				}()
			}
			waitFor(t, "the waiters", func() bool { return waitingOn(e, ns, q) == n })

			start := time.Now()
			if err := e.SetQueueConfig(ctx, ns, q, engine.QueueConfig{}); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				r := <-got
				if len(r.jobs) != 1 {
					t.Fatalf("consumer %d got %d jobs after %v, want 1", i, len(r.jobs), r.at.Sub(start))
				}
				if d := r.at.Sub(start); d > 300*time.Millisecond {
					t.Errorf("consumer %d got its job %v after the resume, want well under the 1 s sweep", i, d)
				}
			}
		})
	}
}

// TestWaitDeadlineDuringSlowConfirmation: a long-poll whose timeout passes
// while its subscription is still unconfirmed (a slow Pub/Sub connection:
// seen on a loaded cluster, where each slot group has its own) returns at
// its timeout; the deadline once was a timer whose tick the wait for the
// confirmation took, and the consumer then waited for ever.
func TestWaitDeadlineDuringSlowConfirmation(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngine(t, client, newTestClock())
	waitFor(t, "Run", func() bool { e.waiters.mu.Lock(); defer e.waiters.mu.Unlock(); return e.waiters.ps != nil })
	const ns, q = "slow", "q"
	// A subscription sent and never confirmed.
	e.waiters.mu.Lock()
	e.waiters.chans[readyChannel(ns, q)] = &chanState{ns: ns, q: q, subscribed: true, confirmed: make(chan struct{})}
	e.waiters.mu.Unlock()
	done := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		jobs, err := e.Consume(context.Background(), &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 1, TTR: time.Minute, Timeout: 200 * time.Millisecond})
		if err != nil || len(jobs) != 0 {
			t.Errorf("consume = %v, %v; want nothing", jobs, err)
		}
		done <- time.Since(start)
	}()
	select {
	case d := <-done:
		if d < 190*time.Millisecond {
			t.Errorf("returned after %v, before its 200ms timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a long-poll of 200ms still waits after 5s")
	}
}
