package enginetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// RunExtended runs the suite of the Kairos extensions (engine.Extensions).
func RunExtended(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *Harness, engine.Engine)
	}{
		{"ReleaseAndReceipts", testRelease},
		{"ReleaseDelayed", testReleaseDelayed},
		{"ReleaseLastTryDies", testReleaseDies},
		{"BackoffLadder", testBackoffLadder},
		{"BackoffOnNack", testBackoffOnNack},
		{"Touch", testTouch},
		{"Priority", testJobPriority},
		{"IdempotencyKey", testIdempotencyKey},
		{"PauseResume", testPause},
		{"DeadLetterBrowsing", testDeadLetterBrowsing},
		{"DeadLetterPages", testDeadLetterPages},
		{"DeadTTL", testDeadTTL},
		{"Inspection", testInspection},
		{"TraceContext", testTraceContext},
		{"Attempts", testAttempts},
		{"AttemptsKeepLast16", testAttemptsKeepLast16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := f(t)
			tc.fn(t, h, h.Engine)
		})
	}
}

func testRelease(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "r", func(r *engine.PublishRequest) { r.Tries = 2 })
	first := one(t, h, time.Second, "q")
	if first.Receipt == "" || first.Deliveries != 1 || first.Tries != 1 {
		t.Fatalf("delivery %+v", first)
	}
	// Released at once, keeping the try: ready again with 2 tries.
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: first.Receipt, KeepTry: true}); err != nil {
		t.Fatal(err)
	}
	// The receipt is spent.
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: first.Receipt}); !errors.Is(err, engine.ErrStaleReceipt) {
		t.Fatalf("second release with one receipt: %v", err)
	}
	second := one(t, h, time.Second, "q")
	if second.ID != id || second.Tries != 1 || second.Deliveries != 2 || second.Receipt == first.Receipt {
		t.Fatalf("redelivery %+v", second)
	}
	// A stale delivery cannot ACK the new one; the current one can.
	if err := x.Ack(bg, ns, "q", id, first.Receipt); !errors.Is(err, engine.ErrStaleReceipt) {
		t.Fatalf("ack with stale receipt: %v", err)
	}
	if err := x.Ack(bg, ns, "q", id, second.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := x.Ack(bg, ns, "q", id, second.Receipt); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("ack of an acked job: %v", err)
	}
	// After a TTR expiry and redelivery, the first receipt is stale too.
	id2 := pub(t, h, "q", "t", func(r *engine.PublishRequest) { r.Tries = 3 })
	d1 := one(t, h, 100*time.Millisecond, "q")
	h.Advance(200 * time.Millisecond)
	d2 := one(t, h, time.Minute, "q")
	if d2.ID != id2 {
		t.Fatalf("got %s", d2.ID)
	}
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id2, Receipt: d1.Receipt}); !errors.Is(err, engine.ErrStaleReceipt) {
		t.Fatalf("release by a stale delivery: %v", err)
	}
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id2, Receipt: "zz"}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("malformed receipt: %v", err)
	}
}

func testReleaseDelayed(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "r", func(r *engine.PublishRequest) { r.Tries = 3 })
	d := one(t, h, time.Minute, "q")
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d.Receipt, Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	none(t, h, "q")
	j, err := h.Engine.PeekJob(bg, ns, "q", id)
	if err != nil || j.State != engine.StateDelayed || j.Tries != 2 {
		t.Fatalf("released job %+v %v", j, err)
	}
	// Real time flows too while the test runs: margins of 500 ms keep the
	// test exact on a loaded machine under -race (as testDelay's).
	h.Advance(1500 * time.Millisecond)
	none(t, h, "q")
	h.Advance(600 * time.Millisecond)
	if j := one(t, h, time.Minute, "q"); j.ID != id || j.Tries != 1 {
		t.Fatalf("got %+v", j)
	}
}

