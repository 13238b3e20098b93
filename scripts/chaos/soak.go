package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// The soak checks that Redis does not grow under a steady load in which
// some queues are never consumed (issue #20): their jobs' TTLs run out,
// and what the jobs leave behind must go with them. One redis-server (no
// AOF: memory, not the disk, is measured) and one kairos-server; publishers
// over soakQueues queues at -soak-rate, consumers that ACK on all but the
// first -soak-unconsumed queues, whose jobs get a TTL of 10 s or 30 s in
// turn (so entries of expired jobs are also stranded behind live ones).
// Every sample reads used_memory, the key count, the unconsumed queues'
// entries (ready lists and priority sets), their live jobs (job keys) and
// their size through the API.

// soakConfig shapes a soak.
type soakConfig struct {
	Duration   time.Duration
	Rate       int // publishes per second, all publishers together
	Queues     int
	Unconsumed int
	TTLs       []int // seconds, in turn, for the unconsumed queues' jobs
	Every      time.Duration
	// StaleOnly judges only the entries of expired jobs (the CI's short
	// soak, too short for memory and key slopes to mean anything).
	StaleOnly bool
}

// Soak is a soak's figures (one JSON line).
type Soak struct {
	Scenario     string       `json:"scenario"`
	Setup        string       `json:"setup"`
	DurationS    float64      `json:"duration_s"`
	Rate         int          `json:"rate"`
	Queues       int          `json:"queues"`
	Unconsumed   int          `json:"unconsumed"`
	Published    int64        `json:"published"`
	Consumed     int64        `json:"consumed"`
	PublishErrs  int64        `json:"publish_errors"`
	WarmS        float64      `json:"warm_up_s"`
	Samples      []SoakSample `json:"samples"`
	MemPerMin    float64      `json:"used_memory_bytes_per_min"` // least-squares slope after the warm-up
	KeysPerMin   float64      `json:"keys_per_min"`
	StalePerMin  float64      `json:"stale_entries_per_min"`
	MaxStale     int64        `json:"max_stale_after_warm_up"`
	Pass         bool         `json:"pass"`
	Failures     []string     `json:"failures,omitempty"`
	ServerBinary string       `json:"server_binary"`
}

// SoakSample is one reading.
type SoakSample struct {
	T          float64 `json:"t_s"`
	UsedMemory int64   `json:"used_memory"`
	Keys       int64   `json:"keys"`
	Entries    int64   `json:"entries"` // ready entries of the unconsumed queues
	Live       int64   `json:"live"`    // their live jobs (job keys)
	Size       int64   `json:"size"`    // their size through the API
}

func soakQueue(i int) string { return fmt.Sprintf("s%02d", i) }

