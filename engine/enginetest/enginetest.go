// Package enginetest is the contract every engine.Engine implementation
// must pass. An implementation's tests call Run (lmstfy's operations and
// the event loops' batches, passes and watches) and RunExtended (the Kairos
// extensions) with a factory; the suite then drives the engine only
// through the engine.Engine interface, plus a clock it can move and a way
// to let stored TTLs elapse.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// Harness is one engine under test, running (its pump and waiters live).
type Harness struct {
	Engine engine.Engine
	// Advance moves the engine's clock forward by d and runs its pump once,
	// so that timers fall due without sleeping.
	Advance func(d time.Duration)
	// Elapse lets d pass for the store's own expiry of TTLs (a real sleep
	// on real Redis, a fast-forward on miniredis).
	Elapse func(d time.Duration)
}

// Factory returns a fresh, running harness; it registers its own cleanup.
type Factory func(t *testing.T) *Harness

// Run runs the whole contract suite.
func Run(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"PublishConsumeAck", testPublishConsumeAck},
		{"FIFO", testFIFO},
		{"Priority", testPriority},
		{"Delay", testDelay},
		{"TTRRedeliveryAndDeadLetter", testTTRAndDeadLetter},
		{"AckStopsRedelivery", testAckStopsRedelivery},
		{"StaleHead", testStaleHead},
		{"BatchConsume", testBatchConsume},
		{"Respawn", testRespawn},
		{"DeleteDeadLetter", testDeleteDeadLetter},
		{"Destroy", testDestroy},
		{"Republish", testRepublish},
		{"BatchAtomic", testBatchAtomic},
		{"ExplicitID", testExplicitID},
		{"Attributes", testAttributes},
		{"NotFound", testNotFound},
		{"TTLExpiry", testTTLExpiry},
		{"SizeCountsLiveJobs", testSizeCountsLiveJobs},
		{"LongPollWakesOnPublish", testLongPollPublish},
		{"LongPollDelayed", testLongPollDelayed},
		{"LongPollTimeout", testLongPollTimeout},
		{"LongPollCancel", testLongPollCancel},
		{"ConcurrentConsumersNoDuplicates", testConcurrentConsumers},
		{"Info", testInfo},
		{"InvalidInput", testInvalid},
		{"PublishEach", testPublishEach},
		{"ConsumeEach", testConsumeEach},
		{"DeleteEach", testDeleteEach},
		{"DeleteEachReceipts", testDeleteEachReceipts},
		{"Together", testTogether},
		{"Watch", testWatch},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f(t)) })
	}
}

var bg = context.Background()

const ns = "ns"

func pub(t *testing.T, h *Harness, q string, body string, mod func(*engine.PublishRequest)) string {
	t.Helper()
	r := &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(body), TTL: time.Hour, Tries: 1}
	if mod != nil {
		mod(r)
	}
	id, err := h.Engine.Publish(bg, r)
	if err != nil {
		t.Fatalf("publish %s: %v", q, err)
	}
	return id
}

func consume(t *testing.T, h *Harness, ttr time.Duration, count int, queues ...string) []*engine.Job {
	t.Helper()
	jobs, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: queues, TTR: ttr, Count: count})
	if err != nil {
		t.Fatalf("consume %v: %v", queues, err)
	}
	return jobs
}

func one(t *testing.T, h *Harness, ttr time.Duration, queues ...string) *engine.Job {
	t.Helper()
	jobs := consume(t, h, ttr, 1, queues...)
	if len(jobs) != 1 {
		t.Fatalf("consume %v: got %d jobs, want 1", queues, len(jobs))
	}
	return jobs[0]
}

func none(t *testing.T, h *Harness, queues ...string) {
	t.Helper()
	if jobs := consume(t, h, time.Minute, 1, queues...); len(jobs) != 0 {
		t.Fatalf("consume %v: got job %s, want none", queues, jobs[0].ID)
	}
}

func deadLetter(t *testing.T, h *Harness, q string) engine.DeadLetter {
	t.Helper()
	dl, err := h.Engine.PeekDeadLetter(bg, ns, q)
	if err != nil {
		t.Fatalf("peek dead letter: %v", err)
	}
	return dl
}

