// Command peers measures Kairos, asynq and River side by side with the same
// scenarios, job counts, body size and concurrency (issue #34; BullMQ has its
// own driver in scripts/peers/bullmq, which prints the same JSON lines).
// scripts/bench-peers.sh starts each store and server, runs this harness
// against one peer at a time and then prints the table with `peers table`.
//
// It is its own Go module so that the main module's go.mod does not carry the
// peers' dependencies; `make test` vets it so that it keeps compiling.
//
//	peers run -peer asynq -redis 127.0.0.1:6390 -store-pid 123 memory enqueue process
//	peers table results/*.jsonl
//
// Every scenario prints one JSON line (result) on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// peer is one job system driven through its own documented client API.
type peer interface {
	name() string
	version() string
	// enqueue adds one job with body, due at due (the zero time: now).
	enqueue(ctx context.Context, queue string, body []byte, due time.Time) error
	// batch adds bodies in one call of the peer's batch API, each due at
	// due (zero: now); errNoBatch when the peer has none.
	batch(ctx context.Context, queue string, bodies [][]byte, due time.Time) error
	// work runs concurrency handlers over queue until stop is called;
	// every job is acknowledged after h returns.
	work(ctx context.Context, queue string, concurrency int, h func(body []byte)) (stop func(), err error)
	// clean empties the store between scenarios.
	clean(ctx context.Context) error
	// storeBytes is the store's memory (Redis used_memory) or the size of
	// the job table with its indexes (PostgreSQL).
	storeBytes(ctx context.Context) (int64, error)
	close()
}

var errNoBatch = fmt.Errorf("no batch API")

// result is one scenario's measurement: one JSON line.
type result struct {
	Peer     string  `json:"peer"`
	Version  string  `json:"version"`
	Scenario string  `json:"scenario"`
	Round    int     `json:"round"`
	Jobs     int     `json:"jobs"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"rate"`
	Target   float64 `json:"target,omitempty"`
	// Latency or lateness in milliseconds (latency, delayed).
	P50 *float64 `json:"p50_ms,omitempty"`
	P99 *float64 `json:"p99_ms,omitempty"`
	Max *float64 `json:"max_ms,omitempty"`
	Min *float64 `json:"min_ms,omitempty"`
	// CPU in µs per job of each process involved: "client" (this
	// process: the producers and, for asynq and River, the workers too),
	// "server" (kairos-server), "store" (Redis or PostgreSQL, with its
	// children).
	CPU         map[string]float64 `json:"cpu_us,omitempty"`
	BytesPerJob float64            `json:"bytes_per_job,omitempty"`
	Note        string             `json:"note,omitempty"`
}

type config struct {
	peer, redis, pg, kairosAddr, token string
	storePID, serverPID, round         int
	jobs, conc, bulkConc, batchSize    int
	bodySize, delayedJobs, memJobs     int
	latDur                             time.Duration
	riverDefaults                      bool
	rates                              []float64
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "run":
		run(os.Args[2:])
	case "table":
		if err := table(os.Stdout, os.Args[2:]); err != nil {
			fatal(err)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: peers run -peer kairos|asynq|river [flags] scenario...\n       peers table FILE...\nscenarios: memory enqueue bulk process latency delayed")
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "peers:", err)
	os.Exit(1)
}

