package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestPublishMetrics: coalesced publishes over several queues count every
// job once in the pool's series and once in its queue's.
func TestPublishMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEngineOpts(t, client, Options{Now: newTestClock().Now, Metrics: metrics})
	const queues, per = 5, 40
	var wg sync.WaitGroup
	for i := 0; i < queues*per; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Publish(context.Background(), &engine.PublishRequest{Namespace: "pm", Queue: fmt.Sprintf("q%d", i%queues),
				Body: []byte("x"), TTL: time.Hour, Tries: 1})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := counterValue(t, metrics.publish.WithLabelValues(e.pool)); got != queues*per {
		t.Errorf("publish_jobs = %v, want %d", got, queues*per)
	}
	for i := 0; i < queues; i++ {
		q := fmt.Sprintf("q%d", i)
		if got := counterValue(t, metrics.publishQueue.WithLabelValues(e.pool, "pm", q)); got != per {
			t.Errorf("publish_queue_jobs of %s = %v, want %d", q, got, per)
		}
	}
}

// counterValue reads a counter (as the server tests' counterValue).
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestLmstfyEngineMetrics: the counters of lmstfy's engine count what
// happens where it happens: publishes split into ready and delayed jobs,
// consumes count the stale entries they pop, peeks read bodies, ACKs are
// timed from the publish, a stale receipt deletes nothing, respawns count.
func TestLmstfyEngineMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := newTestClock()
	e := startEngineOpts(t, client, Options{Now: clock.Now, Metrics: metrics})
	ctx := context.Background()
	pub := func(q string, delay time.Duration, tries uint16) string {
		t.Helper()
		id, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "lm", Queue: q, Body: []byte("x"), TTL: time.Hour, Delay: delay, Tries: tries})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	stale := pub("a", 0, 3)
	pub("a", 0, 3)
	delayed := pub("a", 10*time.Second, 3)
	clock.Add(50 * time.Millisecond)
	if err := e.Delete(ctx, "lm", "a", stale); err != nil { // its ready entry stays, stale
		t.Fatal(err)
	}
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "lm", Queues: []string{"a"}, TTR: time.Minute, Count: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("consume: %v, %d jobs", err, len(jobs))
	}
	if _, err := e.PeekJob(ctx, "lm", "a", delayed); err != nil {
		t.Fatal(err)
	}
	// A receipt that is not the delivery's deletes nothing.
	if err := e.Ack(ctx, "lm", "a", jobs[0].ID, "00000000000000ff"); !errors.Is(err, engine.ErrStaleReceipt) {
		t.Fatalf("ack with a wrong receipt: %v, want ErrStaleReceipt", err)
	}
	// A job whose only try is spent goes to the dead letter, then back.
	pub("d", 0, 1)
	if jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "lm", Queues: []string{"d"}, TTR: time.Second, Count: 1}); err != nil || len(jobs) != 1 {
		t.Fatalf("consume d: %v, %d jobs", err, len(jobs))
	}
	clock.Add(2 * time.Second)
	if _, err := e.PumpOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := e.RespawnDeadLetter(ctx, "lm", "d", 10, time.Hour); err != nil || n != 1 {
		t.Fatalf("respawn: %d, %v", n, err)
	}

	pool := e.pool
	for _, c := range []struct {
		name string
		vec  *prometheus.CounterVec
		want float64
	}{
		{"publish_jobs", metrics.publish, 4},
		{"pool_add_jobs", metrics.poolAdd, 4},
		{"queue_direct_push_jobs", metrics.directPush, 3},
		{"timer_add_jobs", metrics.timerAdd, 1},
		{"consume_multi_jobs", metrics.consume, 2},
		{"queue_pop_jobs", metrics.queuePop, 3}, // the stale entry, then two jobs
		{"pool_get_jobs", metrics.poolGet, 3},   // two consumed, one peeked
		{"pool_delete_jobs", metrics.poolDelete, 1},
		{"deadletter_respawn_jobs", metrics.respawn, 1},
	} {
		if got := counterValue(t, c.vec.WithLabelValues(pool)); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	var h dto.Metric
	if err := metrics.ackElapsed.WithLabelValues(pool, "lm", "a").(prometheus.Histogram).Write(&h); err != nil {
		t.Fatal(err)
	}
	if n, sum := h.GetHistogram().GetSampleCount(), h.GetHistogram().GetSampleSum(); n != 1 || sum < 50 {
		t.Errorf("job_ack_elapsed_ms: %d samples summing %v ms, want 1 of at least 50 ms", n, sum)
	}
}