func testPublishConsumeAck(t *testing.T, h *Harness) {
	id := pub(t, h, "q", "hello", func(r *engine.PublishRequest) { r.Tries = 3 })
	if len(id) != 26 {
		t.Fatalf("job id %q: want 26 characters", id)
	}
	if n, _ := h.Engine.Size(bg, ns, "q"); n != 1 {
		t.Fatalf("size = %d, want 1", n)
	}
	j := one(t, h, 30*time.Second, "q")
	if j.ID != id || string(j.Body) != "hello" || j.Tries != 2 || j.Queue != "q" || j.Namespace != ns {
		t.Fatalf("consumed %+v", j)
	}
	if j.TTL <= 59*time.Minute || j.TTL > time.Hour {
		t.Fatalf("ttl = %v, want about 1h", j.TTL)
	}
	if err := h.Engine.Delete(bg, ns, "q", id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("peek after ack: %v, want ErrJobNotFound", err)
	}
	// Acknowledging an unknown job is not an error (lmstfy: 204).
	if err := h.Engine.Delete(bg, ns, "q", "nosuchjob"); err != nil {
		t.Fatal(err)
	}
}

func testFIFO(t *testing.T, h *Harness) {
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, pub(t, h, "q", fmt.Sprint(i), nil))
	}
	p, err := h.Engine.PeekQueue(bg, ns, "q")
	if err != nil || p.ID != ids[0] || string(p.Body) != "0" || p.Tries != 1 {
		t.Fatalf("peek = %+v, %v; want first job", p, err)
	}
	for i := range ids {
		if j := one(t, h, time.Minute, "q"); j.ID != ids[i] {
			t.Fatalf("job %d: got %s want %s", i, j.ID, ids[i])
		}
	}
}

func testPriority(t *testing.T, h *Harness) {
	low := pub(t, h, "low", "l", nil)
	high := pub(t, h, "high", "h", nil)
	j := one(t, h, time.Minute, "high", "low")
	if j.ID != high || j.Queue != "high" {
		t.Fatalf("got %s from %s, want %s from high", j.ID, j.Queue, high)
	}
	j = one(t, h, time.Minute, "high", "low")
	if j.ID != low || j.Queue != "low" {
		t.Fatalf("got %s from %s, want %s from low", j.ID, j.Queue, low)
	}
}

func testDelay(t *testing.T, h *Harness) {
	late := pub(t, h, "q", "late", func(r *engine.PublishRequest) { r.Delay = 5 * time.Second })
	early := pub(t, h, "q", "early", func(r *engine.PublishRequest) { r.Delay = 2 * time.Second })
	none(t, h, "q")
	// Real time flows too while the test runs: margins of 500 ms keep the
	// test exact on a loaded machine under -race, where 50 ms ran out on
	// the cluster (the rdb tests check the millisecond edge with a frozen
	// clock).
	h.Advance(1500 * time.Millisecond)
	none(t, h, "q")
	h.Advance(600 * time.Millisecond)
	if j := one(t, h, time.Minute, "q"); j.ID != early {
		t.Fatalf("got %s, want the 2s job", j.ID)
	}
	none(t, h, "q")
	h.Advance(3 * time.Second)
	if j := one(t, h, time.Minute, "q"); j.ID != late {
		t.Fatalf("got %s, want the 5s job", j.ID)
	}
	// A job ID carries its delay in seconds.
	if info, err := engine.ParseJobID(late); err != nil || info.Delay != 5*time.Second {
		t.Fatalf("job id delay = %v, %v", info.Delay, err)
	}
}

func testTTRAndDeadLetter(t *testing.T, h *Harness) {
	id := pub(t, h, "q", "work", func(r *engine.PublishRequest) { r.Tries = 2; r.TTL = time.Hour })
	if j := one(t, h, time.Second, "q"); j.ID != id || j.Tries != 1 {
		t.Fatalf("first delivery %+v", j)
	}
	none(t, h, "q")
	h.Advance(600 * time.Millisecond) // margins of 400 ms, as in testDelay
	none(t, h, "q")
	h.Advance(500 * time.Millisecond)
	if j := one(t, h, time.Second, "q"); j.ID != id || j.Tries != 0 {
		t.Fatalf("second delivery %+v", j)
	}
	h.Advance(1100 * time.Millisecond)
	none(t, h, "q")
	dl := deadLetter(t, h, "q")
	if dl.Size != 1 || dl.Head != id {
		t.Fatalf("dead letter = %+v, want size 1 head %s", dl, id)
	}
	if n, _ := h.Engine.DeadLetterSize(bg, ns, "q"); n != 1 {
		t.Fatalf("dead letter size %d", n)
	}
	// Entering the dead letter removes the TTL.
	j, err := h.Engine.PeekJob(bg, ns, "q", id)
	if err != nil || j.TTL != 0 {
		t.Fatalf("dead job peek = %+v, %v; want ttl 0", j, err)
	}
}