func testReleaseDies(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "r", nil)
	d := one(t, h, time.Minute, "q")
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d.Receipt}); err != nil {
		t.Fatal(err)
	}
	dl := deadLetter(t, h, "q")
	if dl.Size != 1 || dl.Head != id {
		t.Fatalf("dead letter %+v", dl)
	}
	j, err := h.Engine.PeekJob(bg, ns, "q", id)
	if err != nil || j.State != engine.StateDead || j.DeadReason != engine.ReasonNacked || j.TTL != 0 {
		t.Fatalf("dead job %+v %v", j, err)
	}
}

func testBackoffLadder(t *testing.T, h *Harness, x engine.Engine) {
	b, err := engine.ParseBackoff("1s,3s")
	if err != nil {
		t.Fatal(err)
	}
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Backoff: b}); err != nil {
		t.Fatal(err)
	}
	cfg, err := x.QueueConfig(bg, ns, "q")
	if err != nil || cfg.Backoff.String() != "1s,3s" {
		t.Fatalf("config %+v %v", cfg, err)
	}
	id := pub(t, h, "q", "b", func(r *engine.PublishRequest) { r.Tries = 4 })
	for i, wait := range []time.Duration{time.Second, 3 * time.Second, 3 * time.Second} {
		if j := one(t, h, 100*time.Millisecond, "q"); j.ID != id {
			t.Fatalf("delivery %d: got %s", i, j.ID)
		}
		h.Advance(150 * time.Millisecond) // TTR expires: retry after the backoff step
		none(t, h, "q")
		// Not before the step, with a margin of 500 ms of real time (a
		// loaded machine under -race ran out of 100 ms); a wrong rung
		// (1s where 3s is due, or no backoff) is still caught.
		h.Advance(wait - 500*time.Millisecond)
		none(t, h, "q")
		h.Advance(500 * time.Millisecond)
	}
	if j := one(t, h, 100*time.Millisecond, "q"); j.ID != id || j.Tries != 0 {
		t.Fatalf("last delivery %+v", j)
	}
	h.Advance(150 * time.Millisecond)
	if dl := deadLetter(t, h, "q"); dl.Size != 1 {
		t.Fatalf("dead letter %+v", dl)
	}
	j, _ := h.Engine.PeekJob(bg, ns, "q", id)
	if j.DeadReason != engine.ReasonTTRExpired || j.Deliveries != 4 {
		t.Fatalf("dead job %+v", j)
	}
}

func testBackoffOnNack(t *testing.T, h *Harness, x engine.Engine) {
	b, _ := engine.ParseBackoff("fixed:2s")
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Backoff: b}); err != nil {
		t.Fatal(err)
	}
	id := pub(t, h, "q", "n", func(r *engine.PublishRequest) { r.Tries = 3 })
	d := one(t, h, time.Minute, "q")
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d.Receipt, UsePolicy: true}); err != nil {
		t.Fatal(err)
	}
	h.Advance(1500 * time.Millisecond) // margins of 500 ms, as in testRelease
	none(t, h, "q")
	h.Advance(600 * time.Millisecond)
	if j := one(t, h, time.Minute, "q"); j.ID != id {
		t.Fatalf("got %s", j.ID)
	}
}

func testTouch(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "t", func(r *engine.PublishRequest) { r.Tries = 2 })
	d := one(t, h, time.Second, "q")
	due, err := x.Touch(bg, ns, "q", id, d.Receipt, 5*time.Second)
	if err != nil || due.Before(time.Now()) {
		t.Fatalf("touch = %v %v", due, err)
	}
	h.Advance(2 * time.Second)
	none(t, h, "q")
	h.Advance(3100 * time.Millisecond)
	if j := one(t, h, time.Minute, "q"); j.ID != id {
		t.Fatalf("got %s", j.ID)
	}
	if _, err := x.Touch(bg, ns, "q", id, d.Receipt, time.Second); !errors.Is(err, engine.ErrStaleReceipt) {
		t.Fatalf("touch by a stale delivery: %v", err)
	}
}

