package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

var bg = context.Background()

func realClient(t testing.TB) *redis.Client {
	t.Helper()
	return redistest.Start(t).Client()
}

func TestPackEntry(t *testing.T) {
	for _, tc := range []struct {
		tries uint16
		id    string
	}{{1, "01M7YVBFN8AAS205RQ04000000"}, {65535, "x"}, {0, ""}, {300, "1" + "01M7YVBFN8AAS205RQ04000000"}} {
		e := packEntry(tc.tries, tc.id)
		tries, id, err := unpackEntry(e)
		if err != nil || tries != tc.tries || id != tc.id {
			t.Errorf("round trip %v: got %d %q %v", tc, tries, id, err)
		}
	}
	for _, bad := range []string{"", "\x01\x00", "\x01\x00\x05\x00abc", "\x01\x00\x01\x00abc"} {
		if _, _, err := unpackEntry(bad); err == nil {
			t.Errorf("unpack %q: want error", bad)
		}
	}
	// The same bytes as Redis's struct.pack("HHc0", 1, 2, "ab").
	if got := packEntry(1, "ab"); got != "\x01\x00\x02\x00ab" {
		t.Errorf("pack = %q", got)
	}
}

// frozenClock only moves when told to.
type frozenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frozenClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *frozenClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestMillisecondDueEdge(t *testing.T) {
	client := realClient(t)
	clock := &frozenClock{t: time.UnixMilli(1_800_000_000_000).Add(400 * time.Microsecond)}
	e, err := New(bg, client, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Delay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Published at x.0004 s with a 100 ms delay: due at x.1004 s at the
	// earliest, so x.1003 is too early and x.101 is due (ms resolution,
	// never early).
	clock.Add(99*time.Millisecond + 900*time.Microsecond)
	next, err := e.PumpOnce(bg)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Size(bg, "ns", "q"); n != 0 {
		t.Fatalf("job ready %v early", time.UnixMilli(next).Sub(clock.Now()))
	}
	if want := int64(1_800_000_000_101); next != want {
		t.Fatalf("next due = %d, want %d", next, want)
	}
	clock.Add(700 * time.Microsecond)
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	j, err := e.PeekQueue(bg, "ns", "q")
	if err != nil || j.ID != id {
		t.Fatalf("after due: %v %v", j, err)
	}
}

func TestInstancesSharePool(t *testing.T) {
	client := realClient(t)
	// a's sweep is an hour long, so that only b's message can wake its
	// waiting consumer before the consume's 3 s timeout.
	a, err := New(context.Background(), client, Options{Now: newTestClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	a.waiters.sweepEvery = time.Hour
	runCtx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-ran })
	b := startEngine(t, client, newTestClock())
	// A consumer waiting on instance a is woken by a publish on b.
	got := make(chan time.Duration, 1)
	var published time.Time
	var mu sync.Mutex
	go func() {
		jobs, err := a.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: 3 * time.Second})
		if err != nil || len(jobs) != 1 {
			t.Errorf("consume on a: %v %v", jobs, err)
		}
		mu.Lock()
		got <- time.Since(published)
		mu.Unlock()
	}()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	published = time.Now()
	mu.Unlock()
	if _, err := b.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1}); err != nil {
		t.Fatal(err)
	}
	// Well under the 3 s timeout (the only other way out, with a's sweep
	// off), with room for a loaded machine under -race.
	if d := <-got; d > time.Second {
		t.Fatalf("cross-instance wake-up took %v", d)
	}

	// A delayed job published through an engine that never pumps (its
	// server died) is pumped by the other instance, on time: b's pump is
	// woken through the timer channel.
	dead, err := New(bg, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := dead.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "d", Tries: 1, Delay: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	jobs, err := b.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"d"}, Count: 1, TTR: time.Minute, Timeout: 3 * time.Second})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("consume delayed on b: %v %v", jobs, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 400*time.Millisecond {
		t.Fatalf("delayed job pumped by the other instance after %v, want ~150ms", d)
	}
}

func TestPumpBurst(t *testing.T) {
	client := realClient(t)
	clock := &frozenClock{t: time.Now()}
	e, err := New(bg, client, Options{Now: clock.Now, PumpBatch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	reqs := make([]*engine.PublishRequest, 0, engine.MaxBulkPublish)
	for i := 0; i < n; i++ {
		reqs = append(reqs, &engine.PublishRequest{Namespace: "ns", Queue: fmt.Sprintf("q%d", i%4), Tries: 1, Delay: time.Second, Body: []byte("x")})
		if len(reqs) == cap(reqs) || i == n-1 {
			// A batch must name one queue: split by queue.
			byQ := map[string][]*engine.PublishRequest{}
			for _, r := range reqs {
				byQ[r.Queue] = append(byQ[r.Queue], r)
			}
			for _, rs := range byQ {
				if _, err := e.PublishBatch(bg, rs); err != nil {
					t.Fatal(err)
				}
			}
			reqs = reqs[:0]
		}
	}
	// One job due later: PumpOnce, whose two runners drain the burst
	// (pumpPool), must return its due time.
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "later", Tries: 1, Delay: time.Hour, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	later := clock.Now().Add(time.Hour).UnixMilli()
	clock.Add(time.Second + time.Millisecond) // due times round up to the next ms
	start := time.Now()
	next, err := e.PumpOnce(bg)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var total int64
	for i := 0; i < 4; i++ {
		s, _ := e.Size(bg, "ns", fmt.Sprintf("q%d", i))
		total += s
	}
	if total != n || next < later || next > later+1 {
		t.Fatalf("ready after pump = %d (next %d), want %d (next %d)", total, next, n, later)
	}
	t.Logf("pumped %d due jobs in %v (%.0f jobs/s)", n, took, float64(n)/took.Seconds())
}

func TestConsumeSurvivesCallerCancel(t *testing.T) {
	// A consume whose caller has gone still reads the script's reply: the
	// job it took is handed out, not silently parked for its TTR.
	client := realClient(t)
	e := startEngine(t, client, newTestClock())
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute})
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("consume with a cancelled context: %v %v", jobs, err)
	}
}

