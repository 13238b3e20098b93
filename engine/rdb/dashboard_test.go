package rdb

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestDashboardReads: a queue with ready (plain and priority), delayed,
// in-flight and dead jobs, paused, with history; NamespaceQueues,
// QueueDetails, ListJobs (every list, paged) and FindJob see each as it
// is.
func TestDashboardReads(t *testing.T) {
	e, _, clock, _ := historyEngine(t)
	pub := func(q string, r engine.PublishRequest) string {
		t.Helper()
		r.Namespace, r.Queue = "ns", q
		if r.Tries == 0 {
			r.Tries = 3
		}
		id, err := e.Publish(bg, &r)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	start := clock.Now()
	var ready []string
	for i := 0; i < 5; i++ {
		ready = append(ready, pub("q", engine.PublishRequest{Body: []byte(fmt.Sprint("r", i))}))
		clock.Add(time.Second)
	}
	prio := pub("q", engine.PublishRequest{Body: []byte("p"), Priority: 9})
	delayed := pub("q", engine.PublishRequest{Body: []byte("d"), Delay: time.Hour})
	flying := pub("q", engine.PublishRequest{Body: []byte("f"), Priority: 200})
	got, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Minute, Count: 1})
	if err != nil || len(got) != 1 || got[0].ID != flying {
		t.Fatalf("consume: %v %v", got, err)
	}
	dead := pub("q", engine.PublishRequest{Body: []byte("x"), Tries: 1, Priority: 255})
	got, err = e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Second, Count: 1})
	if err != nil || len(got) != 1 || got[0].ID != dead {
		t.Fatalf("consume: %v %v", got, err)
	}
	if err := e.Release(bg, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: dead, Receipt: got[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	pub("other", engine.PublishRequest{Body: []byte("o")})
	if err := e.SetQueueConfig(bg, "ns", "q", engine.QueueConfig{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	// The rates count complete minutes before now: move to the next one.
	clock.Add(time.Minute)

	stats, err := e.NamespaceQueues(bg, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Queue != "other" || stats[1].Queue != "q" ||
		stats[1].Ready != 6 || stats[1].Timer != 2 || stats[1].DeadLetter != 1 || stats[0].Ready != 1 {
		t.Fatalf("NamespaceQueues = %+v", stats)
	}

	details, err := e.QueueDetails(bg, "ns", []string{"q", "other", "none"})
	if err != nil {
		t.Fatal(err)
	}
	d := details[0]
	if d.Ready != 6 || d.Timer != 2 || d.Delayed != 1 || d.InFlight != 1 || !d.InFlightExact || d.DeadLetter != 1 || !d.Paused {
		t.Errorf("details of q: %+v", d)
	}
	if want := start.Truncate(time.Millisecond); !d.OldestReady.Equal(want) {
		t.Errorf("oldest ready %v, want %v (the first job's publish)", d.OldestReady, want)
	}
	if d.Recent.Published != 9 || d.Recent.Consumed != 2 || d.Recent.Dead != 1 {
		t.Errorf("recent counts of q: %+v", d.Recent)
	}
	if n := details[2]; n.Ready != 0 || n.Timer != 0 || !n.OldestReady.IsZero() || n.Paused {
		t.Errorf("details of a queue that does not exist: %+v", n)
	}
	if d.Current != (engine.Counts{}) {
		t.Errorf("QueueDetails read the current minute: %+v", d.Current)
	}

	// The activity: the same without the timer's split, and the current
	// minute's counts beside the recent ones.
	pub("other", engine.PublishRequest{Body: []byte("now")})
	if err := e.FlushHistory(bg); err != nil {
		t.Fatal(err)
	}
	act, err := e.QueueActivity(bg, "ns", []string{"q", "other"})
	if err != nil || len(act) != 2 {
		t.Fatalf("QueueActivity: %v %v", act, err)
	}
	a := act[0]
	if a.Queue != "q" || a.Ready != 6 || a.Timer != 2 || a.DeadLetter != 1 || !a.Paused || !a.OldestReady.Equal(d.OldestReady) ||
		a.InFlight != 0 || a.Delayed != 0 || a.InFlightExact {
		t.Errorf("activity of q: %+v", a)
	}
	if a.Recent.Published != 9 || a.Recent.Dead != 1 || a.Current != (engine.Counts{}) {
		t.Errorf("activity counts of q: recent %+v, current %+v", a.Recent, a.Current)
	}
	if o := act[1]; o.Queue != "other" || o.Ready != 2 || o.Recent.Published != 1 || o.Current.Published != 1 || o.Current.Consumed != 0 {
		t.Errorf("activity of other: %+v", o)
	}

	// Ready jobs in consume order: the priority set, then the list from
	// its consume end; paged by a cursor.
	var ids []string
	var cursor int64
	for pages := 0; ; pages++ {
		jobs, next, err := e.ListJobs(bg, "ns", "q", engine.ListReady, cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		if next == 0 {
			break
		}
		if pages > 3 {
			t.Fatal("no end")
		}
		cursor = next
	}
	if want := append([]string{prio}, ready...); fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("ready jobs %v, want %v", ids, want)
	}
	for list, want := range map[engine.JobList][]string{
		engine.ListDelayed: {delayed}, engine.ListInFlight: {flying}, engine.ListScheduled: {flying, delayed},
	} {
		jobs, next, err := e.ListJobs(bg, "ns", "q", list, 0, 10)
		if err != nil || next != 0 {
			t.Fatalf("%s: %v next %d", list, err, next)
		}
		var got []string
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s jobs %v, want %v", list, got, want)
		}
		if list == engine.ListInFlight && (jobs[0].State != engine.StateInFlight || jobs[0].DueAt.IsZero() || jobs[0].Tries != 2 || string(jobs[0].Body) != "f") {
			t.Errorf("in-flight job %+v", jobs[0])
		}
	}
	for _, bad := range []struct {
		list   engine.JobList
		cursor int64
		limit  int
	}{{"dead", 0, 1}, {engine.ListReady, -1, 1}, {engine.ListReady, 0, 0}, {engine.ListReady, 0, listScanBudget + 1}} {
		if _, _, err := e.ListJobs(bg, "ns", "q", bad.list, bad.cursor, bad.limit); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("ListJobs(%v): %v, want ErrInvalid", bad, err)
		}
	}

	j, err := e.FindJob(bg, delayed)
	if err != nil || j.Namespace != "ns" || j.Queue != "q" || j.State != engine.StateDelayed || string(j.Body) != "d" {
		t.Errorf("FindJob: %+v %v", j, err)
	}
	if _, err := e.FindJob(bg, engine.NewJobID(clock.Now(), 0, false)); !errors.Is(err, engine.ErrJobNotFound) {
		t.Errorf("FindJob of an unknown ID: %v", err)
	}
	if _, err := e.FindJob(bg, "*"); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("FindJob of a pattern: %v", err)
	}
	if e.Topology() != "standalone" || e.Ping(bg) != nil {
		t.Errorf("topology %q, ping %v", e.Topology(), e.Ping(bg))
	}
}

// TestQueueDetailsLargeTimer: a timer beyond inFlightExact is split from a
// sample, flagged as such, and the estimate is close.
func TestQueueDetailsLargeTimer(t *testing.T) {
	e, _, _, _ := historyEngine(t)
	reqs := make([]*engine.PublishRequest, 50)
	for i := range reqs {
		reqs[i] = &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1}
	}
	for n := 0; n < 2*inFlightExact; n += len(reqs) {
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < inFlightExact; n += 100 {
		if _, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Hour, Count: 100}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range reqs {
		reqs[i].Delay = time.Hour
	}
	for n := 0; n < inFlightExact; n += len(reqs) {
		if _, err := e.PublishBatch(bg, reqs); err != nil {
			t.Fatal(err)
		}
	}
	d, err := e.QueueDetails(bg, "ns", []string{"q"})
	if err != nil {
		t.Fatal(err)
	}
	if d[0].InFlightExact || d[0].Timer != 2*inFlightExact || d[0].InFlight < inFlightExact*6/10 || d[0].InFlight > inFlightExact*14/10 {
		t.Errorf("large timer: %+v, want an estimate near %d in flight", d[0], inFlightExact)
	}
}

// TestJobKeyQueue: FindJob takes the queue from a key only when jobKey
// builds that key from it.
func TestJobKeyQueue(t *testing.T) {
	id := "01M7YVBFN8AAS205RQ04000000"
	if ns, q, ok := jobKeyQueue(jobKey("ns", "q-1", id), id); !ok || ns != "ns" || q != "q-1" {
		t.Errorf("jobKeyQueue(jobKey) = %q %q %v", ns, q, ok)
	}
	for _, k := range []string{"j/{ns}/" + id, "j/ns/q/" + id, "x/{ns/q}/" + id, "j/{ns/q}/other", "j/{ns/q}x/" + id, "j/{ns/q/" + id} {
		if ns, q, ok := jobKeyQueue(k, id); ok {
			t.Errorf("jobKeyQueue(%q) = %q %q, want no queue", k, ns, q)
		}
	}
}
