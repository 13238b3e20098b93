package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Handler processes one job. Returning nil ACKs the job. Returning an
// error (or panicking) is a failure: on Kairos the job is released at once
// (or after the queue's backoff policy, or after the delay of a RetryAfter
// error); on lmstfy, or with NoRelease, it comes back after its TTR. Either
// way it is delivered again while tries remain, then goes to the dead
// letter. ctx is cancelled when the worker is stopped hard (Stop's context
// expires) and has the job's TTR as deadline: past it, another worker may
// already hold the job (Client.Touch extends the TTR).
type Handler func(ctx context.Context, job *Job) error

// RetryAfter wraps a handler's error to have the job released with a delay
// of d (Kairos; on lmstfy the job comes back after its TTR).
func RetryAfter(d time.Duration, err error) error {
	return &retryAfterError{d: d, err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.d)
}

func (e *retryAfterError) Unwrap() error { return e.err }

// DefaultPollTimeout is a Worker's long-poll per consume when
// WorkerConfig.PollTimeout is 0.
const DefaultPollTimeout = time.Second

// WorkerConfig configures a Worker. Only Queues is required.
type WorkerConfig struct {
	// Queues are consumed in priority order: the first queue first.
	Queues []string
	// Concurrency is the number of handlers running at once (default 1).
	// Each idle handler slot holds one long-poll.
	Concurrency int
	// TTR is the time each job has to be handled and ACKed before it is
	// delivered again (0: the server's default, 120 s).
	TTR time.Duration
	// PollTimeout is how long one consume waits for a job (default 1 s,
	// at most 600 s). Short polls cost an idle slot one request a second,
	// which the server answers without Redis, and keep delayed jobs
	// prompt: with 10 s polls (the default until issue #34) a delayed
	// job's lateness was 182 ms at the median and 826 ms p99 against
	// 45 ms and 188 ms with 1 s (16 slots, 5,000 jobs due over 1-5 s, the
	// same run), as parked polls are not always woken by jobs the server
	// makes due and see them at their end.
	PollTimeout time.Duration
	// Backoff is the first pause after a failed consume (default 100 ms);
	// it doubles with each failure in a row, up to MaxBackoff (default
	// 5 s), and resets after a success.
	Backoff, MaxBackoff time.Duration
	// Logger receives consume, handler and ACK failures; nil discards.
	Logger *slog.Logger
	// OnError, when set, is called with every failure (job is nil for
	// consume failures). It must be safe for concurrent use.
	OnError func(job *Job, err error)
	// NoRelease leaves failed jobs to come back after their TTR instead
	// of releasing them (Kairos's release/nack) at once.
	NoRelease bool
	// Observe, when set, is called as each job's processing begins, with
	// the worker's context and the job; the handler runs with the context
	// it returns, and done is called with the handler's error (nil on
	// success) once the job's ACK or release is over. It is where a span
	// per job starts and ends: otelclient.WorkerSpans makes one, a child
	// of the trace context the job was published with, with
	// OpenTelemetry (kept out of this package so that importing it costs
	// the standard library only). It must be safe for concurrent use.
	Observe func(ctx context.Context, job *Job) (_ context.Context, done func(err error))
	// Name names this worker in the attempt history of the jobs it takes
	// (the X-Kairos-Worker header; Kairos keeps letters, digits and
	// ._-:@/, 64 bytes at most), so that a TTR expiry says whose delivery
	// ran out. Default: host:pid. A named consume costs Redis two more
	// commands per job (the history's entry, opened at once).
	Name string
	// Anonymous sends no name: the history still records each failure
	// (error, start, end), without the worker.
	Anonymous bool
}

// Worker runs a Handler over queues with N concurrent slots: each slot
// long-polls for a job, runs the handler and ACKs on success. Consume
// failures (the server restarting, Redis down) are retried with capped
// backoff forever; a job whose ACK fails comes back after its TTR, so
// handlers must be idempotent (delivery is at least once).
type Worker struct {
	c   *Client
	h   Handler
	cfg WorkerConfig
	log *slog.Logger
	// seg and head are every consume's queues and headers, made once.
	seg     string
	head    fixedHeader
	mu      sync.Mutex
	started bool
	// pollCancel stops fetching (Stop); hardCancel also cancels running
	// handlers (Stop's context expired, or Start's context done).
	pollCancel context.CancelFunc
	hardCancel context.CancelFunc
	wg         sync.WaitGroup
	done       chan struct{}

	stats struct {
		handled, failed, panics, acked, ackErrors, released, consumeErrors atomic.Int64
	}
}

