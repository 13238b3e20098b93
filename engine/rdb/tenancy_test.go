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
)

// truth is namespace ns's usage as Redis holds it: its job keys (found by
// SCAN, on every master of a cluster) and the sum of their lengths. It
// reads nothing the engine counts.
func truth(t testing.TB, client redis.UniversalClient, ns string) engine.Usage {
	t.Helper()
	var mu sync.Mutex
	var u engine.Usage
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, "j/{??}"+ns+"/*", 1000).Iterator()
		for it.Next(ctx) {
			n, err := c.StrLen(ctx, it.Val()).Result()
			if err != nil {
				return err
			}
			if n > 0 {
				mu.Lock()
				u.Jobs++
				u.Bytes += n
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(bg, scan)
	case *redis.Client:
		err = scan(bg, c)
	default:
		t.Fatalf("client %T", client)
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// wantUsage checks the engine's count of ns against truth, and that it
// holds jobs jobs.
func wantUsage(t testing.TB, e *Engine, client redis.UniversalClient, ns string, jobs int64) {
	t.Helper()
	got, err := e.Usage(bg, ns)
	if err != nil {
		t.Fatal(err)
	}
	if want := truth(t, client, ns); got != want || got.Jobs != jobs {
		t.Fatalf("usage of %s = %+v, Redis holds %+v, want %d jobs", ns, got, want, jobs)
	}
}

func pubReq(ns, q string, size int) *engine.PublishRequest {
	return &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte(strings.Repeat("x", size)), Tries: 2}
}

// TestUsageCounted: every way of publishing adds to the namespace's usage
// what it stores, every ACK and delete takes it away, in the same script;
// another namespace's usage is its own.
func TestUsageCounted(t *testing.T) { onTopologies(t, testUsageCounted) }

func testUsageCounted(t *testing.T, client redis.UniversalClient) {
	e := startEngineOpts(t, client, Options{})
	ctx := bg
	// Coalesced plain publishes, of several queues and sizes, at once.
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := pubReq("ua", fmt.Sprintf("q%d", i%4), 10+i)
			if i%5 == 0 {
				r.Delay = time.Hour
			}
			if i%7 == 0 {
				r.Priority = 3
			}
			if _, err := e.Publish(ctx, r); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	wantUsage(t, e, client, "ua", 40)
	// A bulk publish, a publish with a key, a re-publish.
	var batch []*engine.PublishRequest
	for i := 0; i < 10; i++ {
		batch = append(batch, pubReq("ua", "bulk", 100*i))
	}
	ids, err := e.PublishBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	k := pubReq("ua", "q1", 33)
	k.Key = "once"
	if _, err := e.Publish(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(ctx, k); !errors.Is(err, engine.ErrKeyExists) {
		t.Fatalf("second publish with the key: %v", err)
	}
	re := pubReq("ua", "bulk", 7)
	re.Replaces = ids[9]
	if _, err := e.Publish(ctx, re); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, e, client, "ua", 51)
	// PublishEach, the event loops' path.
	each := []*engine.PublishRequest{pubReq("ua", "q0", 1), pubReq("ub", "q0", 2), pubReq("ua", "q3", 3)}
	errs := make([]error, len(each))
	e.PublishEach(ctx, each, make([]string, len(each)), errs)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	wantUsage(t, e, client, "ua", 53)
	wantUsage(t, e, client, "ub", 1)
	// ACKs with a receipt, deletes by ID, DeleteEach.
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ua", Queues: []string{"bulk"}, TTR: time.Minute, Count: 5})
	if err != nil || len(jobs) != 5 {
		t.Fatalf("consume: %d jobs, %v", len(jobs), err)
	}
	for _, j := range jobs[:2] {
		if err := e.Ack(ctx, "ua", "bulk", j.ID, j.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Delete(ctx, "ua", "bulk", jobs[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, "ua", "bulk", jobs[2].ID); err != nil { // gone: nothing counted twice
		t.Fatal(err)
	}
	refs := []engine.JobRef{{Namespace: "ua", Queue: "bulk", ID: jobs[3].ID}, {Namespace: "ua", Queue: "bulk", ID: jobs[4].ID}, {Namespace: "ua", Queue: "bulk", ID: jobs[4].ID}}
	e.DeleteEach(ctx, refs, make([]error, len(refs)))
	wantUsage(t, e, client, "ua", 48)
	all, err := e.UsageAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if all["ua"] != truth(t, client, "ua") || all["ub"] != truth(t, client, "ub") || len(all) != 2 {
		t.Fatalf("UsageAll = %v", all)
	}
}

// TestUsageScheduleFire: a schedule's tick counts as a publish.
func TestUsageScheduleFire(t *testing.T) { onTopologies(t, testUsageScheduleFire) }

func testUsageScheduleFire(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 1)
	e := es[0]
	s := putEvery(t, e, "daily", "0 0 * * *", "")
	clock.Add(s.Next.Sub(clock.Now()) - 400*time.Millisecond)
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, e, client, "ns", 1)
}

// TestQuotaStorage: quotas set, read, listed and deleted; the default
// applies to a namespace without one.
func TestQuotaStorage(t *testing.T) { onTopologies(t, testQuotaStorage) }

func testQuotaStorage(t *testing.T, client redis.UniversalClient) {
	def := engine.Quota{MaxJobs: 1000}
	e := startEngineOpts(t, client, Options{DefaultQuota: def})
	other := startEngineOpts(t, client, Options{})
	if q, set, err := e.Quota(bg, "qa"); err != nil || set || q != def {
		t.Fatalf("quota before any = %+v %v %v", q, set, err)
	}
	want := engine.Quota{MaxJobs: 50, MaxBytes: 4096}
	if err := e.SetQuota(bg, "qa", want); err != nil {
		t.Fatal(err)
	}
	if err := e.SetQuota(bg, "qb", engine.Quota{MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	if q, set, err := other.Quota(bg, "qa"); err != nil || !set || q != want {
		t.Fatalf("quota = %+v %v %v", q, set, err)
	}
	all, err := other.Quotas(bg)
	if err != nil || len(all) != 2 || all["qa"] != want || all["qb"] != (engine.Quota{MaxBytes: 1}) {
		t.Fatalf("quotas = %v %v", all, err)
	}
	if err := e.DeleteQuota(bg, "qa"); err != nil {
		t.Fatal(err)
	}
	if q, set, err := e.Quota(bg, "qa"); err != nil || set || q != def {
		t.Fatalf("quota after delete = %+v %v %v", q, set, err)
	}
	if err := e.SetQuota(bg, "qa", engine.Quota{MaxJobs: -1}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("negative quota: %v", err)
	}
	if err := e.SetQuota(bg, "bad/ns", want); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("bad namespace: %v", err)
	}
}
