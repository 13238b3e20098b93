package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// workloadConfig shapes the publishers and consumers of one scenario.
type workloadConfig struct {
	API       string // http://127.0.0.1:port of the kairos-server
	Token     string
	Namespace string
	Queues    []string
	Tries     int
	TTR       int // seconds
	Rate      int // publishes per second, all publishers together
	// Publishers, Consumers and Droppers are goroutine counts. The first
	// publisher publishes in bulk (8 jobs a request) when there are two or
	// more; the last consumer takes up to 8 jobs a request. Droppers take
	// jobs and never ACK them, or cut their connection mid-request.
	Publishers, Consumers, Droppers int
	// Extensions sends X-Kairos-Extensions: 1 with every request (consume
	// answers carry receipts).
	Extensions bool
}

// bulkSize is how many jobs the bulk publisher sends per request.
const bulkSize = 8

// workload drives one kairos-server through its public HTTP API and
// records everything in a ledger.
type workload struct {
	cfg workloadConfig
	led *ledger
	hc  *http.Client
	log logrus.FieldLogger
	seq atomic.Int64

	stopPub, stopDrop, stopCons context.CancelFunc
	pubs, drops, cons           sync.WaitGroup
	warned                      atomic.Int64
}

func newWorkload(cfg workloadConfig, log logrus.FieldLogger) *workload {
	conns := cfg.Publishers + cfg.Consumers + cfg.Droppers + 4
	return &workload{
		cfg: cfg, led: newLedger(), log: log,
		hc: &http.Client{Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second,
		}},
	}
}

// start starts every goroutine; stop them with stopPublishing and drain.
func (w *workload) start(ctx context.Context) {
	pctx, stopPub := context.WithCancel(ctx)
	dctx, stopDrop := context.WithCancel(ctx)
	cctx, stopCons := context.WithCancel(ctx)
	w.stopPub, w.stopDrop, w.stopCons = stopPub, stopDrop, stopCons
	for i := range w.cfg.Publishers {
		bulk := i == 0 && w.cfg.Publishers > 1
		w.pubs.Go(func() { w.publisher(pctx, bulk) })
	}
	for i := range w.cfg.Consumers {
		count := 1
		if i == w.cfg.Consumers-1 && w.cfg.Consumers > 1 {
			count = 8
		}
		w.cons.Go(func() { w.consumer(cctx, count) })
	}
	for range w.cfg.Droppers {
		w.drops.Go(func() { w.dropper(dctx) })
	}
}

// close stops everything still running.
func (w *workload) close() {
	for _, stop := range []context.CancelFunc{w.stopPub, w.stopDrop, w.stopCons} {
		if stop != nil {
			stop()
		}
	}
	w.pubs.Wait()
	w.drops.Wait()
	w.cons.Wait()
	w.hc.CloseIdleConnections()
}

type response struct {
	status int
	body   []byte
}

// do sends one request with the token, bounded by timeout.
func (w *workload) do(ctx context.Context, method, url string, body []byte, timeout time.Duration) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("X-Token", w.cfg.Token)
	if w.cfg.Extensions {
		req.Header.Set("X-Kairos-Extensions", "1")
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, body: b}, nil
}

func (w *workload) base() string { return w.cfg.API + "/api/" + w.cfg.Namespace }

// warn logs an unexpected answer, at most 20 times a scenario.
func (w *workload) warn(format string, args ...any) {
	if w.warned.Add(1) <= 20 {
		w.log.Warnf(format, args...)
	}
}

// pickDelay returns a publish delay in seconds: 0 (60%), 1 (25%) or 2.
func pickDelay() int {
	switch r := rand.IntN(100); {
	case r < 60:
		return 0
	case r < 85:
		return 1
	default:
		return 2
	}
}

// jobBody is a job's body: its sequence number and intended due time.
type jobBody struct {
	Seq int64 `json:"seq"`
	Due int64 `json:"due"` // Unix ms
}