// WorkerStats are counters of a Worker since it started.
type WorkerStats struct {
	// Handled is the number of jobs handled successfully.
	Handled int64
	// Failed is the number of handler failures (errors and panics).
	Failed int64
	// Panics is the number of handler panics (also counted in Failed).
	Panics int64
	// Acked is the number of successful ACKs.
	Acked int64
	// AckErrors is the number of failed ACKs (the job comes back).
	AckErrors int64
	// Released is the number of failed jobs handed back through release.
	Released int64
	// ConsumeErrors is the number of failed consumes.
	ConsumeErrors int64
}

// PanicError is the failure of a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("kairos worker: handler panicked: %v", e.Value)
}

// failureText is what a release records of a handler's failure: its
// error, and for a panic the goroutine's stack after it.
func failureText(err error) string {
	var p *PanicError
	if errors.As(err, &p) {
		return fmt.Sprintf("panic: %v\n\n%s", p.Value, p.Stack)
	}
	return err.Error()
}

// defaultWorkerName is host:pid.
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// NewWorker checks cfg and returns a worker running h over cfg.Queues with
// c. It starts nothing: call Start.
func NewWorker(c *Client, cfg WorkerConfig, h Handler) (*Worker, error) {
	if c == nil || h == nil {
		return nil, argError("NewWorker needs a client and a handler")
	}
	seg, err := queuesSegment(cfg.Queues)
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	switch {
	case cfg.Anonymous:
		cfg.Name = ""
	case cfg.Name == "":
		cfg.Name = defaultWorkerName()
	}
	if cfg.PollTimeout == 0 {
		cfg.PollTimeout = DefaultPollTimeout
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, argError("concurrency must be > 0")
	case cfg.TTR < 0:
		return nil, argError("ttr must not be negative")
	case cfg.PollTimeout < 0 || cfg.PollTimeout > 600*time.Second:
		return nil, argError("poll timeout must be 0..600s")
	case cfg.Backoff < 0 || cfg.MaxBackoff < cfg.Backoff:
		return nil, argError("invalid backoff (%v, max %v)", cfg.Backoff, cfg.MaxBackoff)
	}
	cfg.Queues = append([]string(nil), cfg.Queues...)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Worker{c: c, h: h, cfg: cfg, log: log, done: make(chan struct{}), seg: seg, head: consumeHeader(cfg.Name)}, nil
}

// Start starts the handler slots and returns at once. Cancelling ctx stops
// the worker hard: polls and running handlers' contexts are cancelled. Use
// Stop for a graceful stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("kairos worker: already started")
	}
	w.started = true
	hardCtx, hardCancel := context.WithCancel(ctx)
	pollCtx, pollCancel := context.WithCancel(hardCtx)
	w.hardCancel, w.pollCancel = hardCancel, pollCancel
	for range w.cfg.Concurrency {
		w.wg.Add(1)
		go w.slot(pollCtx, hardCtx)
	}
	go func() {
		w.wg.Wait()
		hardCancel()
		close(w.done)
	}()
	return nil
}

// Run starts the worker and blocks until ctx is done, then stops it
// gracefully, giving running handlers up to grace to finish.
func (w *Worker) Run(ctx context.Context, grace time.Duration) error {
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return w.Stop(sctx)
}

// Stop stops fetching jobs (waiting polls are abandoned), waits for the
// running handlers to finish and ACK, and returns. When ctx ends first,
// the handlers' contexts are cancelled and Stop returns ctx's error
// without waiting further (their jobs come back after their TTR). Stop is
// safe to call more than once; it returns nil for a worker never started.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	w.pollCancel()
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		w.hardCancel()
		return fmt.Errorf("kairos worker: stop: %w", ctx.Err())
	}
}

// Done is closed when every slot has returned.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{
		Handled:       w.stats.handled.Load(),
		Failed:        w.stats.failed.Load(),
		Panics:        w.stats.panics.Load(),
		Acked:         w.stats.acked.Load(),
		AckErrors:     w.stats.ackErrors.Load(),
		Released:      w.stats.released.Load(),
		ConsumeErrors: w.stats.consumeErrors.Load(),
	}
}