func testJobPriority(t *testing.T, h *Harness, x engine.Engine) {
	a := pub(t, h, "q", "a", nil)
	b := pub(t, h, "q", "b", func(r *engine.PublishRequest) { r.Priority = 5 })
	c := pub(t, h, "q", "c", func(r *engine.PublishRequest) { r.Priority = 5 })
	d := pub(t, h, "q", "d", func(r *engine.PublishRequest) { r.Priority = 9 })
	e := pub(t, h, "q", "e", func(r *engine.PublishRequest) { r.Priority = 7; r.Delay = time.Second })
	if p, err := h.Engine.PeekQueue(bg, ns, "q"); err != nil || p.ID != d {
		t.Fatalf("peek = %v %v, want the priority 9 job", p, err)
	}
	if n, _ := h.Engine.Size(bg, ns, "q"); n != 4 {
		t.Fatalf("size %d", n)
	}
	h.Advance(1100 * time.Millisecond)
	for _, want := range []string{d, e, b, c, a} {
		if j := one(t, h, time.Minute, "q"); j.ID != want {
			t.Fatalf("got %s (%q), want %s", j.ID, j.Body, want)
		}
	}
	if _, err := h.Engine.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Tries: 1, Priority: 256}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("priority 256: %v", err)
	}
}

func testIdempotencyKey(t *testing.T, h *Harness, x engine.Engine) {
	first := pub(t, h, "q", "once", func(r *engine.PublishRequest) { r.Key = "order-42" })
	again, err := h.Engine.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: "q", Body: []byte("twice"), Tries: 1, TTL: time.Hour, Key: "order-42"})
	if !errors.Is(err, engine.ErrKeyExists) || again != first {
		t.Fatalf("second publish = %q, %v; want %q and ErrKeyExists", again, err, first)
	}
	if n, _ := h.Engine.Size(bg, ns, "q"); n != 1 {
		t.Fatalf("size %d", n)
	}
	id, err := x.CancelKey(bg, ns, "q", "order-42")
	if err != nil || id != first {
		t.Fatalf("cancel = %q %v", id, err)
	}
	none(t, h, "q")
	if _, err := x.CancelKey(bg, ns, "q", "order-42"); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("cancel again: %v", err)
	}
	if third := pub(t, h, "q", "new", func(r *engine.PublishRequest) { r.Key = "order-42" }); third == first {
		t.Fatal("a cancelled key still returned the old job")
	}
	// A key lives as long as its job's TTL.
	pub(t, h, "q", "short", func(r *engine.PublishRequest) { r.Key = "k2"; r.TTL = 100 * time.Millisecond })
	h.Elapse(300 * time.Millisecond)
	pub(t, h, "q", "later", func(r *engine.PublishRequest) { r.Key = "k2" })
}

func testPause(t *testing.T, h *Harness, x engine.Engine) {
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{Paused: true}); err != nil {
		t.Fatal(err)
	}
	id := pub(t, h, "q", "p", nil)
	none(t, h, "q")
	if cfg, _ := x.QueueConfig(bg, ns, "q"); !cfg.Paused {
		t.Fatal("config does not say paused")
	}
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, _ := h.Engine.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Timeout: 3 * time.Second})
		got <- jobs
	}()
	time.Sleep(100 * time.Millisecond)
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("after resume got %v", jobs)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a waiting consumer was not served after resume")
	}
}

