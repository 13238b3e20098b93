package enginetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// testAttempts follows one job through four deliveries: released keeping
// its try, nacked with an error, its TTR run out, nacked on its last try
// (dead). Peek job shows each delivery newest first with its worker,
// outcome, times and error; the dead letter shows the last error and
// filters on it; deleting the dead job deletes its history.
func testAttempts(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "a", func(r *engine.PublishRequest) { r.Tries = 3 })
	get := func() *engine.Job {
		t.Helper()
		j, err := x.PeekJob(bg, ns, "q", id)
		if err != nil {
			t.Fatalf("peek job: %v", err)
		}
		return j
	}
	if j := get(); len(j.Attempts) != 0 || j.LastError != "" {
		t.Fatalf("before any delivery: %+v, %q", j.Attempts, j.LastError)
	}
	take := func(worker string) *engine.Job {
		t.Helper()
		jobs, err := x.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{"q"}, TTR: time.Minute, Count: 1, Worker: worker})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("consume: %v, %d jobs", err, len(jobs))
		}
		return jobs[0]
	}
	d1 := take("w-1")
	if j := get(); len(j.Attempts) != 1 || // the named delivery's open entry, once
		!j.Attempts[0].Start.Equal(d1.DueAt.Add(-time.Minute)) || j.Attempts[0].Outcome != engine.OutcomeInFlight ||
		j.Attempts[0].Worker != "w-1" || j.Attempts[0].Delivery != 1 || j.Attempts[0].Start.IsZero() || !j.Attempts[0].End.IsZero() {
		t.Fatalf("in flight: %+v", j.Attempts)
	}
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d1.Receipt, KeepTry: true}); err != nil {
		t.Fatal(err)
	}
	d2 := take("w-2")
	long := strings.Repeat("é", engine.MaxErrorText) // 2 bytes each: cut at 4096 bytes
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d2.Receipt, Error: "boom: db | down\n" + long}); err != nil {
		t.Fatal(err)
	}
	d3 := take("")
	// A nameless delivery writes nothing; peek shows it from the header,
	// its start from the receipt.
	if j := get(); len(j.Attempts) != 3 || j.Attempts[0].Outcome != engine.OutcomeInFlight || j.Attempts[0].Delivery != 3 ||
		!j.Attempts[0].Start.Equal(d3.DueAt.Add(-time.Minute)) || j.Attempts[1].Delivery != 2 {
		t.Fatalf("nameless in flight: %+v (due %v)", j.Attempts, d3.DueAt)
	}
	h.Advance(2 * time.Minute) // the TTR of delivery 3 runs out
	j := get()
	if len(j.Attempts) != 3 {
		t.Fatalf("after 3 deliveries: %+v", j.Attempts)
	}
	a3, a2, a1 := j.Attempts[0], j.Attempts[1], j.Attempts[2]
	if a1.Outcome != engine.OutcomeReleased || a1.Worker != "w-1" || a1.Error != "" || a1.End.Before(a1.Start) {
		t.Fatalf("delivery 1: %+v", a1)
	}
	if a2.Outcome != engine.OutcomeNacked || a2.Worker != "w-2" || a2.Delivery != 2 ||
		!strings.HasPrefix(a2.Error, "boom: db | down\n") || len(a2.Error) > engine.MaxErrorText || len(a2.Error) < engine.MaxErrorText-1 {
		t.Fatalf("delivery 2: %q %s %d bytes of error", a2.Outcome, a2.Worker, len(a2.Error))
	}
	if a3.Outcome != engine.OutcomeTTRExpired || a3.Delivery != 3 || a3.Worker != "" || !a3.End.Equal(d3.DueAt) ||
		a3.End.Sub(a3.Start) != time.Minute {
		t.Fatalf("delivery 3: %+v (due %v)", a3, d3.DueAt)
	}
	if j.LastError != a2.Error {
		t.Fatalf("last error %q", j.LastError)
	}
	d4 := take("w-4")
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d4.Receipt, Error: "gave up"}); err != nil {
		t.Fatal(err)
	}
	if j := get(); j.State != engine.StateDead || len(j.Attempts) != 4 || j.Attempts[0].Error != "gave up" || j.LastError != "gave up" {
		t.Fatalf("dead: %s %+v", j.State, j.Attempts)
	}
	// A second dead job without error: the error filter leaves it out.
	other := pub(t, h, "q", "b", nil)
	o := take("")
	if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: other, Receipt: o.Receipt}); err != nil {
		t.Fatal(err)
	}
	page, err := x.ListDeadLetterPage(bg, ns, "q", engine.DeadLetterQuery{Limit: 10, Newest: true})
	if err != nil || len(page.Jobs) != 2 || page.Jobs[0].ID != other || page.Jobs[1].ID != id ||
		page.Jobs[0].LastError != "" || page.Jobs[1].LastError != "gave up" {
		t.Fatalf("dead letter: %v %+v", err, page.Jobs)
	}
	page, err = x.ListDeadLetterPage(bg, ns, "q", engine.DeadLetterQuery{Limit: 10, Error: "gave", Reason: engine.ReasonNacked})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != id || page.Next != -1 {
		t.Fatalf("dead letter by error: %v %+v", err, page)
	}
	page, err = x.ListDeadLetterPage(bg, ns, "q", engine.DeadLetterQuery{Limit: 10, Error: "nothing like it"})
	if err != nil || len(page.Jobs) != 0 || page.Size != 2 {
		t.Fatalf("dead letter by another error: %v %+v", err, page)
	}
	// Respawned, the job keeps its history; deleted, it loses it.
	if err := x.RespawnDeadJob(bg, ns, "q", id, time.Hour); err != nil {
		t.Fatal(err)
	}
	d5 := take("w-5")
	if j := get(); len(j.Attempts) != 5 || j.Attempts[0].Delivery != 5 || j.Attempts[0].Outcome != engine.OutcomeInFlight {
		t.Fatalf("respawned: %+v", j.Attempts)
	}
	if err := x.Ack(bg, ns, "q", id, d5.Receipt); err != nil {
		t.Fatal(err)
	}
	if _, err := x.PeekJob(bg, ns, "q", id); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("after ACK: %v", err)
	}
	// The same ID published again starts with no history (ACK deleted it).
	again := pub(t, h, "q", "c", func(r *engine.PublishRequest) { r.ID = id })
	if j, err := x.PeekJob(bg, ns, "q", again); err != nil || len(j.Attempts) != 0 {
		t.Fatalf("republished: %v %+v", err, j)
	}
}

// testAttemptsKeepLast16: a job delivered 20 times keeps its last 16.
func testAttemptsKeepLast16(t *testing.T, h *Harness, x engine.Engine) {
	id := pub(t, h, "q", "a", func(r *engine.PublishRequest) { r.Tries = 100 })
	for i := 0; i < 20; i++ {
		d := one(t, h, time.Minute, "q")
		if err := x.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: "q", ID: id, Receipt: d.Receipt, Error: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := x.PeekJob(bg, ns, "q", id)
	if err != nil || len(j.Attempts) != engine.MaxAttempts || j.Attempts[0].Delivery != 20 || j.Attempts[15].Delivery != 5 {
		t.Fatalf("%v %+v", err, j.Attempts)
	}
}
