package enginetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// The event loops' forms of the hot operations (engine.Batcher,
// engine.Pipeliner, engine.Watcher): each request of a batch gets the
// answer it would get alone.

func testPublishEach(t *testing.T, h *Harness) {
	reqs := []*engine.PublishRequest{
		{Namespace: ns, Queue: "q1", Body: []byte("a"), Tries: 1},
		{Namespace: ns, Queue: "q1", Body: []byte("bad"), Tries: 0},
		{Namespace: ns, Queue: "q2", Body: []byte("b"), Tries: 2, TTL: time.Hour},
		{Namespace: ns, Queue: "q1", Body: []byte("c"), Tries: 1, Delay: time.Second},
	}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	h.Engine.PublishEach(bg, reqs, ids, errs)
	for _, i := range []int{0, 2, 3} {
		if errs[i] != nil || len(ids[i]) != 26 {
			t.Fatalf("job %d: id %q, %v", i, ids[i], errs[i])
		}
	}
	if !errors.Is(errs[1], engine.ErrInvalid) {
		t.Fatalf("job with 0 tries: %v, want ErrInvalid (one bad job fails alone)", errs[1])
	}
	if j := one(t, h, time.Minute, "q1"); j.ID != ids[0] || string(j.Body) != "a" {
		t.Fatalf("q1: %+v", j)
	}
	if j := one(t, h, time.Minute, "q2"); j.ID != ids[2] || j.Tries != 1 {
		t.Fatalf("q2: %+v", j)
	}
	none(t, h, "q1")
	h.Advance(1100 * time.Millisecond)
	if j := one(t, h, time.Minute, "q1"); j.ID != ids[3] {
		t.Fatalf("delayed: %+v", j)
	}
}

func testConsumeEach(t *testing.T, h *Harness) {
	var q []string
	for _, b := range []string{"1", "2", "3"} {
		q = append(q, pub(t, h, "q", b, nil))
	}
	r := pub(t, h, "r", "r", nil)
	reqs := []*engine.ConsumeRequest{
		{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 2},
		{Namespace: ns, Queues: []string{"e", "r"}, TTR: time.Minute, Count: 1, Timeout: 5 * time.Second},
		{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 5},
		{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 0},
		{Namespace: ns, Queues: []string{"e"}, TTR: time.Minute, Count: 1, Timeout: 5 * time.Second},
	}
	jobs, errs := make([][]*engine.Job, len(reqs)), make([]error, len(reqs))
	start := time.Now()
	h.Engine.ConsumeEach(bg, reqs, jobs, errs)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("ConsumeEach took %v: it must not wait", d)
	}
	ids := func(js []*engine.Job) (s []string) {
		for _, j := range js {
			s = append(s, j.ID)
		}
		return s
	}
	want := [][]string{q[:2], {r}, q[2:], nil, nil}
	for i := range reqs {
		if i == 3 {
			if !errors.Is(errs[i], engine.ErrInvalid) || len(jobs[i]) != 0 {
				t.Fatalf("count 0: %v %v, want ErrInvalid", ids(jobs[i]), errs[i])
			}
			continue
		}
		if errs[i] != nil || fmtIDs(ids(jobs[i])) != fmtIDs(want[i]) {
			t.Fatalf("request %d: %v %v, want %v", i, ids(jobs[i]), errs[i], want[i])
		}
	}
	if j := jobs[1][0]; j.Queue != "r" || string(j.Body) != "r" || j.Tries != 0 {
		t.Fatalf("job from r: %+v", j)
	}
	none(t, h, "q", "r")
}

func fmtIDs(s []string) string {
	out := ""
	for _, id := range s {
		out += id + ","
	}
	return out
}