// killMixed kills one job per reason in reasons, in that order, and
// returns their IDs in order of death.
func killMixed(t *testing.T, h *Harness, x engine.Engine, reasons ...engine.DeadReason) []string {
	t.Helper()
	var ids []string
	for i, r := range reasons {
		id := pub(t, h, "q", fmt.Sprint(i), nil)
		switch r {
		case engine.ReasonNacked:
			d := one(t, h, time.Minute, "q")
			if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d.Receipt, Reason: r}); err != nil {
				t.Fatal(err)
			}
		default:
			one(t, h, 0, "q")
		}
		h.Advance(time.Millisecond)
		if n, err := x.DeadLetterSize(bg, ns, "q"); err != nil || n != int64(i+1) {
			t.Fatalf("after %d deaths the dead letter holds %d (%v)", i+1, n, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// pageIDs lists a page and returns its job IDs.
func pageIDs(t *testing.T, x engine.Engine, q engine.DeadLetterQuery) ([]string, engine.DeadLetterPage) {
	t.Helper()
	p, err := x.ListDeadLetterPage(bg, ns, "q", q)
	if err != nil {
		t.Fatalf("list %+v: %v", q, err)
	}
	ids := []string{}
	for _, j := range p.Jobs {
		ids = append(ids, j.ID)
	}
	return ids, p
}

func testDeadLetterPages(t *testing.T, h *Harness, x engine.Engine) {
	T, N := engine.ReasonTTRExpired, engine.ReasonNacked
	ids := killMixed(t, h, x, T, N, T, N, N)
	type want struct {
		ids        []string
		next, size int64
	}
	for _, tc := range []struct {
		name string
		q    engine.DeadLetterQuery
		want want
	}{
		{"oldest first", engine.DeadLetterQuery{Limit: 2}, want{[]string{ids[0], ids[1]}, 2, 5}},
		{"oldest, last page", engine.DeadLetterQuery{Offset: 4, Limit: 2}, want{[]string{ids[4]}, -1, 5}},
		{"newest first", engine.DeadLetterQuery{Limit: 2, Newest: true}, want{[]string{ids[4], ids[3]}, 2, 5}},
		{"newest, second page", engine.DeadLetterQuery{Offset: 2, Limit: 2, Newest: true}, want{[]string{ids[2], ids[1]}, 4, 5}},
		{"newest, last page", engine.DeadLetterQuery{Offset: 4, Limit: 2, Newest: true}, want{[]string{ids[0]}, -1, 5}},
		{"past the end", engine.DeadLetterQuery{Offset: 9, Limit: 2, Newest: true}, want{[]string{}, -1, 5}},
		{"nacked, newest first", engine.DeadLetterQuery{Limit: 2, Newest: true, Reason: N}, want{[]string{ids[4], ids[3]}, 2, 5}},
		{"nacked, newest, next page", engine.DeadLetterQuery{Offset: 2, Limit: 2, Newest: true, Reason: N}, want{[]string{ids[1]}, -1, 5}},
		{"ttr expired, oldest first", engine.DeadLetterQuery{Limit: 5, Reason: T}, want{[]string{ids[0], ids[2]}, -1, 5}},
		{"ttr expired, one", engine.DeadLetterQuery{Limit: 1, Reason: T}, want{[]string{ids[0]}, 1, 5}},
		// The scan bound: two entries examined, one of them a match.
		{"nacked, scan bound", engine.DeadLetterQuery{Limit: 5, Reason: N, Scan: 2}, want{[]string{ids[1]}, 2, 5}},
		{"webhook failed, none", engine.DeadLetterQuery{Limit: 5, Reason: engine.ReasonWebhookFailed}, want{[]string{}, -1, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, p := pageIDs(t, x, tc.q)
			if fmt.Sprint(got) != fmt.Sprint(tc.want.ids) || p.Next != tc.want.next || p.Size != tc.want.size {
				t.Fatalf("got %v next %d size %d, want %+v", got, p.Next, p.Size, tc.want)
			}
			for _, j := range p.Jobs {
				if j.State != engine.StateDead || (tc.q.Reason != "" && j.DeadReason != tc.q.Reason) {
					t.Fatalf("listed %+v", j)
				}
			}
		})
	}
	// The default is ListDeadLetter's.
	old, err := x.ListDeadLetter(bg, ns, "q", 1, 3)
	if err != nil || len(old) != 3 || old[0].ID != ids[1] || old[2].ID != ids[3] {
		t.Fatalf("ListDeadLetter = %v, %v", old, err)
	}
	for _, q := range []engine.DeadLetterQuery{{Limit: 0}, {Limit: 1, Offset: -1}, {Limit: 1, Reason: "bored"}} {
		if _, err := x.ListDeadLetterPage(bg, ns, "q", q); !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("list %+v: %v, want ErrInvalid", q, err)
		}
	}
}

func testDeadLetterBrowsing(t *testing.T, h *Harness, x engine.Engine) {
	ids := killThree(t, h)
	page, err := x.ListDeadLetter(bg, ns, "q", 0, 2)
	if err != nil || len(page) != 2 || page[0].ID != ids[0] || page[1].ID != ids[1] {
		t.Fatalf("page 1 = %v %v", page, err)
	}
	if string(page[0].Body) != "0" || page[0].State != engine.StateDead || page[0].DeadReason != engine.ReasonTTRExpired || page[0].DeadAt.IsZero() {
		t.Fatalf("dead job %+v", page[0])
	}
	page, _ = x.ListDeadLetter(bg, ns, "q", 2, 2)
	if len(page) != 1 || page[0].ID != ids[2] {
		t.Fatalf("page 2 = %v", page)
	}
	if err := x.RespawnDeadJob(bg, ns, "q", ids[1], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := x.RespawnDeadJob(bg, ns, "q", ids[1], time.Minute); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("respawn of a job that is not dead: %v", err)
	}
	if j := one(t, h, time.Minute, "q"); j.ID != ids[1] || j.TTL > time.Minute {
		t.Fatalf("respawned %+v", j)
	}
	if err := x.DeleteDeadJob(bg, ns, "q", ids[0]); err != nil {
		t.Fatal(err)
	}
	if dl := deadLetter(t, h, "q"); dl.Size != 1 || dl.Head != ids[2] {
		t.Fatalf("dead letter %+v", dl)
	}
	if _, err := h.Engine.PeekJob(bg, ns, "q", ids[0]); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("deleted dead job: %v", err)
	}
}