// publisher publishes at its share of the rate until ctx ends. A request
// in flight when ctx ends is finished (its answer is recorded).
func (w *workload) publisher(ctx context.Context, bulk bool) {
	n := 1
	if bulk {
		n = bulkSize
	}
	interval := time.Duration(float64(time.Second) * float64(w.cfg.Publishers*n) / float64(max(w.cfg.Rate, 1)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var failStart time.Time
	defer func() {
		if !failStart.IsZero() {
			w.led.outage(failStart, time.Now())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		queue := w.cfg.Queues[rand.IntN(len(w.cfg.Queues))]
		delay := pickDelay()
		start := time.Now()
		due := start.UnixMilli() + int64(delay)*1000
		seqs := make([]int64, n)
		parts := make([]string, n)
		for i := range seqs {
			seqs[i] = w.seq.Add(1)
			w.led.sent(seqs[i], start.UnixMilli(), due)
			b, _ := json.Marshal(jobBody{Seq: seqs[i], Due: due})
			parts[i] = string(b)
		}
		url := fmt.Sprintf("%s/%s?delay=%d&ttl=3600&tries=%d", w.base(), queue, delay, w.cfg.Tries)
		body := []byte(parts[0])
		if bulk {
			url = fmt.Sprintf("%s/%s/bulk?delay=%d&ttl=3600&tries=%d", w.base(), queue, delay, w.cfg.Tries)
			body = []byte("[" + strings.Join(parts, ",") + "]")
		}
		// Not ctx: a publish under way when the publishers stop completes.
		r, err := w.do(context.Background(), http.MethodPut, url, body, 5*time.Second)
		if err == nil && r.status == http.StatusCreated {
			w.led.published(seqs, time.Since(start))
			if !failStart.IsZero() {
				w.led.outage(failStart, start)
				failStart = time.Time{}
			}
			continue
		}
		w.led.count(&w.led.publishErrors)
		if err == nil && r.status < 500 {
			w.warn("publish: unexpected status %d: %s", r.status, r.body)
		}
		if failStart.IsZero() {
			failStart = start
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// consumedJob is the part of a consume answer the workload reads.
type consumedJob struct {
	JobID string `json:"job_id"`
	Queue string `json:"queue"`
	Data  []byte `json:"data"`
}

// parseJobs decodes a 200 consume answer (an object, or an array when
// count > 1 was asked).
func parseJobs(body []byte) ([]consumedJob, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var jobs []consumedJob
		err := json.Unmarshal(body, &jobs)
		return jobs, err
	}
	var j consumedJob
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, err
	}
	return []consumedJob{j}, nil
}

func (w *workload) consumeURL(ttr, timeout, count int) string {
	return fmt.Sprintf("%s/%s?ttr=%d&timeout=%d&count=%d", w.base(), strings.Join(w.cfg.Queues, ","), ttr, timeout, count)
}

// consume takes up to count jobs, waiting up to timeout seconds. ok is
// false on a transport error or an unexpected status.
func (w *workload) consume(ctx context.Context, ttr, timeout, count int) (jobs []consumedJob, ok bool) {
	r, err := w.do(ctx, http.MethodGet, w.consumeURL(ttr, timeout, count), nil, time.Duration(timeout+4)*time.Second)
	if err != nil {
		return nil, false
	}
	switch r.status {
	case http.StatusOK:
		jobs, err := parseJobs(r.body)
		if err != nil {
			w.warn("consume: bad answer %q: %v", r.body, err)
			return nil, false
		}
		return jobs, true
	case http.StatusNotFound:
		return nil, true
	default:
		if r.status < 500 {
			w.warn("consume: unexpected status %d: %s", r.status, r.body)
		}
		return nil, false
	}
}

// consumer consumes, records and ACKs until ctx ends.
func (w *workload) consumer(ctx context.Context, count int) {
	for ctx.Err() == nil {
		jobs, ok := w.consume(ctx, w.cfg.TTR, 1, count)
		if ctx.Err() != nil {
			// A job taken now comes back after its TTR: the drain's sweep
			// records it.
			return
		}
		if !ok {
			w.led.count(&w.led.consumeErrors)
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		now := time.Now()
		for _, j := range jobs {
			seq, err := seqOf(j.Data)
			if err != nil {
				w.warn("consume: job %s: %v", j.JobID, err)
				continue
			}
			if !w.led.deliver(seq, now) {
				w.warn("consume: job %s carries seq %d, never published", j.JobID, seq)
			}
			if w.ack(j) {
				w.led.ackDone(seq)
			}
		}
	}
}

func seqOf(data []byte) (int64, error) {
	var b jobBody
	if err := json.Unmarshal(data, &b); err != nil || b.Seq <= 0 {
		return 0, fmt.Errorf("body %q is not a chaos job: %v", data, err)
	}
	return b.Seq, nil
}

// ack deletes a job, retrying for at most about one TTR (after that the
// job comes back anyway).
func (w *workload) ack(j consumedJob) bool {
	url := w.base() + "/" + j.Queue + "/job/" + j.JobID
	deadline := time.Now().Add(time.Duration(w.cfg.TTR) * time.Second)
	for {
		r, err := w.do(context.Background(), http.MethodDelete, url, nil, 2*time.Second)
		if err == nil && r.status == http.StatusNoContent {
			return true
		}
		w.led.count(&w.led.ackErrors)
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// dropper misbehaves every 50-150 ms until ctx ends: half the time it cuts
// a consume request after 1-15 ms (the server may have taken a job whose
// answer nobody reads); otherwise it takes jobs and abandons them without
// an ACK (a consumer that crashed mid-job). Either way the job comes back
// after its TTR, or goes to the dead letter when no tries are left.
func (w *workload) dropper(ctx context.Context) {
	for {
		sleepCtx(ctx, 50*time.Millisecond+rand.N(100*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		if rand.IntN(2) == 0 {
			cctx, cancel := context.WithTimeout(ctx, time.Millisecond+rand.N(14*time.Millisecond))
			_, _ = w.do(cctx, http.MethodGet, w.consumeURL(w.cfg.TTR, 1, 1), nil, 5*time.Second)
			cancel()
			w.led.count(&w.led.cuts)
			continue
		}
		jobs, _ := w.consume(ctx, w.cfg.TTR, 0, 1)
		for range jobs {
			w.led.count(&w.led.abandoned)
		}
	}
}

// drain stops the publishers and droppers, lets the consumers take every
// acknowledged job (bounded by limit), stops them, sweeps what came back
// after its TTR, then empties the dead letters (respawn and consume,
// recording those jobs as dead-lettered). It returns the number of jobs
// still left in the queues and dead letters afterwards (0 when all is well).
func (w *workload) drain(ctx context.Context, limit time.Duration) (residual int, err error) {
	w.stopPub()
	w.stopDrop()
	w.pubs.Wait()
	w.drops.Wait()
	ttr := time.Duration(w.cfg.TTR) * time.Second
	deadline := time.Now().Add(limit)
	_, maxDue := w.led.missing()
	sleepCtx(ctx, time.Until(time.UnixMilli(maxDue).Add(200*time.Millisecond)))
	for ctx.Err() == nil && time.Now().Before(deadline) {
		missing, _ := w.led.missing()
		quiet := w.led.sinceLastDelivery(time.Now())
		// All in: wait one more TTR so that redeliveries of jobs whose
		// ACK failed are counted as duplicates.
		if missing == 0 && quiet >= ttr+500*time.Millisecond {
			break
		}
		// Nothing more is coming (the rest is in the dead letters).
		if quiet >= 2*ttr+2*time.Second {
			break
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	w.stopCons()
	w.cons.Wait()
	// Jobs taken by consumes cut at the stop come back after their TTR.
	sleepCtx(ctx, ttr+time.Second)
	if err := w.sweep(ctx, false); err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	for _, q := range w.cfg.Queues {
		if err := w.respawnDead(ctx, q); err != nil {
			return 0, err
		}
	}
	if err := w.sweep(ctx, true); err != nil {
		return 0, fmt.Errorf("dead letter sweep: %w", err)
	}
	for _, q := range w.cfg.Queues {
		for _, path := range []string{"/size", "/deadletter/size"} {
			n, err := w.size(ctx, q, path)
			if err != nil {
				return 0, err
			}
			residual += n
		}
	}
	return residual, ctx.Err()
}

// sweep consumes every ready job (recording it as delivered, or as dead
// when dead is set) and ACKs it, until a consume finds nothing.
func (w *workload) sweep(ctx context.Context, dead bool) error {
	for i := 0; i < 100000 && ctx.Err() == nil; i++ {
		jobs, ok := w.consume(ctx, 30, 0, 100)
		if !ok {
			return fmt.Errorf("consume failed while the setup is healthy")
		}
		if len(jobs) == 0 {
			return nil
		}
		now := time.Now()
		for _, j := range jobs {
			seq, err := seqOf(j.Data)
			if err != nil {
				w.warn("sweep: job %s: %v", j.JobID, err)
			} else if dead {
				w.led.deadFound(seq)
			} else {
				w.led.deliver(seq, now)
			}
			if !w.ack(j) {
				return fmt.Errorf("ACK of %s failed while the setup is healthy", j.JobID)
			}
		}
	}
	return ctx.Err()
}

// respawnDead moves queue q's whole dead letter back to its ready list.
func (w *workload) respawnDead(ctx context.Context, q string) error {
	n, err := w.size(ctx, q, "/deadletter/size")
	if err != nil || n == 0 {
		return err
	}
	url := fmt.Sprintf("%s/%s/deadletter?limit=%d&ttl=3600", w.base(), q, n)
	r, err := w.do(ctx, http.MethodPut, url, nil, 10*time.Second)
	if err != nil {
		return fmt.Errorf("respawn dead letter of %s: %w", q, err)
	}
	if r.status != http.StatusOK {
		return fmt.Errorf("respawn dead letter of %s: status %d: %s", q, r.status, r.body)
	}
	return nil
}

// size reads a size route of queue q ("/size" or "/deadletter/size").
func (w *workload) size(ctx context.Context, q, path string) (int, error) {
	r, err := w.do(ctx, http.MethodGet, w.base()+"/"+q+path, nil, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("%s of %s: %w", path, q, err)
	}
	var s struct{ Size int }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &s) != nil {
		return 0, fmt.Errorf("%s of %s: status %d: %s", path, q, r.status, r.body)
	}
	return s.Size, nil
}

// formatCount is n with thousands separators.
func formatCount(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + formatCount(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