// TestTimerSizesPerPool: lmstfy's timer_sizes is one gauge per pool (its
// one timer); Kairos's per-queue timers are summed into it and exported
// per queue as kairos_queue_timer_sizes.
func TestTimerSizesPerPool(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngineOpts(t, client, Options{Now: newTestClock().Now})
	for _, q := range []string{"a", "a", "b"} {
		if _, err := e.Publish(context.Background(), &engine.PublishRequest{Namespace: "ts", Queue: q, Body: []byte("x"), Delay: time.Hour, Tries: 1}); err != nil {
			t.Fatal(err)
		}
	}
	got := gatherGauges(t, NewStatsCollector(e))
	for k, v := range map[string]string{
		"infra_lmstfy_redis_timer_sizes[pool=default]":                      "3",
		"kairos_queue_timer_sizes[namespace=ts pool=default queue=a]":       "2",
		"kairos_queue_timer_sizes[namespace=ts pool=default queue=b]":       "1",
		"infra_lmstfy_redis_queue_sizes[namespace=ts pool=default queue=a]": "0",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %s (all: %v)", k, got[k], v, got)
		}
	}
}

// TestParseInfo reads lmstfy's gauges from an INFO reply: the keyspace
// line of the pool's database, 0 keys when it has none.
func TestParseInfo(t *testing.T) {
	info := "# Clients\r\nconnected_clients:7\r\nblocked_clients:1\r\n# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\n" +
		"maxmemory_policy:noeviction\r\n# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=10\r\ndb3:keys=9,expires=4,avg_ttl=0\r\n"
	for _, tc := range []struct {
		db                int
		keys, expires     float64
		clients, used, mx float64
	}{
		{0, 5, 2, 7, 1024, 0},
		{3, 9, 4, 7, 1024, 0},
		{1, 0, 0, 7, 1024, 0},
	} {
		f := parseInfo(info, tc.db)
		if f["keys"] != tc.keys || f["expires"] != tc.expires || f["connected_clients"] != tc.clients || f["blocked_clients"] != 1 ||
			f["used_memory"] != tc.used || f["maxmemory"] != tc.mx {
			t.Errorf("db%d: %v", tc.db, f)
		}
		if _, ok := f["maxmemory_policy"]; ok {
			t.Errorf("db%d: a text field became a number: %v", tc.db, f)
		}
	}
	if _, ok := parseInfo("# Clients\r\nconnected_clients:1\r\n", 0)["keys"]; ok {
		t.Error("keys without a keyspace section")
	}
}

// TestMetricsHotPathAllocs: once their series exist, counting a publish
// batch, a consume, an ACK batch and a Redis command allocates nothing
// (the publish and consume paths are measured against lmstfy).
func TestMetricsHotPathAllocs(t *testing.T) {
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pm := metrics.forPool("p")
	qn := newQueueNames("ns", "q")
	now := time.Now()
	jobs := []*engine.Job{{Namespace: "ns", Queue: "q", ID: engine.NewJobID(now, 0, false)}}
	acks := []*batchCall[ackOp]{{in: ackOp{ns: "ns", q: "q", id: jobs[0].ID, code: 1}}}
	process := metrics.CommandHook("node").ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	pipeline := metrics.CommandHook("node").ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	cmds := []redis.Cmder{redis.NewCmd(ctx, "evalsha", "x", 0)}
	count := func() {
		pm.publishedPool(3, 1)
		pm.publishedQueue("ns", "q", qn, 3)
		pm.consumed("ns", jobs, now)
		pm.popped(2)
		pm.acked("ns", "q", qn, acks, now)
		_ = process(ctx, cmds[0])
		_ = pipeline(ctx, cmds)
	}
	count() // creates the series
	if n := testing.AllocsPerRun(100, count); n != 0 {
		t.Errorf("%v allocations per count, want 0", n)
	}
}

