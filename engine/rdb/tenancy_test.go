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
// SCAN, on every master of a cluster) and the sum of their lengths, and
// one job for each timer entry whose job expired (the pump or the
// reclaimer takes it off when it meets the entry). It reads nothing the
// engine counts.
func truth(t testing.TB, client redis.UniversalClient, ns string) engine.Usage {
	t.Helper()
	var mu sync.Mutex
	var u engine.Usage
	scan := func(ctx context.Context, c *redis.Client) error {
		n, err := expiredInTimers(ctx, c, "t/{??}"+ns+"/*")
		if err != nil {
			return err
		}
		mu.Lock()
		u.Jobs += n
		mu.Unlock()
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

// expiredInTimers counts the entries of the timers matching pattern (on
// one Redis, or one master) whose job key is gone.
func expiredInTimers(ctx context.Context, c *redis.Client, pattern string) (int64, error) {
	var n int64
	it := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		tk := it.Val()
		ids, err := c.ZRange(ctx, tk, 0, -1).Result()
		if err != nil {
			return 0, err
		}
		p := c.Pipeline()
		ex := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			ex[i] = p.Exists(ctx, "j"+tk[1:]+"/"+id)
		}
		if _, err := p.Exec(ctx); err != nil && len(ids) > 0 {
			return 0, err
		}
		for _, x := range ex {
			if x.Val() == 0 {
				n++
			}
		}
	}
	return n, it.Err()
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

// wantRefused checks that err is the quota's refusal naming limit.
func wantRefused(t testing.TB, err error, msg string) {
	t.Helper()
	var qe *engine.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, engine.ErrQuotaExceeded) || err.Error() != msg {
		t.Fatalf("err = %v, want %q", err, msg)
	}
}

// TestQuotaEnforced: a publish that would take a namespace beyond its
// quota is refused in the script, nothing written, by every publish path;
// an ACK gives the room back at once; other namespaces publish on.
func TestQuotaEnforced(t *testing.T) { onTopologies(t, testQuotaEnforced) }