func testAckStopsRedelivery(t *testing.T, h *Harness) {
	id := pub(t, h, "q", "x", func(r *engine.PublishRequest) { r.Tries = 3 })
	one(t, h, time.Second, "q")
	if err := h.Engine.Delete(bg, ns, "q", id); err != nil {
		t.Fatal(err)
	}
	h.Advance(2 * time.Second)
	none(t, h, "q")
	if dl := deadLetter(t, h, "q"); dl.Size != 0 {
		t.Fatalf("dead letter %+v, want empty", dl)
	}
	// A delayed job deleted before it is due is never delivered.
	d := pub(t, h, "q", "d", func(r *engine.PublishRequest) { r.Delay = time.Second })
	if err := h.Engine.Delete(bg, ns, "q", d); err != nil {
		t.Fatal(err)
	}
	h.Advance(2 * time.Second)
	none(t, h, "q")
}

func testStaleHead(t *testing.T, h *Harness) {
	a := pub(t, h, "q", "a", nil)
	b := pub(t, h, "q", "b", nil)
	if err := h.Engine.Delete(bg, ns, "q", a); err != nil {
		t.Fatal(err)
	}
	p, err := h.Engine.PeekQueue(bg, ns, "q")
	if err != nil || p.ID != b {
		t.Fatalf("peek past stale head = %+v, %v", p, err)
	}
	if j := one(t, h, time.Minute, "q"); j.ID != b {
		t.Fatalf("consume past stale head got %s want %s", j.ID, b)
	}
	// Many stale entries: more than one script call's budget.
	var last string
	for i := 0; i < 1200; i++ {
		id := pub(t, h, "q2", "s", nil)
		if err := h.Engine.Delete(bg, ns, "q2", id); err != nil {
			t.Fatal(err)
		}
	}
	last = pub(t, h, "q2", "live", nil)
	if j := one(t, h, time.Minute, "q2"); j.ID != last {
		t.Fatalf("consume past 1200 stale entries got %s want %s", j.ID, last)
	}
	if _, err := h.Engine.PeekQueue(bg, ns, "q2"); !errors.Is(err, engine.ErrQueueEmpty) {
		t.Fatalf("peek of drained queue: %v", err)
	}
}

func testBatchConsume(t *testing.T, h *Harness) {
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, pub(t, h, "q", fmt.Sprint(i), nil))
	}
	got := consume(t, h, time.Minute, 3, "q")
	if len(got) != 3 {
		t.Fatalf("batch got %d, want 3", len(got))
	}
	for i, j := range got {
		if j.ID != ids[i] || j.Tries != 0 {
			t.Fatalf("batch[%d] = %+v", i, j)
		}
	}
	if got = consume(t, h, time.Minute, 3, "q"); len(got) != 1 || got[0].ID != ids[3] {
		t.Fatalf("second batch = %d jobs", len(got))
	}
	// Across queues, higher priority queues drain first.
	h1 := pub(t, h, "a", "a", nil)
	l1 := pub(t, h, "b", "b1", nil)
	l2 := pub(t, h, "b", "b2", nil)
	got = consume(t, h, time.Minute, 10, "a", "b")
	if len(got) != 3 || got[0].ID != h1 || got[1].ID != l1 || got[2].ID != l2 {
		t.Fatalf("multi-queue batch = %v", got)
	}
}

// killThree publishes three jobs to q and lets each die in turn, so that
// the dead letter holds them oldest first.
func killThree(t *testing.T, h *Harness) []string {
	t.Helper()
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, pub(t, h, "q", fmt.Sprint(i), nil))
	}
	for range ids {
		one(t, h, 0, "q")
		h.Advance(time.Millisecond)
	}
	return ids
}

