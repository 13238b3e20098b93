package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// seen records which bodies a handler saw, and how often.
type seen struct {
	mu sync.Mutex
	n  map[string]int
}

func newSeen() *seen { return &seen{n: make(map[string]int)} }

func (s *seen) add(body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[body]++
	return s.n[body]
}

func (s *seen) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.n)
}

func (s *seen) missing(bodies []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range bodies {
		if s.n[b] == 0 {
			out = append(out, b)
		}
	}
	return out
}

func startWorker(t *testing.T, c *client.Client, cfg client.WorkerConfig, h client.Handler) *client.Worker {
	t.Helper()
	w, err := client.NewWorker(c, cfg, h)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return w
}

func publishN(t *testing.T, c *client.Client, queue, prefix string, n int, opts ...client.PublishOption) []string {
	t.Helper()
	bodies := make([]string, n)
	jobs := make([]any, 0, client.MaxBulk)
	flush := func() {
		if len(jobs) == 0 {
			return
		}
		if _, err := c.BatchPublish(ctxT(t), queue, jobs, opts...); err != nil {
			t.Fatalf("BatchPublish: %v", err)
		}
		jobs = jobs[:0]
	}
	for i := range n {
		bodies[i] = fmt.Sprintf(`"%s-%d"`, prefix, i)
		jobs = append(jobs, []byte(bodies[i]))
		if len(jobs) == client.MaxBulk {
			flush()
		}
	}
	flush()
	return bodies
}

func TestNewWorkerRefusesBadConfig(t *testing.T) {
	c, err := client.New("127.0.0.1:1", client.WithNamespace("ns"))
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *client.Job) error { return nil }
	for _, tc := range []struct {
		name string
		c    *client.Client
		cfg  client.WorkerConfig
		h    client.Handler
	}{
		{"no client", nil, client.WorkerConfig{Queues: []string{"q"}}, h},
		{"no handler", c, client.WorkerConfig{Queues: []string{"q"}}, nil},
		{"no queue", c, client.WorkerConfig{}, h},
		{"empty queue", c, client.WorkerConfig{Queues: []string{""}}, h},
		{"negative concurrency", c, client.WorkerConfig{Queues: []string{"q"}, Concurrency: -1}, h},
		{"negative ttr", c, client.WorkerConfig{Queues: []string{"q"}, TTR: -1}, h},
		{"poll over 600s", c, client.WorkerConfig{Queues: []string{"q"}, PollTimeout: 601 * time.Second}, h},
		{"backoff above cap", c, client.WorkerConfig{Queues: []string{"q"}, Backoff: time.Second, MaxBackoff: time.Millisecond}, h},
	} {
		if _, err := client.NewWorker(tc.c, tc.cfg, tc.h); !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", tc.name, err)
		}
	}
}

