// Package bench is Kairos's load generator: the scenarios of
// doc/performance.md against any lmstfy-compatible server (Kairos or
// lmstfy itself), and a do-nothing server of the same API (the ceiling) so
// that figures can be read as a share of what the machine and the load
// generator allow. `kairos bench` is its command-line front.
package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
	// Addr is the server's base URL, e.g. http://127.0.0.1:7777 or
	// https://127.0.0.1:7777.
	Addr string
	// TLS, when set, is the TLS configuration of an https:// Addr (its
	// RootCAs, for a server whose CA the system does not trust); nil uses
	// the system's roots. Its ServerName defaults to Addr's host.
	TLS       *tls.Config
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
	// Groups, when > 0, puts the jobs the counted scenarios publish first
	// (consume's) in that many groups of their queue (issue #32): each bulk
	// publish carries group=g<k>, the groups in turn. 0 publishes no group,
	// lmstfy's API only.
	Groups int
	// Publishers is the number of valid publishers of the flood scenario
	// (default DefaultFloodPublishers); Concurrency is its flood's clients.
	Publishers int
	// FloodBody, when set, makes each flood request of the flood scenario
	// announce a body of FloodBody bytes and send one byte less (the
	// server cannot read it whole): what a server buffers of bodies before
	// it refuses their token.
	FloodBody int
	// ServerCPU, when set, meters the CPU time of the server under test
	// (ProcessCPU for a local one); RedisCPU meters Redis's (RedisProbe.CPU). The
	// load generator's own CPU time is always metered.
	ServerCPU, RedisCPU CPUMeter
	// RedisNodes, when set, meters every node of Redis instead of RedisCPU
	// (RedisProbe.NodesCPU): on a cluster, the results split Redis's CPU
	// per master and give the replicas' apart.
	RedisNodes func(ctx context.Context) ([]NodeCPU, error)
	// PrepareQueue, when set, runs once for each queue a scenario uses,
	// after the scenario named it and before it publishes there: the CLI
	// sets the queue's shards there (--shards).
	PrepareQueue func(ctx context.Context, queue string) error
	// Settle, when set, runs before each measured phase, after its set-up:
	// the CLI waits there for the server's Redis to end a snapshot or AOF
	// rewrite (RedisProbe.Quiet) that earlier writes set off.
	Settle func(ctx context.Context)
}

// settle runs cfg.Settle, if any.
func (c *Config) settle(ctx context.Context) {
	if c.Settle != nil {
		c.Settle(ctx)
	}
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
	// CPU per job (µs): the CPU time a process spent during the scenario's
	// measured phase divided by Ops. The load generator's is always
	// measured (0 where getrusage is missing); the server's and Redis's
	// only when Config.ServerCPU and Config.RedisCPU are set.
	LoadgenCPUUS float64 `json:"loadgen_cpu_us_per_job"`
	ServerCPUUS  float64 `json:"server_cpu_us_per_job,omitempty"`
	RedisCPUUS   float64 `json:"redis_cpu_us_per_job,omitempty"`
	// On a Redis Cluster (Config.RedisNodes), RedisCPUUS is the masters'
	// total, RedisMasters each master's part and RedisReplicasCPUUS the
	// replicas' total.
	RedisMasters       []MasterCPU `json:"redis_masters,omitempty"`
	RedisReplicasCPUUS float64     `json:"redis_replicas_cpu_us_per_job,omitempty"`
	Note               string      `json:"note,omitempty"`
}

// MasterCPU is one cluster master's part of Redis's CPU in a scenario.
type MasterCPU struct {
	Addr  string  `json:"addr"`
	Slots int     `json:"slots"`
	CPUUS float64 `json:"cpu_us_per_job"`
	// Share is CPUUS over the masters' total.
	Share float64 `json:"share"`
}

// prepare runs Config.PrepareQueue, if any, on each queue.
func (c *Config) prepare(ctx context.Context, queues ...string) error {
	if c.PrepareQueue == nil {
		return nil
	}
	for _, q := range queues {
		if err := c.PrepareQueue(ctx, q); err != nil {
			return fmt.Errorf("queue %s: %w", q, err)
		}
	}
	return nil
}