// slot is one handler slot: poll, handle, ACK, until pollCtx is done.
func (w *Worker) slot(pollCtx, hardCtx context.Context) {
	defer w.wg.Done()
	pause := time.Duration(0)
	after := context.WithoutCancel(hardCtx)
	var (
		job   *Job
		err   error
		began time.Time
		// fetched: job and err are those of the consume sent with the
		// last job's ACK (process).
		fetched bool
	)
	for pollCtx.Err() == nil {
		if !fetched {
			began = time.Now()
			job, err = w.c.consumeOne(pollCtx, w.head, w.seg, w.cfg.TTR, w.cfg.PollTimeout)
		}
		fetched = false
		switch {
		case pollCtx.Err() != nil:
			return
		case errors.Is(err, ErrNoJob):
			// A long-poll that ends much earlier than asked (the server
			// shutting down, a MaxTimeoutSecond of 0) must not turn into
			// a busy loop.
			if time.Since(began) < w.cfg.PollTimeout/2 || w.cfg.PollTimeout == 0 {
				pause = w.nextPause(pause)
				_ = sleep(pollCtx, jitter(pause))
			} else {
				pause = 0
			}
			continue
		case err != nil:
			w.stats.consumeErrors.Add(1)
			w.report(nil, err, "consume failed")
			pause = w.nextPause(pause)
			wait := jitter(pause)
			var apiErr *APIError
			if errors.As(err, &apiErr) && apiErr.RetryAfter > wait {
				wait = apiErr.RetryAfter // e.g. 503 while Redis restarts
			}
			_ = sleep(pollCtx, wait)
			continue
		}
		pause = 0
		job, began, fetched, err = w.process(pollCtx, hardCtx, after, job)
	}
}

// nextPause doubles the backoff up to its cap.
func (w *Worker) nextPause(p time.Duration) time.Duration {
	if p == 0 {
		return w.cfg.Backoff
	}
	return min(2*p, w.cfg.MaxBackoff)
}

// process runs the handler on job and ACKs it on success (or releases
// it, with after: hardCtx without its cancellation), within
// WorkerConfig.Observe when set. While the worker is not stopping, the
// ACK goes out with the slot's next consume (Client.ackConsume): fetched
// then says that next and err are that consume's, sent at began.
func (w *Worker) process(pollCtx, hardCtx, after context.Context, job *Job) (*Job, time.Time, bool, error) {
	var failure error
	var done func(error)
	if w.cfg.Observe != nil {
		hardCtx, done = w.cfg.Observe(hardCtx, job)
	}
	// done ends the job's observation once its ACK or release is over:
	// for an ACK sent with the next consume, as soon as its answer is
	// read (observed), else on return.
	observed := false
	defer func() {
		if done != nil && !observed {
			done(failure)
		}
	}()
	ctx := hardCtx
	if w.cfg.TTR > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(hardCtx, w.cfg.TTR)
		defer cancel()
	}
	// The ACK or release must go out even when the worker is being
	// stopped; it is bounded by the client's own timeout and retries
	// instead of the slot's ctx (after, made once per slot unless
	// Observe gave the job a context of its own).
	if w.cfg.Observe != nil || after == nil {
		after = context.WithoutCancel(hardCtx)
	}
	if err := w.call(ctx, job); err != nil {
		failure = err
		w.stats.failed.Add(1)
		if w.cfg.NoRelease || job.Receipt == "" {
			w.report(job, err, "handler failed; the job comes back after its TTR")
			return nil, time.Time{}, false, nil
		}
		w.report(job, err, "handler failed; releasing the job")
		// The error, with the stack of a panic, goes into the job's
		// attempt history.
		opts := []ReleaseOption{ReleaseError(failureText(err))}
		var ra *retryAfterError
		if errors.As(err, &ra) {
			opts = append(opts, ReleaseDelay(max(ra.d, 0)))
		}
		if err := w.c.Release(after, job, opts...); err != nil {
			w.report(job, err, "release failed; the job comes back after its TTR")
			return nil, time.Time{}, false, nil
		}
		w.stats.released.Add(1)
		return nil, time.Time{}, false, nil
	}
	w.stats.handled.Add(1)
	// With a receipt, the ACK is of this delivery only: a job whose TTR
	// expired and that another worker now holds is not deleted under it.
	acked := func(err error) {
		if err != nil {
			w.stats.ackErrors.Add(1)
			w.report(job, err, "ack failed; the job comes back after its TTR")
		} else {
			w.stats.acked.Add(1)
		}
		if done != nil {
			observed = true
			done(nil)
		}
	}
	if pollCtx.Err() != nil {
		acked(w.c.AckJob(after, job))
		return nil, time.Time{}, false, nil
	}
	began := time.Now()
	next, fetched, err := w.c.ackConsume(after, pollCtx, job, w.head, w.seg, w.cfg.TTR, w.cfg.PollTimeout, acked)
	return next, began, fetched, err
}

// call runs the handler, turning a panic into a *PanicError.
func (w *Worker) call(ctx context.Context, job *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			w.stats.panics.Add(1)
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return w.h(ctx, job)
}

func (w *Worker) report(job *Job, err error, msg string) {
	attrs := []any{"error", err}
	if job != nil {
		attrs = append(attrs, "queue", job.Queue, "job_id", job.ID)
	}
	w.log.Warn("kairos worker: "+msg, attrs...)
	if w.cfg.OnError != nil {
		w.cfg.OnError(job, err)
	}
}