func testDeleteEach(t *testing.T, h *Harness) {
	a := pub(t, h, "q", "a", func(r *engine.PublishRequest) { r.Tries = 2 })
	b := pub(t, h, "q", "b", func(r *engine.PublishRequest) { r.Tries = 2 })
	c := pub(t, h, "r", "c", func(r *engine.PublishRequest) { r.Tries = 2 })
	consume(t, h, time.Second, 2, "q")
	one(t, h, time.Second, "r")
	refs := []engine.JobRef{
		{Namespace: ns, Queue: "q", ID: a},
		{Namespace: ns, Queue: "r", ID: c},
		{Namespace: ns, Queue: "q", ID: "01M7YVBFN8AAS205RQ04000000"},
		{Namespace: "bad/ns", Queue: "q", ID: b},
	}
	errs := make([]error, len(refs))
	h.Engine.DeleteEach(bg, refs, errs)
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("ACK %d: %v", i, errs[i])
		}
	}
	if !errors.Is(errs[3], engine.ErrInvalid) {
		t.Fatalf("ACK with a bad namespace: %v, want ErrInvalid", errs[3])
	}
	// Only b comes back after its TTR.
	h.Advance(1100 * time.Millisecond)
	if j := one(t, h, time.Minute, "q", "r"); j.ID != b {
		t.Fatalf("after the TTRs: %s, want %s", j.ID, b)
	}
	none(t, h, "q", "r")
	for _, id := range []string{a, c} {
		if _, err := h.Engine.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("ACKed job %s: %v", id, err)
		}
	}
}

// testDeleteEachReceipts: a ref with a receipt is Ack's: the current
// delivery's ACK deletes the job, a stale receipt is ErrStaleReceipt and
// leaves it, an unknown job is ErrJobNotFound, a malformed receipt is
// ErrInvalid; lmstfy's ACKs in the same call are unchanged.
func testDeleteEachReceipts(t *testing.T, h *Harness) {
	b := pub(t, h, "q", "b", func(r *engine.PublishRequest) { r.Tries = 3 })
	stale := one(t, h, time.Second, "q")
	a := pub(t, h, "q", "a", func(r *engine.PublishRequest) { r.Tries = 3 })
	c := pub(t, h, "q", "c", func(r *engine.PublishRequest) { r.Tries = 3 })
	// b is delivered again after its TTR: its first receipt is stale.
	h.Advance(1100 * time.Millisecond)
	receipt := map[string]string{}
	var again *engine.Job
	for _, j := range consume(t, h, time.Minute, 3, "q") {
		receipt[j.ID] = j.Receipt
		if j.ID == b {
			again = j
		}
	}
	if again == nil || stale.ID != b || again.Receipt == stale.Receipt || len(receipt) != 3 {
		t.Fatalf("b was not delivered again with a new receipt: %+v, %v", again, receipt)
	}
	receipt[b] = stale.Receipt
	refs := []engine.JobRef{
		{Namespace: ns, Queue: "q", ID: a, Receipt: receipt[a]},
		{Namespace: ns, Queue: "q", ID: b, Receipt: receipt[b]},
		{Namespace: ns, Queue: "q", ID: "01M7YVBFN8AAS205RQ04000000", Receipt: receipt[a]},
		{Namespace: ns, Queue: "q", ID: c},
		{Namespace: ns, Queue: "q", ID: b, Receipt: "zz"},
	}
	errs := make([]error, len(refs))
	h.Engine.DeleteEach(bg, refs, errs)
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("current receipt's ACK: %v; lmstfy's ACK: %v", errs[0], errs[3])
	}
	if !errors.Is(errs[1], engine.ErrStaleReceipt) {
		t.Fatalf("stale receipt: %v, want ErrStaleReceipt", errs[1])
	}
	if !errors.Is(errs[2], engine.ErrJobNotFound) {
		t.Fatalf("unknown job: %v, want ErrJobNotFound", errs[2])
	}
	if errs[4] == nil {
		t.Fatal("malformed receipt: no error")
	}
	for _, id := range []string{a, c} {
		if _, err := h.Engine.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("ACKed job %s: %v", id, err)
		}
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", b); err != nil {
		t.Fatalf("b after a stale ACK: %v", err)
	}
	errs = errs[:1]
	h.Engine.DeleteEach(bg, []engine.JobRef{{Namespace: ns, Queue: "q", ID: b, Receipt: again.Receipt}}, errs)
	if errs[0] != nil {
		t.Fatalf("b's current receipt: %v", errs[0])
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", b); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("b after its ACK: %v", err)
	}
}