func testRespawn(t *testing.T, h *Harness) {
	ids := killThree(t, h)
	if dl := deadLetter(t, h, "q"); dl.Size != 3 || dl.Head != ids[0] {
		t.Fatalf("dead letter %+v", dl)
	}
	waiting := pub(t, h, "q", "waiting", nil)
	n, err := h.Engine.RespawnDeadLetter(bg, ns, "q", 2, 10*time.Second)
	if err != nil || n != 2 {
		t.Fatalf("respawn = %d, %v", n, err)
	}
	// Respawned jobs go behind the jobs already waiting, oldest first.
	for _, want := range []string{waiting, ids[0], ids[1]} {
		j := one(t, h, time.Minute, "q")
		if j.ID != want {
			t.Fatalf("got %s want %s", j.ID, want)
		}
		if want != waiting && (j.Tries != 0 || j.TTL <= 9*time.Second || j.TTL > 10*time.Second) {
			t.Fatalf("respawned job %+v: want tries 0 after consume and ttl about 10s", j)
		}
	}
	// ttl 0 keeps the job without expiry.
	if n, err := h.Engine.RespawnDeadLetter(bg, ns, "q", 5, 0); err != nil || n != 1 {
		t.Fatalf("respawn rest = %d, %v", n, err)
	}
	if j := one(t, h, time.Minute, "q"); j.ID != ids[2] || j.TTL != 0 {
		t.Fatalf("got %+v", j)
	}
	if n, err := h.Engine.RespawnDeadLetter(bg, ns, "q", 5, 0); err != nil || n != 0 {
		t.Fatalf("respawn of empty dead letter = %d, %v", n, err)
	}
}

func testDeleteDeadLetter(t *testing.T, h *Harness) {
	ids := killThree(t, h)
	n, err := h.Engine.DeleteDeadLetter(bg, ns, "q", 2)
	if err != nil || n != 2 {
		t.Fatalf("delete = %d, %v", n, err)
	}
	if dl := deadLetter(t, h, "q"); dl.Size != 1 || dl.Head != ids[2] {
		t.Fatalf("dead letter %+v", dl)
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", ids[0]); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("deleted dead job still there: %v", err)
	}
	if n, _ := h.Engine.DeleteDeadLetter(bg, ns, "q", 1); n != 1 {
		t.Fatalf("delete last = %d", n)
	}
	if dl := deadLetter(t, h, "q"); dl.Size != 0 || dl.Head != "" {
		t.Fatalf("dead letter %+v, want empty", dl)
	}
}

func testDestroy(t *testing.T, h *Harness) {
	pub(t, h, "q", "ready", nil)
	delayed := pub(t, h, "q", "delayed", func(r *engine.PublishRequest) { r.Delay = time.Second })
	pub(t, h, "q", "inflight", func(r *engine.PublishRequest) { r.Tries = 2 })
	one(t, h, time.Second, "q")
	n, err := h.Engine.Destroy(bg, ns, "q")
	if err != nil || n != 3 {
		t.Fatalf("destroy = %d, %v; want 3", n, err)
	}
	h.Advance(2 * time.Second)
	none(t, h, "q")
	if _, err := h.Engine.PeekJob(bg, ns, "q", delayed); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("delayed job survived destroy: %v", err)
	}
	if s, _ := h.Engine.Size(bg, ns, "q"); s != 0 {
		t.Fatalf("size after destroy %d", s)
	}
}

func testRepublish(t *testing.T, h *Harness) {
	old := pub(t, h, "q", "old", nil)
	one(t, h, time.Minute, "q")
	id := pub(t, h, "q", "new", func(r *engine.PublishRequest) { r.Replaces = old; r.TTL = 10 * time.Second })
	if id == old {
		t.Fatal("re-publish kept the old ID")
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", old); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("old job still there: %v", err)
	}
	j := one(t, h, time.Minute, "q")
	if j.ID != id || string(j.Body) != "new" || j.TTL > 10*time.Second {
		t.Fatalf("republished %+v", j)
	}
}