func run(args []string) {
	var cfg config
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&cfg.peer, "peer", "", "kairos, asynq or river")
	fs.StringVar(&cfg.redis, "redis", "", "Redis address (kairos: its pool's Redis, for memory; asynq)")
	fs.StringVar(&cfg.pg, "pg", "", "PostgreSQL URL (river)")
	fs.StringVar(&cfg.kairosAddr, "kairos", "", "kairos-server address")
	fs.StringVar(&cfg.token, "token", "", "Kairos token of namespace bench")
	fs.IntVar(&cfg.storePID, "store-pid", 0, "pid of redis-server or of the postmaster")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "pid of kairos-server")
	fs.IntVar(&cfg.round, "round", 1, "round number, recorded in the results")
	fs.IntVar(&cfg.jobs, "jobs", 100000, "jobs of enqueue, bulk and process")
	fs.IntVar(&cfg.conc, "c", 64, "producers (enqueue) and handlers (process, latency, delayed)")
	fs.IntVar(&cfg.bulkConc, "bulk-c", 16, "producers of bulk")
	fs.IntVar(&cfg.batchSize, "batch", 64, "jobs per batch call")
	fs.IntVar(&cfg.bodySize, "body", 100, "body bytes")
	fs.IntVar(&cfg.delayedJobs, "delayed-jobs", 20000, "jobs of delayed, due 1-5 s after they are published")
	fs.IntVar(&cfg.memJobs, "mem-jobs", 20000, "delayed jobs (due in 1 h) of memory")
	fs.DurationVar(&cfg.latDur, "latency-duration", 5*time.Second, "how long latency publishes at each rate")
	fs.BoolVar(&cfg.riverDefaults, "river-defaults", false, "River with its default FetchCooldown and FetchPollInterval (reported as river-defaults)")
	ratesFlag := fs.String("rates", "1000,4000", "publish rates of latency, jobs/s")
	_ = fs.Parse(args)
	for _, s := range strings.Split(*ratesFlag, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || r <= 0 {
			fatal(fmt.Errorf("-rates: bad rate %q", s))
		}
		cfg.rates = append(cfg.rates, r)
	}
	if cfg.bodySize < 48 {
		fatal(fmt.Errorf("-body must be at least 48 bytes (it carries two timestamps)"))
	}
	ctx := context.Background()
	var (
		p   peer
		err error
	)
	switch cfg.peer {
	case "kairos":
		p, err = newKairos(cfg)
	case "asynq":
		p, err = newAsynq(cfg)
	case "river":
		p, err = newRiver(ctx, cfg)
	default:
		err = fmt.Errorf("-peer: want kairos, asynq or river, not %q", cfg.peer)
	}
	if err != nil {
		fatal(err)
	}
	defer p.close()
	b := &bench{cfg: cfg, p: p}
	for _, sc := range fs.Args() {
		var rs []result
		switch sc {
		case "memory":
			rs, err = b.memory(ctx)
		case "enqueue":
			rs, err = b.enqueue(ctx)
		case "bulk":
			rs, err = b.bulk(ctx)
		case "process":
			rs, err = b.process(ctx)
		case "latency":
			rs, err = b.latency(ctx)
		case "delayed":
			rs, err = b.delayed(ctx)
		default:
			err = fmt.Errorf("unknown scenario %q", sc)
		}
		if err != nil {
			fatal(fmt.Errorf("%s %s: %w", cfg.peer, sc, err))
		}
		for _, r := range rs {
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
		}
		if err := p.clean(ctx); err != nil {
			fatal(fmt.Errorf("%s: clean after %s: %w", cfg.peer, sc, err))
		}
	}
}

type bench struct {
	cfg config
	p   peer
}

// body is a JSON string of n bytes holding the publish time and the due
// time in Unix nanoseconds, so that any handler can measure latency and
// lateness from the body alone, and Kairos's batch (JSON) takes it as is.
func body(n int, sent, due time.Time) []byte {
	var d int64
	if !due.IsZero() {
		d = due.UnixNano()
	}
	b := make([]byte, 0, n)
	b = fmt.Appendf(b, `"%019d|%019d|`, sent.UnixNano(), d)
	for len(b) < n-1 {
		b = append(b, 'x')
	}
	return append(b, '"')
}

// stamps reads body's two times back.
func stamps(b []byte) (sent, due int64) {
	if len(b) < 41 {
		return 0, 0
	}
	sent, _ = strconv.ParseInt(string(b[1:20]), 10, 64)
	due, _ = strconv.ParseInt(string(b[21:40]), 10, 64)
	return sent, due
}

// cpu is the CPU time used so far by this process and by the server's and
// the store's process trees.
func (b *bench) cpu() map[string]time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	m := map[string]time.Duration{
		"client": time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
	if b.cfg.serverPID > 0 {
		m["server"] = treeCPU(b.cfg.serverPID)
	}
	if b.cfg.storePID > 0 {
		m["store"] = treeCPU(b.cfg.storePID)
	}
	return m
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTick = 100

// procTimes reads utime, stime, cutime and cstime of /proc/pid/stat and its
// parent's pid.
func procTimes(pid int) (self, children time.Duration, ppid int, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k-3], 10, 64)
		return time.Duration(v) * time.Second / clockTick
	}
	ppid, _ = strconv.Atoi(f[1])
	return n(14) + n(15), n(16) + n(17), ppid, true
}

// treeCPU is the CPU time of pid, of its children that ended (cutime,
// cstime) and of its live children: for PostgreSQL, the postmaster and
// every backend and auxiliary process; for Redis, also its AOF rewrites.
func treeCPU(pid int) time.Duration {
	self, dead, _, ok := procTimes(pid)
	if !ok {
		return 0
	}
	total := self + dead
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if s, _, pp, ok := procTimes(child); ok && pp == pid {
			total += s
		}
	}
	return total
}