// runSoak starts Redis and a kairos-server and runs the soak.
func runSoak(ctx context.Context, rc runConfig, sc soakConfig) (Soak, error) {
	res := Soak{Scenario: "soak", Setup: "redis appendonly no, 1 kairos-server", Rate: sc.Rate, Queues: sc.Queues,
		Unconsumed: sc.Unconsumed, ServerBinary: rc.ServerBin}
	dir := filepath.Join(rc.Dir, "soak")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	s := &setup{sup: newSupervisor(dir), ports: map[int]bool{}, log: rc.Log}
	defer s.sup.killAll()
	port, err := freePort(s.ports)
	if err != nil {
		return res, err
	}
	node, err := s.sup.newRedis("redis", rc.RedisBin, port, redisConf{fsync: fsyncOff})
	if err != nil {
		return res, err
	}
	if err := node.up(ctx); err != nil {
		return res, err
	}
	k, err := s.sup.newKairos("kairos", rc.ServerBin, s.ports, kairosRedis{addr: node.addr})
	if err != nil {
		return res, err
	}
	if err := k.up(ctx); err != nil {
		return res, err
	}
	const ns = "soak"
	token, err := k.token(ctx, ns)
	if err != nil {
		return res, err
	}
	conns := 64
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second}}
	defer hc.CloseIdleConnections()
	do := func(ctx context.Context, method, url string, body string, timeout time.Duration) (int, []byte, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("X-Token", token)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	base := k.api + "/api/" + ns + "/"
	var published, consumed, pubErrs atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	const publishers = 16
	body := strings.Repeat("x", 100)
	for p := range publishers {
		wg.Go(func() {
			interval := time.Duration(float64(time.Second) * publishers / float64(sc.Rate))
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for n := p; ; n += publishers {
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
				}
				qi := n % sc.Queues
				ttl := 60
				if qi < sc.Unconsumed {
					ttl = sc.TTLs[(n/sc.Queues)%len(sc.TTLs)]
				}
				url := fmt.Sprintf("%s%s?ttl=%d&tries=3", base, soakQueue(qi), ttl)
				if st, _, err := do(context.Background(), http.MethodPut, url, body, 5*time.Second); err != nil || st != http.StatusCreated {
					pubErrs.Add(1)
					continue
				}
				published.Add(1)
			}
		})
	}
	const consumers = 8
	for c := range consumers {
		var qs []string
		for i := sc.Unconsumed + c; i < sc.Queues; i += consumers {
			qs = append(qs, soakQueue(i))
		}
		if len(qs) == 0 {
			continue
		}
		wg.Go(func() {
			url := fmt.Sprintf("%s%s?ttr=30&timeout=1&count=16", base, strings.Join(qs, ","))
			for wctx.Err() == nil {
				st, b, err := do(wctx, http.MethodGet, url, "", 5*time.Second)
				if err != nil || st != http.StatusOK {
					if st != http.StatusNotFound {
						sleepCtx(wctx, 20*time.Millisecond)
					}
					continue
				}
				jobs, err := parseJobs(b)
				if err != nil {
					continue
				}
				for _, j := range jobs {
					if st, _, err := do(context.Background(), http.MethodDelete, base+j.Queue+"/job/"+j.JobID, "", 5*time.Second); err == nil && st == http.StatusNoContent {
						consumed.Add(1)
					}
				}
			}
		})
	}
	sample := func(t time.Duration) (SoakSample, error) {
		smp := SoakSample{T: t.Seconds()}
		mem, err := node.info(ctx, "memory", "used_memory")
		if err != nil {
			return smp, err
		}
		smp.UsedMemory, _ = strconv.ParseInt(mem, 10, 64)
		if smp.Keys, err = node.client.DBSize(ctx).Result(); err != nil {
			return smp, err
		}
		for i := range sc.Unconsumed {
			tag := "{" + ns + "/" + soakQueue(i) + "}"
			l, err := node.client.LLen(ctx, "q/"+tag).Result()
			if err != nil {
				return smp, err
			}
			z, err := node.client.ZCard(ctx, "p/"+tag).Result()
			if err != nil {
				return smp, err
			}
			smp.Entries += l + z
			live, err := countKeys(ctx, node.client, "j/"+tag+"/*")
			if err != nil {
				return smp, err
			}
			smp.Live += live
			st, b, err := do(ctx, http.MethodGet, base+soakQueue(i)+"/size", "", 5*time.Second)
			if err != nil || st != http.StatusOK {
				return smp, fmt.Errorf("size: %d %s %v", st, b, err)
			}
			smp.Size += sizeOf(b)
		}
		return smp, nil
	}
	rc.Log.Infof("soak: %v at %d publishes/s over %d queues, %d never consumed (TTL %v s)", sc.Duration, sc.Rate, sc.Queues, sc.Unconsumed, sc.TTLs)
	start := time.Now()
	tick := time.NewTicker(sc.Every)
	var serr error
	for time.Since(start) < sc.Duration && ctx.Err() == nil {
		<-tick.C
		smp, err := sample(time.Since(start))
		if err != nil {
			serr = err
			break
		}
		res.Samples = append(res.Samples, smp)
		rc.Log.Infof("soak: t=%3.0fs used_memory=%d keys=%d entries=%d live=%d size=%d", smp.T, smp.UsedMemory, smp.Keys, smp.Entries, smp.Live, smp.Size)
	}
	tick.Stop()
	stop()
	wg.Wait()
	res.DurationS = time.Since(start).Seconds()
	res.Published, res.Consumed, res.PublishErrs = published.Load(), consumed.Load(), pubErrs.Load()
	if serr != nil {
		return res, serr
	}
	maxTTL := 0
	for _, t := range sc.TTLs {
		maxTTL = max(maxTTL, t)
	}
	res.judge(time.Duration(maxTTL)*time.Second+2*sc.Every, sc.StaleOnly)
	return res, ctx.Err()
}