// TestOldestReadySeconds: kairos_queue_oldest_ready_seconds is the age of
// the live job at a queue's consume end — the ready list's or the priority
// set's — not of a gone job's entry waiting for the reclaimer; 0 for a
// queue with no ready job (delayed only, or drained). On miniredis, a
// real Redis and a real cluster (the script's keys share a slot).
func TestOldestReadySeconds(t *testing.T) {
	tiers := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis": func(t *testing.T) redis.UniversalClient {
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = client.Close() })
			return client
		},
		"redis": func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() },
		"cluster": func(t *testing.T) redis.UniversalClient {
			c := redistest.SharedCluster(t)
			c.Flush(t)
			return c.Client(t)
		},
	}
	for _, name := range []string{"miniredis", "redis", "cluster"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := newTestClock()
			e := startEngineOpts(t, tiers[name](t), Options{Now: clock.Now})
			pub := func(q string, prio int, delay time.Duration) string {
				t.Helper()
				id, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "old", Queue: q, Body: []byte("x"), Delay: delay, Tries: 1, Priority: prio})
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			first := pub("stuck", 0, 0)
			pub("prio", 7, 0)
			pub("delayed", 0, time.Hour)
			pub("drained", 0, 0)
			jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "old", Queues: []string{"drained"}, TTR: time.Minute, Count: 1})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("consume: %v %v", jobs, err)
			}
			if err := e.Ack(ctx, "old", "drained", jobs[0].ID, jobs[0].Receipt); err != nil {
				t.Fatal(err)
			}
			clock.Add(5 * time.Minute)
			pub("stuck", 0, 0)
			clock.Add(5 * time.Minute)

			reg := prometheus.NewRegistry()
			reg.MustRegister(NewStatsCollector(e))
			ages := func() map[string]float64 {
				t.Helper()
				fams, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]float64{}
				for _, f := range fams {
					if f.GetName() != "kairos_queue_oldest_ready_seconds" {
						continue
					}
					for _, m := range f.GetMetric() {
						var q string
						for _, l := range m.GetLabel() {
							if l.GetName() == "queue" {
								q = l.GetValue()
							}
						}
						out[q] = m.GetGauge().GetValue()
					}
				}
				return out
			}
			// Wide margins: the test's own time passes too.
			near := func(got, want float64) bool { return got >= want && got < want+60 }
			got := ages()
			if len(got) != 4 || !near(got["stuck"], 600) || !near(got["prio"], 600) || got["delayed"] != 0 || got["drained"] != 0 {
				t.Fatalf("oldest ready seconds %v, want stuck and prio ≈ 600, delayed and drained 0", got)
			}
			// The head's job is deleted: its entry stays until the
			// reclaimer, but the age is the next live job's.
			if err := e.Delete(ctx, "old", "stuck", first); err != nil {
				t.Fatal(err)
			}
			if got := ages(); !near(got["stuck"], 300) {
				t.Errorf("after deleting the head: stuck %v s, want ≈ 300 (the second job's)", got["stuck"])
			}
		})
	}
}

// gatherGauges registers c alone and returns its gauges' values, keyed by
// the metric's name and its labels (name=value, in order).
func gatherGauges(t *testing.T, c prometheus.Collector) map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[fmt.Sprint(f.GetName(), labels)] = fmt.Sprint(m.GetGauge().GetValue())
		}
	}
	return got
}