func TestWorkerHandlesAndAcks(t *testing.T) {
	e := newEnv(t)
	bodies := publishN(t, e.C, "high", "h", 30)
	bodies = append(bodies, publishN(t, e.C, "low", "l", 30)...)
	got := newSeen()
	var running, maxRunning atomic.Int64
	w := startWorker(t, e.C, client.WorkerConfig{
		Queues: []string{"high", "low"}, Concurrency: 4, TTR: 30 * time.Second, PollTimeout: time.Second,
	}, func(ctx context.Context, job *client.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Errorf("handler context has no deadline (TTR)")
		}
		got.add(string(job.Body))
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	eventually(t, 20*time.Second, "60 jobs handled", func() bool { return w.Stats().Acked == 60 })
	if m := got.missing(bodies); len(m) > 0 {
		t.Fatalf("not handled: %v", m)
	}
	if m := maxRunning.Load(); m < 2 || m > 4 {
		t.Fatalf("%d handlers ran at once, want 2..4", m)
	}
	ctx := ctxT(t)
	for _, q := range []string{"high", "low"} {
		if n, err := e.C.QueueSize(ctx, q); err != nil || n != 0 {
			t.Fatalf("QueueSize(%s): %d, %v", q, n, err)
		}
	}
	st := w.Stats()
	if st.Handled != 60 || st.Failed != 0 || st.AckErrors != 0 || st.ConsumeErrors != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestWorkerFailuresComeBack(t *testing.T) {
	tests := []struct {
		name      string
		noRelease bool
		ttr       time.Duration
		within    time.Duration
	}{
		// Released at once (Kairos): long before a 30 s TTR.
		{"released", false, 30 * time.Second, 10 * time.Second},
		// Left to their TTR.
		{"after TTR", true, time.Second, 15 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			bodies := publishN(t, e.C, "q", "f", 6, client.Tries(3))
			got := newSeen()
			var errs sync.Map
			start := time.Now()
			w := startWorker(t, e.C, client.WorkerConfig{
				Queues: []string{"q"}, Concurrency: 3, TTR: tc.ttr, PollTimeout: time.Second, NoRelease: tc.noRelease,
				OnError: func(job *client.Job, err error) { errs.Store(err.Error(), job != nil) },
			}, func(ctx context.Context, job *client.Job) error {
				switch got.add(string(job.Body)) {
				case 1:
					return errors.New("first try fails")
				case 2:
					panic("second try panics")
				}
				return nil
			})
			eventually(t, tc.within, "6 jobs handled on their third try", func() bool { return w.Stats().Acked == 6 })
			if took := time.Since(start); !tc.noRelease && took > 5*time.Second {
				t.Fatalf("released jobs took %v", took)
			}
			if m := got.missing(bodies); len(m) > 0 {
				t.Fatalf("not handled: %v", m)
			}
			st := w.Stats()
			wantReleased := int64(12)
			if tc.noRelease {
				wantReleased = 0
			}
			if st.Handled != 6 || st.Failed != 12 || st.Panics != 6 || st.Released != wantReleased {
				t.Fatalf("stats: %+v; want 6 handled, 12 failed, 6 panics, %d released", st, wantReleased)
			}
			var sawPanic bool
			errs.Range(func(k, _ any) bool {
				sawPanic = sawPanic || k.(string) == "kairos worker: handler panicked: second try panics"
				return true
			})
			if !sawPanic {
				t.Fatal("OnError was not told about the panic")
			}
			if n, err := e.C.DeadLetterSize(ctxT(t), "q"); err != nil || n != 0 {
				t.Fatalf("DeadLetterSize: %d, %v", n, err)
			}
		})
	}
}

func TestWorkerRetryAfter(t *testing.T) {
	e := newEnv(t)
	publish(t, e.C, "q", "later", client.Tries(2))
	var mu sync.Mutex
	var times []time.Time
	w := startWorker(t, e.C, client.WorkerConfig{Queues: []string{"q"}, TTR: 30 * time.Second, PollTimeout: time.Second},
		func(ctx context.Context, job *client.Job) error {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			if len(times) == 1 {
				return client.RetryAfter(400*time.Millisecond, errors.New("busy"))
			}
			return nil
		})
	eventually(t, 10*time.Second, "the job handled twice", func() bool { return w.Stats().Acked == 1 })
	mu.Lock()
	defer mu.Unlock()
	if gap := times[1].Sub(times[0]); gap < 380*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("retried after %v, want about 400ms", gap)
	}
}

