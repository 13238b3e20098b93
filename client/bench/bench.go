// Package bench is Kairos's load generator: the scenarios of
// doc/performance.md against any lmstfy-compatible server (Kairos or
// lmstfy itself), and a do-nothing server of the same API (the ceiling) so
// that figures can be read as a share of what the machine and the load
// generator allow. `kairos bench` is its command-line front.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one benchmark run.
type Config struct {
	// Addr is the server's base URL, e.g. http://127.0.0.1:7777.
	Addr      string
	Namespace string
	Token     string
	// Queue is the queue name prefix; each scenario adds a suffix.
	Queue string
	// Concurrency is the number of concurrent clients.
	Concurrency int
	// Duration bounds the timed scenarios.
	Duration time.Duration
	// BodySize is the job body size in bytes.
	BodySize int
	// Jobs is the number of jobs of the counted scenarios.
	Jobs int
	// Rate is the publish rate (jobs/s) of the latency scenario.
	Rate int
	// BulkSize is the number of jobs per bulk publish (≤ 64).
	BulkSize int
	// Queues spreads the publish scenario over this many queues (default 1).
	Queues int
}

func (c *Config) defaults() {
	if c.Namespace == "" {
		c.Namespace = "bench"
	}
	if c.Queue == "" {
		c.Queue = "bench"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.BodySize <= 0 {
		c.BodySize = 100
	}
	if c.Jobs <= 0 {
		c.Jobs = 20000
	}
	if c.Rate <= 0 {
		c.Rate = 4000
	}
	if c.BulkSize <= 0 || c.BulkSize > 64 {
		c.BulkSize = 64
	}
}

// Result is one scenario's outcome.
type Result struct {
	Scenario string  `json:"scenario"`
	Ops      int64   `json:"ops"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"per_sec"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	MaxMS    float64 `json:"max_ms"`
	// MinMS is the smallest sample: negative lateness means early.
	MinMS float64 `json:"min_ms"`
	Note  string  `json:"note,omitempty"`
}

// runQueue names a scenario's queue for one run: a fresh queue per run, so
// that jobs a previous run left in flight (consumers stopped mid-request)
// cannot come back after their TTR and skew this run's figures.
func runQueue(prefix, scenario string) string {
	return prefix + "-" + scenario + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// client is a lean keep-alive HTTP client for the lmstfy API.
type client struct {
	cfg  Config
	http *http.Client
	base string
}

func newClient(cfg Config) *client {
	tr := &http.Transport{
		MaxIdleConns:        cfg.Concurrency * 2,
		MaxIdleConnsPerHost: cfg.Concurrency * 2,
		IdleConnTimeout:     time.Minute,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: time.Minute}).DialContext,
	}
	return &client{cfg: cfg, http: &http.Client{Transport: tr, Timeout: time.Minute}, base: cfg.Addr + "/api/" + url.PathEscape(cfg.Namespace) + "/"}
}

func (c *client) do(ctx context.Context, method, path string, q url.Values, body []byte) (int, []byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if c.cfg.Token != "" {
		req.Header.Set("X-Token", c.cfg.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (c *client) publish(ctx context.Context, queue string, body []byte, delay int) (string, error) {
	q := url.Values{"ttl": {"3600"}, "tries": {"3"}, "delay": {strconv.Itoa(delay)}}
	st, b, err := c.do(ctx, http.MethodPut, queue, q, body)
	if err != nil {
		return "", err
	}
	if st != http.StatusCreated {
		return "", fmt.Errorf("publish: %d %s", st, b)
	}
	var r struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", err
	}
	return r.JobID, nil
}

func (c *client) bulk(ctx context.Context, queue string, bodies [][]byte, delay int) error {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, b := range bodies {
		if i > 0 {
			buf.WriteByte(',')
		}
		bs, _ := json.Marshal(string(b))
		buf.Write(bs)
	}
	buf.WriteByte(']')
	q := url.Values{"ttl": {"3600"}, "tries": {"3"}, "delay": {strconv.Itoa(delay)}}
	st, b, err := c.do(ctx, http.MethodPut, queue+"/bulk", q, buf.Bytes())
	if err != nil {
		return err
	}
	if st != http.StatusCreated {
		return fmt.Errorf("bulk publish: %d %s", st, b)
	}
	return nil
}

type job struct {
	ID   string `json:"job_id"`
	Data []byte `json:"data"`
}

// consume takes one job (nil when none came within timeout seconds).
func (c *client) consume(ctx context.Context, queue string, timeout int) (*job, error) {
	q := url.Values{"ttr": {"30"}, "timeout": {strconv.Itoa(timeout)}}
	st, b, err := c.do(ctx, http.MethodGet, queue, q, nil)
	if err != nil {
		return nil, err
	}
	if st == http.StatusNotFound {
		return nil, nil
	}
	if st != http.StatusOK {
		return nil, fmt.Errorf("consume: %d %s", st, b)
	}
	var j job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

func (c *client) ack(ctx context.Context, queue, id string) error {
	st, b, err := c.do(ctx, http.MethodDelete, queue+"/job/"+id, nil, nil)
	if err != nil {
		return err
	}
	if st != http.StatusNoContent {
		return fmt.Errorf("ack: %d %s", st, b)
	}
	return nil
}

func (c *client) size(ctx context.Context, queue string) (int64, error) {
	st, b, err := c.do(ctx, http.MethodGet, queue+"/size", nil, nil)
	if err != nil {
		return 0, err
	}
	if st != http.StatusOK {
		return 0, fmt.Errorf("size: %d %s", st, b)
	}
	var r struct {
		Size int64 `json:"size"`
	}
	err = json.Unmarshal(b, &r)
	return r.Size, err
}

// samples collects latencies.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *samples) fill(r *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return
	}
	sort.Slice(s.d, func(i, j int) bool { return s.d[i] < s.d[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.P50MS = ms(s.d[len(s.d)/2])
	r.P99MS = ms(s.d[len(s.d)*99/100])
	r.MaxMS = ms(s.d[len(s.d)-1])
	r.MinMS = ms(s.d[0])
}

func (c *client) body(seq int64) []byte {
	b := make([]byte, c.cfg.BodySize)
	for i := range b {
		b[i] = 'x'
	}
	s := strconv.FormatInt(seq, 10)
	copy(b, s)
	return b
}

// drain empties a queue (consume + ACK, non-blocking) before a scenario,
// for at most 10 s (the ceiling server never runs dry).
func (c *client) drain(ctx context.Context, queue string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, ok := c.http.Transport.(*http.Transport); ok && c.isCeiling(ctx, queue) {
		return
	}
	for {
		j, err := c.consume(ctx, queue, 0)
		if err != nil || j == nil {
			return
		}
		_ = c.ack(ctx, queue, j.ID)
	}
}

// isCeiling reports whether the server is the do-nothing Ceiling (its
// consume never runs dry, so there is nothing to drain).
func (c *client) isCeiling(ctx context.Context, queue string) bool {
	st, b, err := c.do(ctx, http.MethodGet, queue+"/size", nil, nil)
	return err == nil && st == http.StatusOK && bytes.Equal(b, ceilSize)
}

// errStop ends a worker of timed (the queue ran dry).
var errStop = errors.New("bench: stop")

// timed runs op in Concurrency workers until Duration ends (or every
// worker stopped with errStop) and measures it: op returns how many jobs one
// call handled. Errors after the end of the run are not counted.
func timed(ctx context.Context, cfg Config, scenario string, op func(ctx context.Context, worker int) (int, error)) Result {
	var ops, errs atomic.Int64
	var lat samples
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t := time.Now()
				n, err := op(ctx, w)
				if errors.Is(err, errStop) {
					return
				}
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				lat.add(time.Since(t))
				ops.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	r := Result{Scenario: scenario, Ops: ops.Load(), Errors: errs.Load(), Seconds: time.Since(start).Seconds()}
	r.PerSec = float64(r.Ops) / r.Seconds
	lat.fill(&r)
	return r
}

// Publish measures single publishes by Concurrency clients for Duration,
// over Queues queues.
func Publish(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "publish")
	nq := max(1, cfg.Queues)
	body := c.body(0)
	var seq atomic.Int64
	r := timed(ctx, cfg, "publish", func(ctx context.Context, _ int) (int, error) {
		q := queue
		if nq > 1 {
			q = queue + "-" + strconv.Itoa(int(seq.Add(1)%int64(nq)))
		}
		_, err := c.publish(ctx, q, body, 0)
		return 1, err
	})
	if nq > 1 {
		r.Note = fmt.Sprintf("over %d queues", nq)
	}
	return r, nil
}

// BulkPublish measures bulk publishes of BulkSize jobs by Concurrency
// clients for Duration; Ops counts jobs.
func BulkPublish(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "bulk")
	bodies := make([][]byte, cfg.BulkSize)
	for i := range bodies {
		bodies[i] = c.body(int64(i))
	}
	r := timed(ctx, cfg, "bulk_publish", func(ctx context.Context, _ int) (int, error) {
		return len(bodies), c.bulk(ctx, queue, bodies, 0)
	})
	r.Note = fmt.Sprintf("%d jobs per request", cfg.BulkSize)
	return r, nil
}

// ConsumeAck fills a queue with Jobs jobs (bulk), then measures consume +
// ACK by Concurrency consumers until the queue is empty or Duration ends.
func ConsumeAck(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "consume")
	c.drain(ctx, queue)
	if err := fill(ctx, c, queue, cfg.Jobs, 0); err != nil {
		return Result{}, err
	}
	return timed(ctx, cfg, "consume_ack", func(ctx context.Context, _ int) (int, error) {
		j, err := c.consume(ctx, queue, 0)
		if err != nil {
			return 0, err
		}
		if j == nil {
			return 0, errStop
		}
		return 1, c.ack(ctx, queue, j.ID)
	}), nil
}

// fill publishes n jobs to queue with bulk requests, 8 in flight.
func fill(ctx context.Context, c *client, queue string, n, delay int) error {
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	next := atomic.Int64{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := next.Add(int64(c.cfg.BulkSize)) - int64(c.cfg.BulkSize)
				if from >= int64(n) {
					return
				}
				to := min(from+int64(c.cfg.BulkSize), int64(n))
				bodies := make([][]byte, 0, to-from)
				for i := from; i < to; i++ {
					bodies = append(bodies, c.body(i))
				}
				if err := c.bulk(ctx, queue, bodies, delay); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// Preload publishes n jobs delayed by an hour (bulk, 8 requests in flight)
// into a queue of their own, so that the other scenarios can be measured
// with a large timer; it returns the queue's name (destroy it after).
func Preload(ctx context.Context, cfg Config, n int) (string, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "preload")
	return queue, fill(ctx, c, queue, n, 3600)
}

// Destroy deletes a queue's ready, delayed and in-flight jobs.
func Destroy(ctx context.Context, cfg Config, queue string) error {
	cfg.defaults()
	st, b, err := newClient(cfg).do(ctx, http.MethodDelete, queue, nil, nil)
	if err != nil {
		return err
	}
	if st != http.StatusNoContent {
		return fmt.Errorf("destroy: %d %s", st, b)
	}
	return nil
}

// consumers long-poll a queue, ACK every job and record, for each job seen
// the first time, the time from the instant its body carries (Unix ns) to
// its delivery.
type consumers struct {
	ops, dups atomic.Int64
	lat       samples
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	once      sync.Once
	mu        sync.Mutex
	seen      map[string]bool
}

func startConsumers(ctx context.Context, c *client, queue string, n int) *consumers {
	cs := &consumers{seen: make(map[string]bool)}
	ctx, cs.cancel = context.WithCancel(ctx)
	for w := 0; w < n; w++ {
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			for ctx.Err() == nil {
				j, err := c.consume(ctx, queue, 1)
				if err != nil || j == nil {
					continue
				}
				got := time.Now()
				cs.mu.Lock()
				dup := cs.seen[j.ID]
				cs.seen[j.ID] = true
				cs.mu.Unlock()
				if dup {
					cs.dups.Add(1)
					continue
				}
				if at, err := strconv.ParseInt(string(bytes.TrimRight(j.Data, "x")), 10, 64); err == nil {
					cs.lat.add(got.Sub(time.Unix(0, at)))
				}
				cs.ops.Add(1)
				_ = c.ack(ctx, queue, j.ID)
			}
		}()
	}
	return cs
}

// stop ends the consumers and waits for them; safe to call twice.
func (cs *consumers) stop() {
	cs.once.Do(func() { cs.cancel(); cs.wg.Wait() })
}

// Latency publishes at Rate jobs/s for Duration while Concurrency consumers
// long-poll, and measures publish-to-delivery time (each body carries its
// send time).
func Latency(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "latency")
	c.drain(ctx, queue)
	var errs atomic.Int64
	pctx, pcancel := context.WithTimeout(ctx, cfg.Duration)
	defer pcancel()
	cs := startConsumers(ctx, c, queue, cfg.Concurrency)
	defer cs.stop()
	time.Sleep(200 * time.Millisecond) // consumers are waiting
	start := time.Now()
	interval := time.Second / time.Duration(cfg.Rate)
	var pwg sync.WaitGroup
	published := atomic.Int64{}
	// Publishers share the rate: each of P publishers sends every P intervals.
	const pubs = 32
	for p := 0; p < pubs; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			tick := time.NewTicker(interval * pubs)
			defer tick.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				body := c.body(time.Now().UnixNano())
				if _, err := c.publish(pctx, queue, body, 0); err != nil {
					if pctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				published.Add(1)
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for cs.ops.Load() < published.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cs.stop()
	ops, dups, lat := &cs.ops, &cs.dups, &cs.lat
	r := Result{Scenario: "publish_to_consume", Ops: ops.Load(), Errors: errs.Load(), Seconds: time.Since(start).Seconds(),
		Note: fmt.Sprintf("target %d jobs/s, %d published, %d delivered twice", cfg.Rate, published.Load(), dups.Load())}
	r.PerSec = float64(r.Ops) / r.Seconds
	lat.fill(&r)
	if lost := published.Load() - ops.Load(); lost > 0 {
		return r, fmt.Errorf("latency: %d published jobs not delivered within 5 s", lost)
	}
	return r, nil
}

// Delayed publishes Jobs jobs with delays spread over 1–5 s (whole seconds,
// the lmstfy parameter) and measures lateness: delivery time minus due time
// (publish time + delay). Negative lateness means a job fired early.
func Delayed(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "delayed")
	c.drain(ctx, queue)
	var errs atomic.Int64
	cs := startConsumers(ctx, c, queue, cfg.Concurrency)
	defer cs.stop()
	start := time.Now()
	var pwg sync.WaitGroup
	next := atomic.Int64{}
	for p := 0; p < 16; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Jobs) || ctx.Err() != nil {
					return
				}
				delay := 1 + int(i%5)
				t := time.Now()
				body := c.body(t.Add(time.Duration(delay) * time.Second).UnixNano())
				if _, err := c.publish(ctx, queue, body, delay); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for cs.ops.Load()+errs.Load() < int64(cfg.Jobs) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cs.stop()
	ops, lat := &cs.ops, &cs.lat
	r := Result{Scenario: "delayed_lateness", Ops: ops.Load(), Errors: errs.Load(), Seconds: time.Since(start).Seconds(),
		Note: "latency columns are lateness (delivery - due); min < 0 means early"}
	r.PerSec = float64(r.Ops) / r.Seconds
	lat.fill(&r)
	return r, nil
}

// Burst publishes Jobs jobs all due at the same second, then measures the
// time from that second until the ready queue holds them all (size polled
// every 5 ms): how fast the server's timer makes due jobs ready.
func Burst(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	queue := runQueue(cfg.Queue, "burst")
	c.drain(ctx, queue)
	// Align to a second boundary so every job falls due together.
	const delay = 3
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(now))
	due := time.Now().Truncate(time.Second).Add(delay * time.Second)
	if err := fill(ctx, c, queue, cfg.Jobs, delay); err != nil {
		return Result{}, err
	}
	if time.Now().After(due) {
		return Result{}, errors.New("burst: publishing took longer than the delay; lower -jobs")
	}
	var size int64
	for time.Until(due) > 0 {
		time.Sleep(time.Millisecond)
	}
	for ctx.Err() == nil && time.Since(due) < 60*time.Second {
		s, err := c.size(ctx, queue)
		if err != nil {
			return Result{}, err
		}
		size = s
		if s >= int64(cfg.Jobs) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(due)
	r := Result{Scenario: "burst_due", Ops: size, Seconds: took.Seconds(), MaxMS: float64(took.Microseconds()) / 1000,
		Note: fmt.Sprintf("%d jobs due in the same second; max_ms = until all ready", cfg.Jobs)}
	r.PerSec = float64(size) / took.Seconds()
	c.drain(context.Background(), queue)
	return r, nil
}

// Idle holds Concurrency long-polling consumers on as many queues
// (Concurrency/100 queues) for Duration, then publishes one job per queue
// and measures how fast each reaches its consumer.
func Idle(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c := newClient(cfg)
	nq := max(1, cfg.Concurrency/100)
	var lat samples
	var ops atomic.Int64
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var cwg sync.WaitGroup
	timeout := int(cfg.Duration/time.Second) + 10
	for w := 0; w < cfg.Concurrency; w++ {
		cwg.Add(1)
		queue := fmt.Sprintf("%s-idle-%d", cfg.Queue, w%nq)
		go func() {
			defer cwg.Done()
			j, err := c.consume(cctx, queue, timeout)
			if err != nil || j == nil {
				return
			}
			if sent, err := strconv.ParseInt(string(bytes.TrimRight(j.Data, "x")), 10, 64); err == nil {
				lat.add(time.Since(time.Unix(0, sent)))
			}
			ops.Add(1)
			_ = c.ack(context.Background(), queue, j.ID)
		}()
	}
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	start := time.Now()
	for q := 0; q < nq; q++ {
		queue := fmt.Sprintf("%s-idle-%d", cfg.Queue, q)
		if _, err := c.publish(ctx, queue, c.body(time.Now().UnixNano()), 0); err != nil {
			return Result{}, err
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for ops.Load() < int64(nq) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ccancel()
	cwg.Wait()
	r := Result{Scenario: "idle_long_polls", Ops: ops.Load(), Seconds: time.Since(start).Seconds(),
		Note: fmt.Sprintf("%d waiting consumers on %d queues; latency = publish to delivery", cfg.Concurrency, nq)}
	lat.fill(&r)
	return r, nil
}