// testTogether: the steps of a pass act as if they had run one after the
// other: the consume gets the job the publish before it made, and the ACK
// before them both is done.
func testTogether(t *testing.T, h *Harness) {
	old := pub(t, h, "q", "old", nil)
	one(t, h, time.Minute, "q")
	for round := range 3 {
		var id string
		var jobs [][]*engine.Job
		var ran atomic.Int32 // the steps run side by side
		h.Engine.Together(bg,
			func(ctx context.Context) {
				errs := make([]error, 1)
				h.Engine.DeleteEach(ctx, []engine.JobRef{{Namespace: ns, Queue: "q", ID: old}}, errs)
				if errs[0] != nil {
					t.Errorf("round %d: ACK: %v", round, errs[0])
				}
				ran.Add(1)
			},
			func(ctx context.Context) {
				ids, errs := make([]string, 1), make([]error, 1)
				h.Engine.PublishEach(ctx, []*engine.PublishRequest{{Namespace: ns, Queue: "q", Body: []byte("x"), Tries: 1}}, ids, errs)
				if errs[0] != nil {
					t.Errorf("round %d: publish: %v", round, errs[0])
				}
				id = ids[0]
				ran.Add(1)
			},
			func(ctx context.Context) {
				jobs = make([][]*engine.Job, 1)
				errs := make([]error, 1)
				h.Engine.ConsumeEach(ctx, []*engine.ConsumeRequest{{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1}}, jobs, errs)
				if errs[0] != nil {
					t.Errorf("round %d: consume: %v", round, errs[0])
				}
				ran.Add(1)
			})
		if t.Failed() {
			t.FailNow()
		}
		// Together returns once every step has: no lock needed to read.
		if ran.Load() != 3 || len(jobs[0]) != 1 || jobs[0][0].ID != id {
			t.Fatalf("round %d: %d steps ran, consumed %v, want the job %s published before", round, ran.Load(), jobs[0], id)
		}
		if _, err := h.Engine.PeekJob(bg, ns, "q", old); !errors.Is(err, engine.ErrJobNotFound) {
			t.Fatalf("round %d: job ACKed in the pass: %v", round, err)
		}
		old = id
	}
}

// awaitJob long-polls queues as an event loop does: watch, look when told
// to or when woken, until a look finds a job or within passes. ok is false
// when the engine cannot watch.
func awaitJob(t *testing.T, h *Harness, within time.Duration, queues ...string) (job *engine.Job, ok bool) {
	t.Helper()
	deadline := time.After(within)
	lookNow := func() *engine.Job {
		jobs, errs := make([][]*engine.Job, 1), make([]error, 1)
		h.Engine.ConsumeEach(bg, []*engine.ConsumeRequest{{Namespace: ns, Queues: queues, TTR: time.Minute, Count: 1, Timeout: within}}, jobs, errs)
		if errs[0] != nil {
			t.Errorf("look: %v", errs[0])
		}
		if len(jobs[0]) > 0 {
			return jobs[0][0]
		}
		return nil
	}
	for {
		fired := make(chan struct{}, 1)
		stop, look, ok := h.Engine.Watch(ns, queues, func() { fired <- struct{}{} })
		if !ok {
			return nil, false
		}
		if look {
			if j := lookNow(); j != nil {
				stop()
				return j, true
			}
		}
		select {
		case <-fired:
			if j := lookNow(); j != nil {
				return j, true
			}
		case <-deadline:
			stop()
			return nil, true
		}
	}
}

// testWatch: a watch is woken by a publish and by a delayed job falling
// due (an engine that cannot watch says so, and its consumers wait with
// Consume).
func testWatch(t *testing.T, h *Harness) {
	type got struct {
		job *engine.Job
		ok  bool
	}
	await := func(queues ...string) chan got {
		c := make(chan got, 1)
		go func() {
			j, ok := awaitJob(t, h, 5*time.Second, queues...)
			c <- got{j, ok}
		}()
		return c
	}
	c := await("x", "q")
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	id := pub(t, h, "q", "wake", nil)
	g := <-c
	if !g.ok {
		t.Log("the engine cannot watch")
		return
	}
	if g.job == nil || g.job.ID != id {
		t.Fatalf("watching consumer got %+v, want %s", g.job, id)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("woken %v after the publish", d)
	}
	id = pub(t, h, "q", "later", func(r *engine.PublishRequest) { r.Delay = time.Second })
	c = await("q")
	time.Sleep(100 * time.Millisecond)
	h.Advance(1100 * time.Millisecond)
	if g := <-c; g.job == nil || g.job.ID != id {
		t.Fatalf("watching consumer got %+v, want the delayed %s", g.job, id)
	}
}