func TestWorkerStopWaitsForRunningHandlers(t *testing.T) {
	e := newEnv(t)
	publish(t, e.C, "q", "slow")
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	w, err := client.NewWorker(e.C, client.WorkerConfig{Queues: []string{"q"}, Concurrency: 2, PollTimeout: 5 * time.Second},
		func(ctx context.Context, job *client.Job) error {
			close(started)
			<-release
			finished.Store(true)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("a second Start succeeded")
	}
	<-started
	stopped := make(chan error, 1)
	stopStart := time.Now()
	go func() { stopped <- w.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a handler was running", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-stopped:
		if err != nil || !finished.Load() {
			t.Fatalf("Stop: %v, handler finished %v", err, finished.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return after the handler finished")
	}
	// The idle slot's 5 s long-poll was abandoned, not waited for.
	if took := time.Since(stopStart); took > 3*time.Second {
		t.Fatalf("Stop took %v", took)
	}
	if st := w.Stats(); st.Acked != 1 {
		t.Fatalf("stats after Stop: %+v; want the running job ACKed", st)
	}
	// Stopped: nothing is fetched any more.
	publish(t, e.C, "q", "after stop")
	time.Sleep(100 * time.Millisecond)
	if n, err := e.C.QueueSize(ctxT(t), "q"); err != nil || n != 1 {
		t.Fatalf("QueueSize after Stop: %d, %v; want 1", n, err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestWorkerStopDeadlineCancelsHandlers(t *testing.T) {
	e := newEnv(t)
	publish(t, e.C, "q", "stuck", client.Tries(2))
	started := make(chan struct{})
	cancelled := make(chan struct{})
	w, err := client.NewWorker(e.C, client.WorkerConfig{Queues: []string{"q"}, PollTimeout: time.Second},
		func(ctx context.Context, job *client.Job) error {
			close(started)
			<-ctx.Done()
			close(cancelled)
			return ctx.Err()
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want DeadlineExceeded", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not finish")
	}
	if st := w.Stats(); st.Failed != 1 || st.Acked != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// countingTransport counts requests.
type countingTransport struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func TestWorkerLongPollsAndBacksOff(t *testing.T) {
	e := newEnv(t)
	rt := &countingTransport{next: http.DefaultTransport}
	c := e.client(t, client.WithToken(e.Token), client.WithHTTPClient(&http.Client{Transport: rt}))
	w := startWorker(t, c, client.WorkerConfig{Queues: []string{"idle"}, Concurrency: 3, PollTimeout: time.Second},
		func(context.Context, *client.Job) error { return nil })
	time.Sleep(1500 * time.Millisecond)
	// 3 slots × 1 s polls over 1.5 s: 6 requests, not a busy loop.
	if n := rt.n.Load(); n < 3 || n > 9 {
		t.Fatalf("%d consume requests in 1.5 s with 3 slots and 1 s long-polls", n)
	}
	if st := w.Stats(); st.ConsumeErrors != 0 {
		t.Fatalf("stats: %+v", st)
	}

	// A server that is down: capped backoff, no hammering.
	downRT := &countingTransport{next: http.DefaultTransport}
	down, err := client.New("127.0.0.1:1", client.WithNamespace("ns"), client.WithRetry(0, 0, 0),
		client.WithHTTPClient(&http.Client{Transport: downRT}))
	if err != nil {
		t.Fatal(err)
	}
	dw := startWorker(t, down, client.WorkerConfig{Queues: []string{"q"}, Concurrency: 2, PollTimeout: time.Second,
		Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
		func(context.Context, *client.Job) error { return nil })
	time.Sleep(time.Second)
	attempts := downRT.n.Load()
	// Per slot: pauses of 10..20, 20..40, then 50..100 ms: at most ~20 attempts in 1 s.
	if attempts < 6 || attempts > 50 {
		t.Fatalf("%d consume attempts in 1 s against a server that is down", attempts)
	}
	if errs := dw.Stats().ConsumeErrors; errs < attempts-2 || errs > attempts {
		t.Fatalf("ConsumeErrors %d, attempts %d", dw.Stats().ConsumeErrors, attempts)
	}
}

// TestWorkerSurvivesServerRestart stops the server in the middle of a run
// and starts a new one on the same ports and Redis: the worker reconnects
// and every published job is handled at least once.
func TestWorkerSurvivesServerRestart(t *testing.T) {
	e := newEnv(t)
	bodies := publishN(t, e.C, "q", "before", 300, client.Tries(5))
	got := newSeen()
	var mu sync.Mutex
	var errs []error
	c := e.client(t, client.WithToken(e.Token), client.WithRetry(1, 20*time.Millisecond, 20*time.Millisecond))
	w := startWorker(t, c, client.WorkerConfig{
		Queues: []string{"q"}, Concurrency: 4, TTR: time.Second, PollTimeout: time.Second,
		Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		OnError: func(_ *client.Job, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	}, func(ctx context.Context, job *client.Job) error {
		got.add(string(job.Body))
		time.Sleep(3 * time.Millisecond)
		return nil
	})
	eventually(t, 20*time.Second, "100 jobs handled", func() bool { return got.distinct() >= 100 })
	e.Srv.Restart(500 * time.Millisecond)
	bodies = append(bodies, publishN(t, e.C, "q", "after", 100, client.Tries(5))...)
	eventually(t, 30*time.Second, "every job handled", func() bool { return len(got.missing(bodies)) == 0 })
	eventually(t, 10*time.Second, "the queue drained", func() bool {
		n, err := e.C.QueueSize(ctxT(t), "q")
		return err == nil && n == 0
	})
	st := w.Stats()
	if st.ConsumeErrors == 0 {
		t.Fatalf("the worker saw no consume error: was the server really down? stats %+v", st)
	}
	mu.Lock()
	t.Logf("stats %+v; %d errors reported, first: %v", st, len(errs), errs[0])
	mu.Unlock()
	if n, err := e.C.DeadLetterSize(ctxT(t), "q"); err != nil || n != 0 {
		t.Fatalf("DeadLetterSize: %d, %v", n, err)
	}
}

func TestWorkerRun(t *testing.T) {
	e := newEnv(t)
	publish(t, e.C, "q", "one")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	w, err := client.NewWorker(e.C, client.WorkerConfig{Queues: []string{"q"}, PollTimeout: 5 * time.Second},
		func(ctx context.Context, job *client.Job) error {
			handled.Add(1)
			cancel() // the worker is told to stop while this handler runs
			time.Sleep(100 * time.Millisecond)
			return ctx.Err() // not cancelled: a graceful stop lets it finish
		})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Run(ctx, 5*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Run returned %v after its context was cancelled", took)
	}
	if st := w.Stats(); handled.Load() != 1 || st.Acked != 1 {
		t.Fatalf("handled %d, stats %+v", handled.Load(), st)
	}
}

// TestWorkerSaysWhy: a handler's error and a handler's panic (with its
// stack) reach the job's attempt history with the worker's name, and the
// last one is the dead letter's last_error; the dead letter can then be
// filtered by that error and acted on in bulk.
func TestWorkerSaysWhy(t *testing.T) {
	e := newEnv(t)
	id := publish(t, e.C, "q", "j", client.Tries(2))
	var calls atomic.Int32
	w := startWorker(t, e.C, client.WorkerConfig{Queues: []string{"q"}, PollTimeout: time.Second, Name: "billing-7"},
		func(ctx context.Context, job *client.Job) error {
			if calls.Add(1) == 1 {
				return errors.New("card declined: insufficient funds")
			}
			panic("nil map in charge()")
		})
	eventually(t, 15*time.Second, "the job dead after 2 failures", func() bool { return w.Stats().Released == 2 })
	job, err := e.C.PeekJob(ctxT(t), "q", id)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != "dead" || len(job.Attempts) != 2 {
		t.Fatalf("job %s, attempts %+v", job.State, job.Attempts)
	}
	a2, a1 := job.Attempts[0], job.Attempts[1]
	if a1.Delivery != 1 || a1.Outcome != "nacked" || a1.Worker != "billing-7" || a1.Error != "card declined: insufficient funds" ||
		a1.StartMS == 0 || a1.EndMS < a1.StartMS || a1.DurationMS != a1.EndMS-a1.StartMS {
		t.Fatalf("attempt 1: %+v", a1)
	}
	if a2.Delivery != 2 || !strings.HasPrefix(a2.Error, "panic: nil map in charge()\n\ngoroutine ") ||
		!strings.Contains(a2.Error, "TestWorkerSaysWhy") {
		t.Fatalf("attempt 2 error: %q", a2.Error)
	}
	if job.LastError != a2.Error {
		t.Fatalf("last error %q", job.LastError)
	}
	page, err := e.C.ListDeadLetterPage(ctxT(t), "q", client.DeadLetterQuery{Newest: true, Error: "nil map"})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != id || page.Jobs[0].LastError != a2.Error {
		t.Fatalf("dead letter by error: %v %+v", err, page)
	}
	if page, err = e.C.ListDeadLetterPage(ctxT(t), "q", client.DeadLetterQuery{Error: "no such text"}); err != nil || len(page.Jobs) != 0 {
		t.Fatalf("dead letter by another error: %v %+v", err, page)
	}
	res, err := e.C.DeleteDeadJobs(ctxT(t), "q", []string{id, "01ZZZZZZZZZZZZZZZZZZZZZZZZ"}, nil)
	if err != nil || res.Count != 1 || len(res.Missing) != 1 {
		t.Fatalf("DeleteDeadJobs: %v %+v", err, res)
	}
	if _, err := e.C.PeekJob(ctxT(t), "q", id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
}