func testBatchAtomic(t *testing.T, h *Harness) {
	pub(t, h, "q", "taken", func(r *engine.PublishRequest) { r.ID = "fixed-id" })
	reqs := []*engine.PublishRequest{
		{Namespace: ns, Queue: "q", Body: []byte("a"), Tries: 1},
		{Namespace: ns, Queue: "q", Body: []byte("b"), Tries: 1, ID: "fixed-id"},
	}
	if _, err := h.Engine.PublishBatch(bg, reqs); !errors.Is(err, engine.ErrJobExists) {
		t.Fatalf("batch with a taken id: %v, want ErrJobExists", err)
	}
	if n, _ := h.Engine.Size(bg, ns, "q"); n != 1 {
		t.Fatalf("size %d: a failed batch wrote something", n)
	}
	reqs = nil
	for i := 0; i < engine.MaxBulkPublish; i++ {
		reqs = append(reqs, &engine.PublishRequest{Namespace: ns, Queue: "b", Body: []byte(fmt.Sprint(i)), Tries: 1})
	}
	ids, err := h.Engine.PublishBatch(bg, reqs)
	if err != nil || len(ids) != len(reqs) {
		t.Fatalf("batch = %d ids, %v", len(ids), err)
	}
	got := consume(t, h, time.Minute, engine.MaxBatchConsume, "b")
	if len(got) != len(reqs) {
		t.Fatalf("consumed %d of %d", len(got), len(reqs))
	}
	for i, j := range got {
		if j.ID != ids[i] || string(j.Body) != fmt.Sprint(i) {
			t.Fatalf("job %d = %s %q", i, j.ID, j.Body)
		}
	}
}

func testExplicitID(t *testing.T, h *Harness) {
	pub(t, h, "q", "x", func(r *engine.PublishRequest) { r.ID = "jobID1" })
	if j := one(t, h, time.Minute, "q"); j.ID != "jobID1" {
		t.Fatalf("got %s", j.ID)
	}
	_, err := h.Engine.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", ID: "jobID1", Tries: 1})
	if !errors.Is(err, engine.ErrJobExists) {
		t.Fatalf("duplicate explicit id: %v", err)
	}
}

func testAttributes(t *testing.T, h *Harness) {
	body := []byte{0, 1, 2, 0xff, '"'}
	id := pub(t, h, "q", string(body), func(r *engine.PublishRequest) {
		r.Versioned = true
		r.Attributes = map[string]string{"hello": "world", "foo": "bar"}
	})
	if len(id) != 27 || id[0] != '1' {
		t.Fatalf("v1 id %q", id)
	}
	j := one(t, h, time.Minute, "q")
	if !bytes.Equal(j.Body, body) || len(j.Attributes) != 2 || j.Attributes["hello"] != "world" || j.Attributes["foo"] != "bar" {
		t.Fatalf("v1 job %+v", j)
	}
	v0 := pub(t, h, "q", "plain", nil)
	p, err := h.Engine.PeekJob(bg, ns, "q", v0)
	if err != nil || p.Attributes != nil || string(p.Body) != "plain" {
		t.Fatalf("v0 peek %+v %v", p, err)
	}
}

func testNotFound(t *testing.T, h *Harness) {
	if _, err := h.Engine.PeekJob(bg, ns, "q", "01M7YVBFN8AAS205RQ04000000"); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("peek unknown job: %v", err)
	}
	if _, err := h.Engine.PeekQueue(bg, ns, "q"); !errors.Is(err, engine.ErrQueueEmpty) {
		t.Fatalf("peek empty queue: %v", err)
	}
	if dl := deadLetter(t, h, "q"); dl.Size != 0 || dl.Head != "" {
		t.Fatalf("empty dead letter %+v", dl)
	}
	none(t, h, "q")
}

func testTTLExpiry(t *testing.T, h *Harness) {
	id := pub(t, h, "q", "short", func(r *engine.PublishRequest) { r.TTL = 100 * time.Millisecond })
	keep := pub(t, h, "q", "keep", func(r *engine.PublishRequest) { r.TTL = 0 })
	h.Elapse(300 * time.Millisecond)
	if _, err := h.Engine.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("expired job: %v", err)
	}
	j := one(t, h, time.Minute, "q")
	if j.ID != keep || j.TTL != 0 {
		t.Fatalf("got %+v, want the job without ttl", j)
	}
}