func perJob(before, after map[string]time.Duration, jobs int) map[string]float64 {
	out := map[string]float64{}
	if jobs == 0 {
		return out
	}
	for k, a := range after {
		out[k] = round1(float64(a-before[k]) / float64(time.Microsecond) / float64(jobs))
	}
	return out
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

func (b *bench) result(sc string, jobs int, d time.Duration, before, after map[string]time.Duration) result {
	return result{
		Peer: b.p.name(), Version: b.p.version(), Scenario: sc, Round: b.cfg.round,
		Jobs: jobs, Seconds: d.Seconds(), Rate: float64(jobs) / d.Seconds(),
		CPU: perJob(before, after, jobs),
	}
}

// parallel runs n tasks over c goroutines; the first error stops it.
func parallel(c, n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

// fill adds n jobs to queue, in batches when the peer has a batch API, each
// due at due (zero: now).
func (b *bench) fill(ctx context.Context, queue string, n int, due time.Time) error {
	bs := b.cfg.batchSize
	err := b.p.batch(ctx, queue, [][]byte{body(b.cfg.bodySize, time.Now(), due)}, due)
	if err == errNoBatch {
		return parallel(b.cfg.conc, n, func(int) error {
			return b.p.enqueue(ctx, queue, body(b.cfg.bodySize, time.Now(), due), due)
		})
	}
	if err != nil {
		return err
	}
	n--
	return parallel(b.cfg.bulkConc, (n+bs-1)/bs, func(i int) error {
		k := min(bs, n-i*bs)
		bodies := make([][]byte, k)
		for j := range bodies {
			bodies[j] = body(b.cfg.bodySize, time.Now(), due)
		}
		return b.p.batch(ctx, queue, bodies, due)
	})
}

func (b *bench) memory(ctx context.Context) ([]result, error) {
	n := b.cfg.memJobs
	time.Sleep(500 * time.Millisecond)
	m0, err := b.p.storeBytes(ctx)
	if err != nil {
		return nil, err
	}
	due := time.Now().Add(time.Hour)
	if err := b.fill(ctx, "mem", n, due); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond)
	m1, err := b.p.storeBytes(ctx)
	if err != nil {
		return nil, err
	}
	return []result{{Peer: b.p.name(), Version: b.p.version(), Scenario: "memory", Round: b.cfg.round,
		Jobs: n, BytesPerJob: round1(float64(m1-m0) / float64(n))}}, nil
}

func (b *bench) enqueue(ctx context.Context) ([]result, error) {
	n := b.cfg.jobs
	c0, t0 := b.cpu(), time.Now()
	err := parallel(b.cfg.conc, n, func(int) error {
		return b.p.enqueue(ctx, "enq", body(b.cfg.bodySize, time.Now(), time.Time{}), time.Time{})
	})
	if err != nil {
		return nil, err
	}
	d, c1 := time.Since(t0), b.cpu()
	return []result{b.result("enqueue", n, d, c0, c1)}, nil
}

func (b *bench) bulk(ctx context.Context) ([]result, error) {
	n, bs := b.cfg.jobs, b.cfg.batchSize
	if err := b.p.batch(ctx, "bulk", [][]byte{body(b.cfg.bodySize, time.Now(), time.Time{})}, time.Time{}); err == errNoBatch {
		return []result{{Peer: b.p.name(), Version: b.p.version(), Scenario: "bulk", Round: b.cfg.round, Note: "no batch API"}}, nil
	} else if err != nil {
		return nil, err
	}
	n = n / bs * bs
	c0, t0 := b.cpu(), time.Now()
	err := parallel(b.cfg.bulkConc, n/bs, func(int) error {
		bodies := make([][]byte, bs)
		for j := range bodies {
			bodies[j] = body(b.cfg.bodySize, time.Now(), time.Time{})
		}
		return b.p.batch(ctx, "bulk", bodies, time.Time{})
	})
	if err != nil {
		return nil, err
	}
	d, c1 := time.Since(t0), b.cpu()
	return []result{b.result("bulk", n, d, c0, c1)}, nil
}

// process fills a queue with jobs, then times handlers that consume and
// acknowledge all of them.
func (b *bench) process(ctx context.Context) ([]result, error) {
	n := b.cfg.jobs
	if err := b.fill(ctx, "proc", n, time.Time{}); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	var count atomic.Int64
	done := make(chan struct{})
	c0, t0 := b.cpu(), time.Now()
	stop, err := b.p.work(ctx, "proc", b.cfg.conc, func([]byte) {
		if count.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return nil, err
	}
	timeout := time.After(time.Duration(n)*time.Millisecond + time.Minute)
	select {
	case <-done:
	case <-timeout:
		stop()
		return nil, fmt.Errorf("process: %d of %d jobs handled in time", count.Load(), n)
	}
	d, c1 := time.Since(t0), b.cpu()
	stop()
	return []result{b.result("process", n, d, c0, c1)}, nil
}

// samples collects milliseconds from concurrent handlers.
type samples struct {
	mu sync.Mutex
	v  []float64
}

func (s *samples) add(ms float64) {
	s.mu.Lock()
	s.v = append(s.v, ms)
	s.mu.Unlock()
}

func (s *samples) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.v)
}