func TestAutoPipelineConcurrentAndScriptFlush(t *testing.T) {
	client := realClient(t)
	e := startEngine(t, client, newTestClock())
	publishAll := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("x")})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	publishAll(300)
	// A flushed script cache (Redis restart, SCRIPT FLUSH) is reloaded on
	// the fly, also for calls batched in a pipeline.
	if err := client.ScriptFlush(bg).Err(); err != nil {
		t.Fatal(err)
	}
	publishAll(300)
	if n, _ := e.Size(bg, "ns", "q"); n != 600 {
		t.Fatalf("size %d, want 600", n)
	}
	got := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 7, TTR: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					return
				}
				for _, j := range jobs {
					if err := e.Delete(bg, "ns", "q", j.ID); err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				got += len(jobs)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got != 600 {
		t.Fatalf("consumed %d, want 600", got)
	}
}

func TestWaitReplicas(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartWith(t, redistest.Options{Extra: []string{"replicaof 127.0.0.1 " + fmt.Sprint(master.Port)}})
	client := master.Client()
	// Wait for the replica to be connected and in sync.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := client.Info(bg, "replication").Result()
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not connect: %s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// While the replica is there, WAIT answers as soon as it has the write:
	// a generous timeout costs nothing, where 200 ms ran out once on a
	// loaded machine under -race. Once it is gone, short's 200 ms run out.
	e, err := New(bg, client, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	short, err := New(bg, client, Options{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("x")})
	if err != nil {
		t.Fatalf("publish with a replica: %v", err)
	}
	if v, err := replica.Client().Exists(bg, jobKey("ns", "q", id)).Result(); err != nil || v != 1 {
		t.Fatalf("job not on the replica when publish returned: %v %v", v, err)
	}
	// A flushed script cache goes through EVAL, still with WAIT.
	if err := client.ScriptFlush(bg).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1}); err != nil {
		t.Fatalf("publish after SCRIPT FLUSH: %v", err)
	}
	// A keyed publish, then its retry: the first job, replicated.
	keyed := &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Key: "k-replicated"}
	first, err := e.Publish(bg, keyed)
	if err != nil {
		t.Fatalf("keyed publish with a replica: %v", err)
	}
	if again, err := e.Publish(bg, keyed); !errors.Is(err, engine.ErrKeyExists) || again != first {
		t.Fatalf("keyed retry with a replica: %q, %v; want %q and ErrKeyExists", again, err, first)
	}
	replica.Kill()
	// Without a replica, the retry of a keyed publish not replicated finds
	// its key but still reports the job as not replicated: a retry must
	// not turn an unconfirmed write into a success.
	keyed = &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Key: "k-alone"}
	first, err = short.Publish(bg, keyed)
	if !errors.Is(err, engine.ErrNotReplicated) || first == "" {
		t.Fatalf("keyed publish without a replica: %q, %v; want its ID and ErrNotReplicated", first, err)
	}
	if again, err := short.Publish(bg, keyed); !errors.Is(err, engine.ErrNotReplicated) || again != first {
		t.Fatalf("keyed retry without a replica: %q, %v; want %q and ErrNotReplicated", again, err, first)
	}
	start := time.Now()
	id, err = short.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if !errors.Is(err, engine.ErrNotReplicated) {
		t.Fatalf("publish without a replica: %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("WAIT took %v, want about the 200ms timeout", d)
	}
	if id == "" {
		t.Fatal("no job id with ErrNotReplicated: the caller cannot tell which job may be lost")
	}
	// The event loops' batched publishes also name the jobs that may exist.
	reqs := []*engine.PublishRequest{{Namespace: "ns", Queue: "q", Tries: 1}, {Namespace: "ns", Queue: "r", Tries: 1}}
	ids, errs := make([]string, len(reqs)), make([]error, len(reqs))
	short.PublishEach(bg, reqs, ids, errs)
	for i := range reqs {
		if !errors.Is(errs[i], engine.ErrNotReplicated) || ids[i] == "" {
			t.Fatalf("PublishEach job %d: %q, %v; want its ID with ErrNotReplicated", i, ids[i], errs[i])
		}
	}
}

func TestEarliest(t *testing.T) {
	for _, c := range [][3]int64{{-1, -1, -1}, {-1, 5, 5}, {5, -1, 5}, {5, 7, 5}, {7, 5, 5}, {0, 3, 0}} {
		if got := earliest(c[0], c[1]); got != c[2] {
			t.Errorf("earliest(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