// testSizeCountsLiveJobs: once the TTL of a queue's jobs runs out, Size
// counts only the live ones, with no consumer (lmstfy counts expired jobs
// until a consumer pops them).
func testSizeCountsLiveJobs(t *testing.T, h *Harness) {
	// The TTL is real time on a real Redis: 100 ms ran out before the
	// fifth publish on a cluster at load average 30.
	const ttl = time.Second
	for range 3 {
		pub(t, h, "q", "short", func(r *engine.PublishRequest) { r.TTL = ttl })
	}
	pub(t, h, "q", "prio", func(r *engine.PublishRequest) { r.TTL = ttl; r.Priority = 5 })
	keep := pub(t, h, "q", "keep", func(r *engine.PublishRequest) { r.TTL = 0 })
	if n, err := h.Engine.Size(bg, ns, "q"); err != nil || n != 5 {
		t.Fatalf("size before expiry = %d, %v; want 5", n, err)
	}
	h.Elapse(ttl + 200*time.Millisecond)
	if n, err := h.Engine.Size(bg, ns, "q"); err != nil || n != 1 {
		t.Fatalf("size after expiry = %d, %v; want 1", n, err)
	}
	if j, err := h.Engine.PeekQueue(bg, ns, "q"); err != nil || j.ID != keep {
		t.Fatalf("peek = %+v, %v; want %s", j, err, keep)
	}
}

func testLongPollPublish(t *testing.T, h *Harness) {
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, _ := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"x", "q"}, TTR: time.Minute, Count: 1, Timeout: 5 * time.Second})
		got <- jobs
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	id := pub(t, h, "q", "wake", nil)
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("long poll got %v", jobs)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("long poll answered after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll not woken by publish")
	}
}

func testLongPollDelayed(t *testing.T, h *Harness) {
	// From before the publish: the delay counts from the publish's clock
	// reading, and a slow publish round trip (a loaded machine, -race)
	// must not make an on-time delivery look early.
	start := time.Now()
	id := pub(t, h, "q", "soon", func(r *engine.PublishRequest) { r.Delay = 200 * time.Millisecond })
	jobs, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Timeout: 3 * time.Second})
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("got %v, %v", jobs, err)
	}
	if d := time.Since(start); d < 190*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("delayed job delivered after %v, want about 200ms", d)
	}
}

func testLongPollTimeout(t *testing.T, h *Harness) {
	start := time.Now()
	jobs, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 3, Timeout: 300 * time.Millisecond})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("got %v, %v", jobs, err)
	}
	if d := time.Since(start); d < 290*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timeout after %v, want 300ms", d)
	}
}

func testLongPollCancel(t *testing.T, h *Harness) {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		jobs, err := h.Engine.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Timeout: time.Minute})
		if err != nil || len(jobs) != 0 {
			t.Errorf("cancelled poll got %v, %v", jobs, err)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled long poll did not return")
	}
	// The job published after the cancel is still there for others.
	id := pub(t, h, "q", "after", nil)
	if j := one(t, h, time.Minute, "q"); j.ID != id {
		t.Fatalf("got %s", j.ID)
	}
}

func testConcurrentConsumers(t *testing.T, h *Harness) {
	const jobs, consumers = 300, 8
	want := make(map[string]bool, jobs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[string]int)
	var delivered atomic.Int64
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for delivered.Load() < jobs {
				got, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Timeout: 200 * time.Millisecond})
				if err != nil {
					t.Error(err)
					return
				}
				for _, j := range got {
					mu.Lock()
					seen[j.ID]++
					mu.Unlock()
					delivered.Add(1)
				}
			}
		}()
	}
	for i := 0; i < jobs; i++ {
		want[pub(t, h, "q", fmt.Sprint(i), nil)] = true
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("delivered %d distinct jobs, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 || !want[id] {
			t.Fatalf("job %s delivered %d times (published: %v)", id, n, want[id])
		}
	}
}

func testInfo(t *testing.T, h *Harness) {
	pub(t, h, "q1", "x", nil)
	pub(t, h, "q2", "x", nil)
	info, err := h.Engine.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	qs := map[string]bool{}
	for _, q := range info[ns] {
		qs[q] = true
	}
	if !qs["q1"] || !qs["q2"] {
		t.Fatalf("info = %v", info)
	}
}

func testInvalid(t *testing.T, h *Harness) {
	for _, r := range []*engine.PublishRequest{
		{Namespace: "bad/ns", Queue: "q", Tries: 1},
		{Namespace: ns, Queue: "_reserved", Tries: 1},
		{Namespace: ns, Queue: "q", Tries: 0},
	} {
		if _, err := h.Engine.Publish(bg, r); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("publish %+v: %v, want ErrInvalid", r, err)
		}
	}
	if _, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, Count: 0}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("consume count 0: %v", err)
	}
	if _, err := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Count: 1}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("consume no queues: %v", err)
	}
}