func (s *samples) fill(r *result) {
	s.mu.Lock()
	v := append([]float64(nil), s.v...)
	s.mu.Unlock()
	if len(v) == 0 {
		return
	}
	sort.Float64s(v)
	q := func(p float64) *float64 {
		x := round3(v[min(len(v)-1, int(p*float64(len(v))))])
		return &x
	}
	r.P50, r.P99 = q(0.50), q(0.99)
	mx, mn := round3(v[len(v)-1]), round3(v[0])
	r.Max, r.Min = &mx, &mn
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func ms(d int64) float64 { return float64(d) / 1e6 }

// latency publishes at each rate for -latency-duration with handlers
// running, and measures publish-to-handler time.
func (b *bench) latency(ctx context.Context) ([]result, error) {
	var out []result
	for _, rate := range b.cfg.rates {
		r, err := b.latencyAt(ctx, rate)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		if err := b.p.clean(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (b *bench) latencyAt(ctx context.Context, rate float64) (result, error) {
	queue := fmt.Sprintf("lat%d", int(rate))
	var s samples
	stop, err := b.p.work(ctx, queue, b.cfg.conc, func(body []byte) {
		sent, _ := stamps(body)
		s.add(ms(time.Now().UnixNano() - sent))
	})
	if err != nil {
		return result{}, err
	}
	defer stop()
	time.Sleep(time.Second)
	n := int(rate * b.cfg.latDur.Seconds())
	tokens := make(chan struct{}, n)
	c0, t0 := b.cpu(), time.Now()
	go func() { // the pacer: one token per job, on schedule
		sent := 0
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for sent < n {
			due := min(n, int(time.Since(t0).Seconds()*rate))
			for ; sent < due; sent++ {
				tokens <- struct{}{}
			}
			<-tk.C
		}
		close(tokens)
	}()
	var failed atomic.Value
	var wg sync.WaitGroup
	for range b.cfg.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tokens {
				if err := b.p.enqueue(ctx, queue, body(b.cfg.bodySize, time.Now(), time.Time{}), time.Time{}); err != nil {
					failed.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return result{}, err
	}
	sendEnd := time.Since(t0)
	for deadline := time.Now().Add(15 * time.Second); s.len() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	d, c1 := time.Since(t0), b.cpu()
	got := s.len()
	r := b.result("latency", got, d, c0, c1)
	r.Target = rate
	r.Rate = float64(n) / sendEnd.Seconds() // the publish rate reached
	if got < n {
		r.Note = fmt.Sprintf("%d of %d jobs handled within 15 s of the last publish", got, n)
	}
	s.fill(&r)
	return r, nil
}

// delayed publishes -delayed-jobs jobs, each due 1-5 s (uniform) after its
// publish, with handlers running, and measures lateness: handler start
// minus due time (negative: early).
func (b *bench) delayed(ctx context.Context) ([]result, error) {
	n := b.cfg.delayedJobs
	var s samples
	stop, err := b.p.work(ctx, "delayed", b.cfg.conc, func(body []byte) {
		_, due := stamps(body)
		s.add(ms(time.Now().UnixNano() - due))
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	time.Sleep(time.Second)
	c0, t0 := b.cpu(), time.Now()
	err = parallel(b.cfg.conc, n, func(int) error {
		now := time.Now()
		due := now.Add(time.Second + rand.N(4*time.Second))
		return b.p.enqueue(ctx, "delayed", body(b.cfg.bodySize, now, due), due)
	})
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(40 * time.Second); s.len() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	d, c1 := time.Since(t0), b.cpu()
	got := s.len()
	r := b.result("delayed", got, d, c0, c1)
	if got < n {
		r.Note = fmt.Sprintf("%d of %d jobs handled", got, n)
	}
	s.fill(&r)
	return []result{r}, nil
}