func testQuotaEnforced(t *testing.T, client redis.UniversalClient) {
	e := startEngineOpts(t, client, Options{})
	ctx := bg
	if err := e.SetQuota(ctx, "qa", engine.Quota{MaxJobs: 50}); err != nil {
		t.Fatal(err)
	}
	// 48 coalesced publishes at once, then a batch of 2: 50.
	var wg sync.WaitGroup
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Publish(ctx, pubReq("qa", "q", 10)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := e.PublishBatch(ctx, []*engine.PublishRequest{pubReq("qa", "q", 10), pubReq("qa", "q", 10)}); err != nil {
		t.Fatal(err)
	}
	before := truth(t, client, "qa")
	// Every path refuses the 51st: plain (coalesced), with a key, a batch,
	// PublishEach beside another namespace's publish.
	_, err := e.Publish(ctx, pubReq("qa", "q", 10))
	wantRefused(t, err, "namespace quota exceeded: max_jobs 50")
	k := pubReq("qa", "q", 10)
	k.Key = "k"
	_, err = e.Publish(ctx, k)
	wantRefused(t, err, "namespace quota exceeded: max_jobs 50")
	_, err = e.PublishBatch(ctx, []*engine.PublishRequest{pubReq("qa", "q", 1), pubReq("qa", "q", 1)})
	wantRefused(t, err, "namespace quota exceeded: max_jobs 50")
	each := []*engine.PublishRequest{pubReq("qb", "q", 1), pubReq("qa", "q", 1), pubReq("qb", "q2", 1)}
	errs, ids := make([]error, 3), make([]string, 3)
	e.Together(ctx, func(ctx context.Context) { e.PublishEach(ctx, each, ids, errs) })
	if errs[0] != nil || errs[2] != nil || ids[0] == "" || ids[2] == "" {
		t.Fatalf("PublishEach beside a namespace over its quota: %v %v", errs, ids)
	}
	wantRefused(t, errs[1], "namespace quota exceeded: max_jobs 50")
	if got := truth(t, client, "qa"); got != before {
		t.Fatalf("a refused publish wrote: %+v, before %+v", got, before)
	}
	wantUsage(t, e, client, "qa", 50)
	// An ACK gives the room back at once.
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "qa", Queues: []string{"q"}, TTR: time.Minute, Count: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("consume: %v %v", jobs, err)
	}
	if err := e.Ack(ctx, "qa", "q", jobs[0].ID, jobs[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(ctx, pubReq("qa", "q", 10)); err != nil {
		t.Fatalf("publish after an ACK: %v", err)
	}
	_, err = e.Publish(ctx, pubReq("qa", "q", 10))
	wantRefused(t, err, "namespace quota exceeded: max_jobs 50")

	// Bytes: a quota of 1,000 bytes holds what fits.
	if err := e.SetQuota(ctx, "qc", engine.Quota{MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(ctx, pubReq("qc", "q", 900)); err != nil {
		t.Fatal(err)
	}
	_, err = e.Publish(ctx, pubReq("qc", "q", 100))
	wantRefused(t, err, "namespace quota exceeded: max_bytes 1000")
	if _, err := e.Publish(ctx, pubReq("qc", "q", 10)); err != nil {
		t.Fatal(err)
	}
	// A re-publish replaces: it needs the room of the difference only.
	if err := e.SetQuota(ctx, "qd", engine.Quota{MaxJobs: 1}); err != nil {
		t.Fatal(err)
	}
	id, err := e.Publish(ctx, pubReq("qd", "q", 10))
	if err != nil {
		t.Fatal(err)
	}
	re := pubReq("qd", "q", 10)
	re.Replaces = id
	if _, err := e.Publish(ctx, re); err != nil {
		t.Fatalf("re-publish at the quota: %v", err)
	}
	wantUsage(t, e, client, "qd", 1)
	// Without its quota the namespace publishes on.
	if err := e.DeleteQuota(ctx, "qa"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Publish(ctx, pubReq("qa", "q", 10)); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaAcrossGroups: a namespace's queues in several slot groups
// share its quota: a publish in one group sees what the others hold, as of
// the last refresh, and at once what this engine published there.
func TestQuotaAcrossGroups(t *testing.T) { onTopologies(t, testQuotaAcrossGroups) }

func testQuotaAcrossGroups(t *testing.T, client redis.UniversalClient) {
	e := startEngineOpts(t, client, Options{DefaultQuota: engine.Quota{MaxJobs: 30}})
	other := startEngineOpts(t, client, Options{DefaultQuota: engine.Quota{MaxJobs: 30}})
	qa, qb := "a", ""
	for i := 0; qb == ""; i++ {
		if q := fmt.Sprintf("b%d", i); slotGroup("qx", q) != slotGroup("qx", qa) {
			qb = q
		}
	}
	jobs := func(q string, n int) []*engine.PublishRequest {
		out := make([]*engine.PublishRequest, n)
		for i := range out {
			out[i] = pubReq("qx", q, 5)
		}
		return out
	}
	if _, err := e.PublishBatch(bg, jobs(qa, 20)); err != nil {
		t.Fatal(err)
	}
	// The same engine counts its own 20 at once in the other group.
	_, err := e.PublishBatch(bg, jobs(qb, 11))
	wantRefused(t, err, "namespace quota exceeded: max_jobs 30")
	if _, err := e.PublishBatch(bg, jobs(qb, 10)); err != nil {
		t.Fatal(err)
	}
	// Another engine sees them after its refresh, in either group.
	other.loadQuotas(bg)
	for _, q := range []string{qa, qb} {
		_, err = other.Publish(bg, pubReq("qx", q, 5))
		wantRefused(t, err, "namespace quota exceeded: max_jobs 30")
	}
	wantUsage(t, e, client, "qx", 30)
}

// vanish removes job keys as their TTL running out does: without a
// script, so that only the pump, the reclaimer and the reconciler can
// find them gone.
func vanish(t testing.TB, client redis.UniversalClient, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := client.Del(bg, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReconcile: jobs gone without a script (expired) in every structure,
// and counts set wrong by hand, are exact after one pass of the
// reconciler; the pump counts an expired in-flight job at once.
func TestReconcile(t *testing.T) { onTopologies(t, testReconcile) }

func testReconcile(t *testing.T, client redis.UniversalClient) {
	e, err := New(bg, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := bg
	var ready, delayed, dead []string
	for i := 0; i < 6; i++ {
		id, err := e.Publish(ctx, pubReq("ra", "q", 20+i))
		if err != nil {
			t.Fatal(err)
		}
		ready = append(ready, id)
		d := pubReq("ra", "q2", 5)
		d.Delay = time.Hour
		if id, err = e.Publish(ctx, d); err != nil {
			t.Fatal(err)
		}
		delayed = append(delayed, id)
	}
	// Two dead jobs: consumed with one try, released.
	for i := 0; i < 2; i++ {
		r := pubReq("ra", "q3", 50)
		r.Tries = 1
		if _, err := e.Publish(ctx, r); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ra", Queues: []string{"q3"}, TTR: time.Minute, Count: 1})
		if err != nil || len(jobs) != 1 {
			t.Fatal(jobs, err)
		}
		if err := e.Release(ctx, &engine.ReleaseRequest{Namespace: "ra", Queue: "q3", ID: jobs[0].ID, Receipt: jobs[0].Receipt}); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, jobs[0].ID)
	}
	wantUsage(t, e, client, "ra", 14)
	// An in-flight job whose key goes: the pump finds its timer entry at
	// its TTR and counts one job less at once.
	jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ra", Queues: []string{"q"}, TTR: time.Millisecond, Count: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	vanish(t, client, jobKey("ra", "q", jobs[0].ID))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := e.PumpOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := client.ZCard(ctx, timerKey("ra", "q")).Result(); n == 0 || time.Now().After(deadline) {
			break
		}
	}
	if got, want := mustUsage(t, e, "ra"), truth(t, client, "ra"); got.Jobs != want.Jobs || got.Jobs != 13 {
		t.Fatalf("after the pump found an expired job: %+v, Redis holds %+v", got, want)
	}
	// Jobs gone from the ready list, the timer and the dead letter, and
	// counts set wrong by hand (a queue's and a namespace's, a queue that
	// holds nothing).
	vanish(t, client, jobKey("ra", "q", ready[1]), jobKey("ra", "q2", delayed[0]), jobKey("ra", "q3", dead[0]))
	g := slotGroup("ra", "q")
	client.HIncrBy(ctx, usageKey(g), "j:ra", 7)
	client.HIncrBy(ctx, usageKey(g), "b:ra/q", -100)
	client.HSet(ctx, usageKey(slotGroup("ra", "nothing")), "j:ra/nothing", 3, "j:ra", 3)
	st, err := e.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Corrected == 0 || st.Skipped != 0 {
		t.Fatalf("reconcile: %+v", st)
	}
	// The delayed job's timer entry is still one job: the pump or the
	// reclaimer takes it off when it meets the entry (once), or destroy.
	wantUsage(t, e, client, "ra", 11)
	all, err := e.UsageAll(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("UsageAll = %v, %v", all, err)
	}
	if n := client.HLen(ctx, usageKey(slotGroup("ra", "nothing"))).Val(); slotGroup("ra", "nothing") != g && n != 0 {
		t.Fatalf("fields of a queue holding nothing stay: %d", n)
	}
	// Nothing more to correct.
	if st, err := e.Reconcile(ctx); err != nil || st.Corrected != 0 {
		t.Fatalf("second reconcile: %+v %v", st, err)
	}
	// Cancel by key of a delayed job that expired takes off the job its
	// timer entry counts (its bytes, gone with its key, wait for a
	// recount, as when the pump meets the entry).
	k := pubReq("ra", "q2", 5)
	k.Delay, k.Key = time.Hour, "k1"
	kid, err := e.Publish(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	vanish(t, client, jobKey("ra", "q2", kid))
	if _, err := e.CancelKey(ctx, "ra", "q2", "k1"); err != nil {
		t.Fatal(err)
	}
	if got := mustUsage(t, e, "ra"); got.Jobs != 11 {
		t.Fatalf("after cancelling an expired job: %+v", got)
	}
	if _, err := e.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, e, client, "ra", 11)
	// Destroy counts the jobs it deletes (and those its timer entries
	// count); the dead job stays counted.
	if _, err := e.Destroy(ctx, "ra", "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Destroy(ctx, "ra", "q2"); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, e, client, "ra", 1)
	if n, err := e.DeleteDeadLetter(ctx, "ra", "q3", 10); err != nil || n != 2 {
		t.Fatalf("delete dead letter: %d %v", n, err)
	}
	wantUsage(t, e, client, "ra", 0)
}

func mustUsage(t testing.TB, e *Engine, ns string) engine.Usage {
	t.Helper()
	u, err := e.Usage(bg, ns)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestQuotaCoalesced: concurrent plain publishes of one namespace to two
// queues of one slot group, coalesced into shared calls with another
// namespace's: exactly the quota is accepted, the rest refused, and the
// other namespace's publishes all go in.
func TestQuotaCoalesced(t *testing.T) { onTopologies(t, testQuotaCoalesced) }

func testQuotaCoalesced(t *testing.T, client redis.UniversalClient) {
	e := startEngineOpts(t, client, Options{})
	if err := e.SetQuota(bg, "qz", engine.Quota{MaxJobs: 10}); err != nil {
		t.Fatal(err)
	}
	mates := groupMates("qz", 2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused, others := 0, 0, 0
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ns := "qz"
			if i%3 == 0 {
				ns = "free"
			}
			_, err := e.Publish(bg, pubReq(ns, mates[i%2], 8))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && ns == "free":
				others++
			case err == nil:
				accepted++
			case errors.Is(err, engine.ErrQuotaExceeded) && ns == "qz":
				refused++
			default:
				t.Errorf("publish %s: %v", ns, err)
			}
		}(i)
	}
	wg.Wait()
	if accepted != 10 || refused != 30 || others != 20 {
		t.Fatalf("accepted %d, refused %d, other namespace %d; want 10, 30, 20", accepted, refused, others)
	}
	wantUsage(t, e, client, "qz", 10)
	wantUsage(t, e, client, "free", 20)
}