func testDeadTTL(t *testing.T, h *Harness, x engine.Engine) {
	if err := x.SetQueueConfig(bg, ns, "q", engine.QueueConfig{DeadTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	id := pub(t, h, "q", "d", func(r *engine.PublishRequest) { r.TTL = 0 })
	one(t, h, 0, "q")
	h.Advance(time.Millisecond)
	j, err := h.Engine.PeekJob(bg, ns, "q", id)
	if err != nil || j.State != engine.StateDead || j.TTL <= 59*time.Minute || j.TTL > time.Hour {
		t.Fatalf("dead job with dead TTL: %+v %v", j, err)
	}
}

func testInspection(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "i", func(r *engine.PublishRequest) { r.Delay = time.Second; r.Tries = 2 })
	j, err := h.Engine.PeekJob(bg, ns, "q", id)
	if err != nil || j.State != engine.StateDelayed || j.Tries != 2 || j.DueAt.IsZero() {
		t.Fatalf("delayed %+v %v", j, err)
	}
	h.Advance(1100 * time.Millisecond)
	if j, _ = h.Engine.PeekJob(bg, ns, "q", id); j.State != engine.StateReady {
		t.Fatalf("due %+v", j)
	}
	one(t, h, 10*time.Second, "q")
	if j, _ = h.Engine.PeekJob(bg, ns, "q", id); j.State != engine.StateInFlight || j.Tries != 1 || j.Deliveries != 1 || j.DueAt.IsZero() {
		t.Fatalf("in flight %+v", j)
	}
}

// testTraceContext: a publish's W3C trace context is stored with the job
// and comes back with each delivery (single, batch and ConsumeEach), after
// a TTR expiry, a release, in peeks, in the dead letter and after a
// respawn; v0 and v1 jobs, single and batch publishes alike.
func testTraceContext(t *testing.T, h *Harness, x engine.Engine) {
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	)
	traced := func(r *engine.PublishRequest) { r.TraceParent, r.TraceState = tp, ts; r.Tries = 3 }
	check := func(what string, j *engine.Job, wantTP, wantTS string) {
		t.Helper()
		if j == nil || j.TraceParent != wantTP || j.TraceState != wantTS {
			t.Fatalf("%s: job %+v, want traceparent %q tracestate %q", what, j, wantTP, wantTS)
		}
	}
	body := "b\x00\xff"
	v0 := pub(t, h, "q", body, traced)
	v1 := pub(t, h, "q", body, func(r *engine.PublishRequest) {
		traced(r)
		r.TraceState = ""
		r.Versioned, r.Attributes = true, map[string]string{"k": "v"}
	})
	plain := pub(t, h, "q", body, nil)
	jobs := consume(t, h, time.Second, 3, "q")
	if len(jobs) != 3 {
		t.Fatalf("consumed %d jobs, want 3", len(jobs))
	}
	for _, j := range jobs {
		if string(j.Body) != body {
			t.Fatalf("job %s body %q, want %q", j.ID, j.Body, body)
		}
		switch j.ID {
		case v0:
			check("v0 delivery", j, tp, ts)
		case v1:
			check("v1 delivery", j, tp, "")
			if j.Attributes["k"] != "v" {
				t.Fatalf("v1 attributes %v", j.Attributes)
			}
		case plain:
			check("plain delivery", j, "", "")
		}
	}
	// The TTR runs out: the redelivery still has it.
	h.Advance(1100 * time.Millisecond)
	var v0d *engine.Job
	for _, j := range consume(t, h, time.Minute, 3, "q") {
		if j.ID == v0 {
			v0d = j
		}
	}
	check("redelivery after the TTR", v0d, tp, ts)
	// Released on its last try (tries 3, deliveries 3): dead, with it.
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: v0, Receipt: v0d.Receipt}); err != nil {
		t.Fatal(err)
	}
	j := one(t, h, time.Minute, "q")
	if j.ID == v0 {
		check("redelivery after a release", j, tp, ts)
		if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: v0, Receipt: j.Receipt}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := h.Engine.PeekJob(bg, ns, "q", v0)
	if err != nil {
		t.Fatal(err)
	}
	check("peek job", p, tp, ts)
	if p.State != engine.StateDead || string(p.Body) != body {
		t.Fatalf("peeked %+v, want a dead job with its body", p)
	}
	dead, err := x.ListDeadLetter(bg, ns, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var d *engine.Job
	for _, j := range dead {
		if j.ID == v0 {
			d = j
		}
	}
	check("dead letter", d, tp, ts)
	if err := x.RespawnDeadJob(bg, ns, "q", v0, time.Minute); err != nil {
		t.Fatal(err)
	}
	var got *engine.Job
	for _, j := range consume(t, h, time.Minute, 3, "q") {
		if j.ID == v0 {
			got = j
		}
	}
	check("respawned", got, tp, ts)
	// Batch publishes: every job of the batch, and PublishEach.
	ids, err := h.Engine.PublishBatch(bg, []*engine.PublishRequest{
		{Namespace: ns, Queue: "b", Body: []byte("1"), TTL: time.Hour, Tries: 1, TraceParent: tp},
		{Namespace: ns, Queue: "b", Body: []byte("2"), TTL: time.Hour, Tries: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	each := []*engine.PublishRequest{{Namespace: ns, Queue: "b", Body: []byte("3"), TTL: time.Hour, Tries: 1, TraceParent: tp, TraceState: ts}}
	eachIDs, errs := make([]string, 1), make([]error, 1)
	x.PublishEach(bg, each, eachIDs, errs)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	reqs := []*engine.ConsumeRequest{{Namespace: ns, Queues: []string{"b"}, TTR: time.Minute, Count: 3}}
	out, cerrs := make([][]*engine.Job, 1), make([]error, 1)
	x.ConsumeEach(bg, reqs, out, cerrs)
	if cerrs[0] != nil || len(out[0]) != 3 {
		t.Fatalf("ConsumeEach = %v %v", out[0], cerrs[0])
	}
	want := map[string][2]string{ids[0]: {tp, ""}, ids[1]: {"", ""}, eachIDs[0]: {tp, ts}}
	for _, j := range out[0] {
		w := want[j.ID]
		check("batch "+string(j.Body), j, w[0], w[1])
	}
}