// runQueue names a scenario's queue for one run: a fresh queue per run, so
// that jobs a previous run left in flight (consumers stopped mid-request)
// cannot come back after their TTR and skew this run's figures.
func runQueue(prefix, scenario string) string {
	return prefix + "-" + scenario + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// The requests of the lmstfy API the scenarios send.

func publishQuery(delay int) string {
	return "ttl=3600&tries=3&delay=" + strconv.Itoa(delay)
}

func consumeQuery(timeout int) string {
	return "ttr=30&timeout=" + strconv.Itoa(timeout)
}

// statusError reports an unexpected response.
func statusError(op string, status int, body []byte) error {
	if len(body) > 512 {
		body = body[:512]
	}
	return fmt.Errorf("%s: %d %s", op, status, body)
}

// publish publishes body to the queue at path (escaped); query is
// publishQuery's.
func (cn *conn) publish(ctx context.Context, path, query string, body []byte) error {
	st, err := cn.do(ctx, http.MethodPut, path, nil, query, body, 0)
	if err != nil {
		return err
	}
	if st != http.StatusCreated {
		return statusError("publish", st, cn.body)
	}
	return nil
}

// bulkBody returns the JSON array of bodies (strings) that bulk publish
// takes.
func bulkBody(buf []byte, bodies [][]byte) []byte {
	buf = append(buf[:0], '[')
	for i, b := range bodies {
		if i > 0 {
			buf = append(buf, ',')
		}
		bs, _ := json.Marshal(string(b))
		buf = append(buf, bs...)
	}
	return append(buf, ']')
}

// bulk publishes a bulkBody to the queue at path.
func (cn *conn) bulk(ctx context.Context, path, query string, body []byte) error {
	st, err := cn.do(ctx, http.MethodPut, path+"/bulk", nil, query, body, 0)
	if err != nil {
		return err
	}
	if st != http.StatusCreated {
		return statusError("bulk publish", st, cn.body)
	}
	return nil
}

// consume takes one job from the queue at path, waiting up to timeout
// seconds (query is consumeQuery(timeout)). found is false when none came.
// id (and data, decoded from base64 when withData) are valid until the
// next request on cn.
func (cn *conn) consume(ctx context.Context, path, query string, timeout int, withData bool) (id, data []byte, found bool, err error) {
	st, err := cn.do(ctx, http.MethodGet, path, nil, query, nil, time.Duration(timeout)*time.Second)
	if err != nil {
		return nil, nil, false, err
	}
	if st == http.StatusNotFound {
		return nil, nil, false, nil
	}
	if st != http.StatusOK {
		return nil, nil, false, statusError("consume", st, cn.body)
	}
	keys := [...]string{"job_id", "data"}
	var vals [2][]byte
	if topLevelStrings(cn.body, keys[:], vals[:]) && vals[0] != nil && (!withData || vals[1] != nil) {
		if !withData {
			return vals[0], nil, true, nil
		}
		cn.data = grow(cn.data, base64.StdEncoding.DecodedLen(len(vals[1])))
		if n, err := base64.StdEncoding.Decode(cn.data, vals[1]); err == nil {
			return vals[0], cn.data[:n], true, nil
		}
	}
	// The fast path could not tell: decode the way any client would.
	var j struct {
		ID   string `json:"job_id"`
		Data []byte `json:"data"`
	}
	if err := json.Unmarshal(cn.body, &j); err != nil {
		return nil, nil, false, fmt.Errorf("consume: %w", err)
	}
	return []byte(j.ID), j.Data, true, nil
}

// ack deletes the job id; jobPath is the queue's path with "/job/".
func (cn *conn) ack(ctx context.Context, jobPath string, id []byte) error {
	st, err := cn.do(ctx, http.MethodDelete, jobPath, id, "", nil, 0)
	if err != nil {
		return err
	}
	if st != http.StatusNoContent {
		return statusError("ack", st, cn.body)
	}
	return nil
}

// size returns the ready size of the queue at path.
func (cn *conn) size(ctx context.Context, path string) (int64, error) {
	st, err := cn.do(ctx, http.MethodGet, path+"/size", nil, "", nil, 0)
	if err != nil {
		return 0, err
	}
	if st != http.StatusOK {
		return 0, statusError("size", st, cn.body)
	}
	var r struct {
		Size int64 `json:"size"`
	}
	if err := json.Unmarshal(cn.body, &r); err != nil {
		return 0, fmt.Errorf("size: %w", err)
	}
	return r.Size, nil
}

// escQueue escapes a queue name for a path.
func escQueue(queue string) string { return url.PathEscape(queue) }

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

// appendBody appends a job body of cfg.BodySize bytes to b: seq in
// decimal, then 'x's.
func (c *client) appendBody(b []byte, seq int64) []byte {
	start := len(b)
	b = strconv.AppendInt(b, seq, 10)
	for len(b)-start < c.cfg.BodySize {
		b = append(b, 'x')
	}
	if len(b)-start > c.cfg.BodySize {
		b = b[:start+c.cfg.BodySize]
	}
	return b
}

func (c *client) body(seq int64) []byte { return c.appendBody(nil, seq) }

// bodyTime parses the Unix-nanosecond instant a body carries.
func bodyTime(data []byte) (time.Time, bool) {
	at, err := strconv.ParseInt(string(bytes.TrimRight(data, "x")), 10, 64)
	return time.Unix(0, at), err == nil
}

// drain empties a queue (consume + ACK, non-blocking) before a scenario,
// for at most 10 s (the ceiling server never runs dry).
func (c *client) drain(ctx context.Context, queue string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cn := c.conn()
	defer cn.close()
	path := escQueue(queue)
	if isCeiling(ctx, cn, path) {
		return
	}
	query, jobPath := consumeQuery(0), path+"/job/"
	for {
		id, _, found, err := cn.consume(ctx, path, query, 0, false)
		if err != nil || !found {
			return
		}
		_ = cn.ack(ctx, jobPath, id)
	}
}

// isCeiling reports whether the server is the do-nothing Ceiling (its
// consume never runs dry, so there is nothing to drain).
func isCeiling(ctx context.Context, cn *conn, path string) bool {
	st, err := cn.do(ctx, http.MethodGet, path+"/size", nil, "", nil, 0)
	return err == nil && st == http.StatusOK && bytes.Equal(cn.body, ceilSize)
}

// errStop ends a worker of timed (the queue ran dry).
var errStop = errors.New("bench: stop")

// timed runs op in Concurrency workers, each with a connection of its own,
// until Duration ends (or every worker stopped with errStop) and measures
// it: op returns how many jobs one call handled. Errors after the end of
// the run are not counted.
func timed(ctx context.Context, cfg Config, c *client, scenario string, op func(ctx context.Context, cn *conn) (int, error)) Result {
	var ops, errs atomic.Int64
	var lat samples
	cfg.settle(ctx)
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	mark := cfg.cpuMark(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn := c.conn()
			defer cn.close()
			for ctx.Err() == nil {
				t := time.Now()
				n, err := op(ctx, cn)
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
	r.setCPU(context.WithoutCancel(ctx), &cfg, mark)
	return r
}

// Publish measures single publishes by Concurrency clients for Duration,
// over Queues queues.
func Publish(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "publish")
	queues := []string{queue}
	if nq := cfg.Queues; nq > 1 {
		queues = make([]string, nq)
		for i := range queues {
			queues[i] = queue + "-" + strconv.Itoa(i)
		}
	}
	if err := cfg.prepare(ctx, queues...); err != nil {
		return Result{}, err
	}
	paths := make([]string, len(queues))
	for i, q := range queues {
		paths[i] = escQueue(q)
	}
	body, query := c.body(0), publishQuery(0)
	var seq atomic.Int64
	r := timed(ctx, cfg, c, "publish", func(ctx context.Context, cn *conn) (int, error) {
		path := paths[0]
		if len(paths) > 1 {
			path = paths[seq.Add(1)%int64(len(paths))]
		}
		return 1, cn.publish(ctx, path, query, body)
	})
	if len(paths) > 1 {
		r.Note = addNote(fmt.Sprintf("over %d queues", len(paths)), r.Note)
	}
	return r, nil
}

// BulkPublish measures bulk publishes of BulkSize jobs by Concurrency
// clients for Duration; Ops counts jobs.
func BulkPublish(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "bulk")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	path := escQueue(queue)
	bodies := make([][]byte, cfg.BulkSize)
	for i := range bodies {
		bodies[i] = c.body(int64(i))
	}
	body, query := bulkBody(nil, bodies), publishQuery(0)
	r := timed(ctx, cfg, c, "bulk_publish", func(ctx context.Context, cn *conn) (int, error) {
		return len(bodies), cn.bulk(ctx, path, query, body)
	})
	r.Note = addNote(fmt.Sprintf("%d jobs per request", cfg.BulkSize), r.Note)
	return r, nil
}

// addNote joins notes with "; ".
func addNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// ConsumeAck fills a queue with Jobs jobs (bulk), then measures consume +
// ACK by Concurrency consumers until the queue is empty or Duration ends.
func ConsumeAck(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "consume")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	if err := fill(ctx, c, queue, cfg.Jobs, 0); err != nil {
		return Result{}, err
	}
	path := escQueue(queue)
	query, jobPath := consumeQuery(0), path+"/job/"
	return timed(ctx, cfg, c, "consume_ack", func(ctx context.Context, cn *conn) (int, error) {
		id, _, found, err := cn.consume(ctx, path, query, 0, false)
		if err != nil {
			return 0, err
		}
		if !found {
			return 0, errStop
		}
		return 1, cn.ack(ctx, jobPath, id)
	}), nil
}