// countKeys counts the keys matching pattern (SCAN).
func countKeys(ctx context.Context, c *redis.Client, pattern string) (int64, error) {
	var n int64
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n, iter.Err()
}

// sizeOf reads "size" from a size answer.
func sizeOf(b []byte) int64 {
	_, v, ok := strings.Cut(string(b), `"size":`)
	if !ok {
		return -1
	}
	v, _, _ = strings.Cut(v, "}")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

// judge computes the slopes after warm (the longest TTL and two samples:
// the unconsumed queues then hold as many live jobs as they will) and
// fails the soak when entries of expired jobs pile up or (unless
// staleOnly) memory or keys grow by more than 5 % over the measured window.
func (r *Soak) judge(warm time.Duration, staleOnly bool) {
	r.WarmS = warm.Seconds()
	var xs, mem, keys, stale []float64
	for _, s := range r.Samples {
		if s.T < r.WarmS {
			continue
		}
		xs = append(xs, s.T/60)
		mem = append(mem, float64(s.UsedMemory))
		keys = append(keys, float64(s.Keys))
		st := s.Entries - s.Live
		stale = append(stale, float64(st))
		r.MaxStale = max(r.MaxStale, st)
	}
	r.Pass = true
	fail := func(f string, args ...any) { r.Pass = false; r.Failures = append(r.Failures, fmt.Sprintf(f, args...)) }
	if len(xs) < 3 {
		fail("only %d samples after the %v warm-up", len(xs), warm)
		return
	}
	r.MemPerMin, r.KeysPerMin, r.StalePerMin = slope(xs, mem), slope(xs, keys), slope(xs, stale)
	span := xs[len(xs)-1] - xs[0]
	if g := r.MemPerMin * span; g > 0.05*mean(mem) && !staleOnly {
		fail("used_memory grew %.0f bytes (%.0f/min) over %.1f min, more than 5%% of %.0f", g, r.MemPerMin, span, mean(mem))
	}
	if g := r.KeysPerMin * span; g > 0.05*mean(keys) && !staleOnly {
		fail("keys grew %.0f (%.0f/min) over %.1f min, more than 5%%", g, r.KeysPerMin, span)
	}
	// A pass a second: at most about two seconds of the unconsumed
	// queues' publishes can be stale at a sample.
	limit := int64(max(100, 3*r.Rate*r.Unconsumed/r.Queues))
	if r.MaxStale > limit {
		fail("%d entries of expired jobs at a sample, more than %d", r.MaxStale, limit)
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	mx, my := mean(xs), mean(ys)
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// writeSoak prints the soak's samples and verdict.
func writeSoak(out io.Writer, r Soak) {
	fmt.Fprintf(out, "\nsoak: %s; %.0f s at %d publishes/s over %d queues, %d never consumed; published %d, consumed %d, publish errors %d\n",
		r.Setup, r.DurationS, r.Rate, r.Queues, r.Unconsumed, r.Published, r.Consumed, r.PublishErrs)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t s\tused_memory\tkeys\tentries (unconsumed)\tlive\tstale\tsize (API)\t")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.T, s.UsedMemory, s.Keys, s.Entries, s.Live, s.Entries-s.Live, s.Size)
	}
	_ = tw.Flush()
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	fmt.Fprintf(out, "after the %.0f s warm-up: used_memory %+.0f bytes/min, keys %+.1f/min, stale entries %+.1f/min, at most %d stale; %s\n",
		r.WarmS, r.MemPerMin, r.KeysPerMin, r.StalePerMin, r.MaxStale, verdict)
}