// fill publishes n jobs to queue with bulk requests, 8 in flight.
func fill(ctx context.Context, c *client, queue string, n, delay int) error {
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	next := atomic.Int64{}
	path, query := escQueue(queue), publishQuery(delay)
	groups := c.cfg.Groups
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn := c.conn()
			defer cn.close()
			var body []byte
			bodies := make([][]byte, 0, c.cfg.BulkSize)
			for {
				from := next.Add(int64(c.cfg.BulkSize)) - int64(c.cfg.BulkSize)
				if from >= int64(n) {
					return
				}
				to := min(from+int64(c.cfg.BulkSize), int64(n))
				bodies = bodies[:0]
				for i := from; i < to; i++ {
					bodies = append(bodies, c.body(i))
				}
				body = bulkBody(body, bodies)
				q := query
				if groups > 0 {
					q += "&group=g" + strconv.FormatInt(from/int64(c.cfg.BulkSize)%int64(groups), 10)
				}
				if err := cn.bulk(ctx, path, q, body); err != nil {
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
	c, err := newClient(cfg)
	if err != nil {
		return "", err
	}
	queue := runQueue(cfg.Queue, "preload")
	return queue, fill(ctx, c, queue, n, 3600)
}

// Destroy deletes a queue's ready, delayed and in-flight jobs.
func Destroy(ctx context.Context, cfg Config, queue string) error {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	cn := c.conn()
	defer cn.close()
	st, err := cn.do(ctx, http.MethodDelete, escQueue(queue), nil, "", nil, 0)
	if err != nil {
		return err
	}
	if st != http.StatusNoContent {
		return statusError("destroy", st, cn.body)
	}
	return nil
}

// consumers long-poll a queue, each on a connection of its own, ACK every
// job and record, for each job seen the first time, the time from the
// instant its body carries (Unix ns) to its delivery.
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
	path := escQueue(queue)
	query, jobPath := consumeQuery(1), path+"/job/"
	for w := 0; w < n; w++ {
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			cn := c.conn()
			defer cn.close()
			for ctx.Err() == nil {
				id, data, found, err := cn.consume(ctx, path, query, 1, true)
				if err != nil || !found {
					continue
				}
				got := time.Now()
				cs.mu.Lock()
				dup := cs.seen[string(id)]
				if !dup {
					cs.seen[string(id)] = true
				}
				cs.mu.Unlock()
				if dup {
					cs.dups.Add(1)
					continue
				}
				if at, ok := bodyTime(data); ok {
					cs.lat.add(got.Sub(at))
				}
				cs.ops.Add(1)
				_ = cn.ack(ctx, jobPath, id)
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
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "latency")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	var errs atomic.Int64
	cs := startConsumers(ctx, c, queue, cfg.Concurrency)
	defer cs.stop()
	time.Sleep(200 * time.Millisecond) // consumers are waiting
	cfg.settle(ctx)
	pctx, pcancel := context.WithTimeout(ctx, cfg.Duration)
	defer pcancel()
	mark := cfg.cpuMark(ctx)
	start := time.Now()
	interval := time.Second / time.Duration(cfg.Rate)
	var pwg sync.WaitGroup
	published := atomic.Int64{}
	path, query := escQueue(queue), publishQuery(0)
	// Publishers share the rate: publisher p sends at start + (p + k·P)
	// intervals, so that the P publishers take turns and the load is even
	// (P tickers started together would send in bursts of P). A publisher
	// that falls behind skips the slots already past, as a ticker does.
	const pubs = 32
	for p := 0; p < pubs; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			cn := c.conn()
			defer cn.close()
			period := interval * pubs
			next := start.Add(time.Duration(p) * interval)
			timer := time.NewTimer(time.Until(next))
			defer timer.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-timer.C:
				}
				next = next.Add(period)
				if late := time.Since(next); late > 0 {
					next = next.Add((late/period + 1) * period)
				}
				timer.Reset(time.Until(next))
				cn.scratch = c.appendBody(cn.scratch[:0], time.Now().UnixNano())
				if err := cn.publish(pctx, path, query, cn.scratch); err != nil {
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
	r.setCPU(ctx, &cfg, mark)
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
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "delayed")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	var errs atomic.Int64
	cfg.settle(ctx)
	mark := cfg.cpuMark(ctx)
	cs := startConsumers(ctx, c, queue, cfg.Concurrency)
	defer cs.stop()
	start := time.Now()
	var pwg sync.WaitGroup
	next := atomic.Int64{}
	path := escQueue(queue)
	var queries [6]string
	for d := range queries {
		queries[d] = publishQuery(d)
	}
	for p := 0; p < 16; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			cn := c.conn()
			defer cn.close()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Jobs) || ctx.Err() != nil {
					return
				}
				delay := 1 + int(i%5)
				t := time.Now()
				cn.scratch = c.appendBody(cn.scratch[:0], t.Add(time.Duration(delay)*time.Second).UnixNano())
				if err := cn.publish(ctx, path, queries[delay], cn.scratch); err != nil {
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
	r.setCPU(ctx, &cfg, mark)
	return r, nil
}

// Burst publishes Jobs jobs all due at the same second, then measures the
// time from that second until the ready queue holds them all (size polled
// every 5 ms): how fast the server's timer makes due jobs ready.
func Burst(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	queue := runQueue(cfg.Queue, "burst")
	if err := cfg.prepare(ctx, queue); err != nil {
		return Result{}, err
	}
	c.drain(ctx, queue)
	// Start just after a second boundary, so that every job falls due in
	// the second `due`: at once on a server with whole-second timers
	// (lmstfy), and spread over the time the publishing took on one with
	// millisecond timers (Kairos), whose last job falls due `lastDue`.
	// The delay leaves a server that publishes at 20k jobs/s time to
	// publish them all first.
	delay := 3 + cfg.Jobs/20000
	cfg.settle(ctx)
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(now))
	due := time.Now().Truncate(time.Second).Add(time.Duration(delay) * time.Second)
	mark := cfg.cpuMark(ctx)
	if err := fill(ctx, c, queue, cfg.Jobs, delay); err != nil {
		return Result{}, err
	}
	lastDue := time.Now().Add(time.Duration(delay) * time.Second)
	if time.Now().After(due) {
		return Result{}, errors.New("burst: publishing took longer than the delay; lower -jobs")
	}
	cn := c.conn()
	defer cn.close()
	path := escQueue(queue)
	var size int64
	for time.Until(due) > 0 {
		time.Sleep(time.Millisecond)
	}
	for ctx.Err() == nil && time.Since(due) < 60*time.Second {
		s, err := cn.size(ctx, path)
		if err != nil {
			return Result{}, err
		}
		size = s
		if s >= int64(cfg.Jobs) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready := time.Now()
	took := ready.Sub(due)
	r := Result{Scenario: "burst_due", Ops: size, Seconds: took.Seconds(), MaxMS: float64(took.Microseconds()) / 1000,
		Note: fmt.Sprintf("%d jobs due in the same second; max_ms = from that second until all ready; "+
			"the last job fell due %.0f ms into it (publishing time; 0 with whole-second timers) and all were ready %.0f ms after it; CPU includes publishing them",
			cfg.Jobs, float64(lastDue.Sub(due).Microseconds())/1000, float64(ready.Sub(lastDue).Microseconds())/1000)}
	r.PerSec = float64(size) / took.Seconds()
	r.setCPU(ctx, &cfg, mark)
	c.drain(context.WithoutCancel(ctx), queue)
	return r, nil
}

// idleSettle is how long Idle lets the server accept and park its
// consumers before it meters the CPU of waiting.
const idleSettle = 2 * time.Second

// Idle holds Concurrency long-polling consumers (a connection each) on
// Concurrency/100 queues for Duration, then publishes one job per queue and
// measures how fast each reaches its consumer. The note gives each metered
// process's CPU while the consumers wait, as a share of one core.
func Idle(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	c, err := newClient(cfg)
	if err != nil {
		return Result{}, err
	}
	nq := max(1, cfg.Concurrency/100)
	for q := 0; q < nq; q++ {
		if err := cfg.prepare(ctx, fmt.Sprintf("%s-idle-%d", cfg.Queue, q)); err != nil {
			return Result{}, err
		}
	}
	cfg.settle(ctx)
	var lat samples
	var ops atomic.Int64
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var cwg sync.WaitGroup
	timeout := int(cfg.Duration/time.Second) + 10 + int(idleSettle/time.Second)
	query := consumeQuery(timeout)
	var started atomic.Int64
	for w := 0; w < cfg.Concurrency; w++ {
		cwg.Add(1)
		path := escQueue(fmt.Sprintf("%s-idle-%d", cfg.Queue, w%nq))
		go func() {
			defer cwg.Done()
			cn := c.conn()
			defer cn.close()
			started.Add(1)
			id, data, found, err := cn.consume(cctx, path, query, timeout, true)
			if err != nil || !found {
				return
			}
			if sent, ok := bodyTime(data); ok {
				lat.add(time.Since(sent))
			}
			ops.Add(1)
			_ = cn.ack(context.Background(), path+"/job/", id)
		}()
	}
	// Measure the waiting, not the arrival: every consumer has started its
	// request, and the server has had idleSettle to accept and park them.
	for started.Load() < int64(cfg.Concurrency) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-time.After(idleSettle):
	case <-ctx.Done():
	}
	hold := cfg.cpuMark(ctx)
	holdStart := time.Now()
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	held := cfg.cpuMark(ctx)
	heldFor := time.Since(holdStart)
	start := time.Now()
	cn := c.conn()
	defer cn.close()
	pquery := publishQuery(0)
	for q := 0; q < nq; q++ {
		path := escQueue(fmt.Sprintf("%s-idle-%d", cfg.Queue, q))
		if err := cn.publish(ctx, path, pquery, c.body(time.Now().UnixNano())); err != nil {
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
	if held.err == nil && hold.err == nil {
		share := func(a, b time.Duration) string { return fmt.Sprintf("%.1f%%", 100*float64(b-a)/float64(heldFor)) }
		note := "CPU while waiting (share of one core): load generator " + share(hold.self, held.self)
		if cfg.ServerCPU != nil {
			note += ", server " + share(hold.server, held.server)
		}
		if cfg.redisMetered() {
			note += ", Redis " + share(hold.redis, held.redis)
		}
		r.Note = addNote(r.Note, note)
	}
	r.setCPU(ctx, &cfg, hold)
	return r, nil
}
