package rdb

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestUsageExactAfterKills runs four engines, each on its own connections
// to one redis-server, publishing (plain, coalesced, batches, with keys,
// delayed, with priorities), consuming, ACKing, deleting, releasing to
// the dead letter and respawning in two namespaces, while a fifth engine
// reconciles without pause; then it kills them mid-load (contexts
// cancelled and connections closed under calls in flight and pipelines
// half sent). Namespace "keep" has no TTLs: its counts are exact at once,
// with no reconcile. Namespace "ttl" has jobs of 200 ms TTL: once they
// are gone (but for those the dead letter kept: a dead job loses its TTL),
// one reconcile pass makes its counts exact.
func TestUsageExactAfterKills(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	type node struct {
		e      *Engine
		client *redis.Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	var nodes []*node
	for i := 0; i < 4; i++ {
		c := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
		e, err := New(bg, c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		n := &node{e: e, client: c, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(n.done); _ = e.Run(ctx) }()
		nodes = append(nodes, n)
	}
	rec := startEngineOpts(t, admin, Options{})
	stopRec := make(chan struct{})
	var recWG sync.WaitGroup
	recWG.Add(1)
	go func() {
		defer recWG.Done()
		for {
			select {
			case <-stopRec:
				return
			default:
			}
			if _, err := rec.ReconcileOnce(bg); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var ops atomic.Int64
	var wg sync.WaitGroup
	ctxs := make([]context.Context, len(nodes))
	for i, n := range nodes {
		var cancel context.CancelFunc
		ctxs[i], cancel = context.WithCancel(bg)
		n.cancel = func(stop context.CancelFunc, run context.CancelFunc) context.CancelFunc {
			return func() { stop(); run() }
		}(cancel, n.cancel)
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func(e *Engine, ctx context.Context, seed int64) {
				defer wg.Done()
				rnd := rand.New(rand.NewSource(seed))
				for ctx.Err() == nil {
					ns := "keep"
					if rnd.Intn(3) == 0 {
						ns = "ttl"
					}
					q := fmt.Sprintf("q%d", rnd.Intn(5))
					r := pubReq(ns, q, rnd.Intn(300))
					if ns == "ttl" {
						r.TTL = 200 * time.Millisecond
					}
					switch rnd.Intn(9) {
					case 0:
						r.Delay = time.Duration(rnd.Intn(50)) * time.Millisecond
					case 1:
						r.Priority = rnd.Intn(5)
					case 2:
						r.Key = fmt.Sprintf("k%d", rnd.Intn(1000))
					case 3:
						r.Tries = 1
					}
					switch rnd.Intn(6) {
					case 0:
						_, _ = e.PublishBatch(ctx, []*engine.PublishRequest{r, pubReq(ns, q, 10), pubReq(ns, q, 20)})
					case 1:
						id, err := e.Publish(ctx, r)
						if err == nil && rnd.Intn(2) == 0 {
							_ = e.Delete(ctx, ns, q, id)
						}
					case 2:
						jobs, _ := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: 30 * time.Millisecond, Count: 4})
						refs := make([]engine.JobRef, 0, len(jobs))
						for _, j := range jobs {
							switch rnd.Intn(3) {
							case 0:
								_ = e.Ack(ctx, ns, q, j.ID, j.Receipt)
							case 1:
								_ = e.Release(ctx, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt})
							default:
								refs = append(refs, engine.JobRef{Namespace: ns, Queue: q, ID: j.ID})
							}
						}
						e.DeleteEach(ctx, refs, make([]error, len(refs)))
					case 3:
						if rnd.Intn(10) == 0 {
							_, _ = e.RespawnDeadLetter(ctx, ns, q, 3, 0)
						} else {
							_, _ = e.DeleteDeadLetter(ctx, ns, q, 2)
						}
					default:
						_, _ = e.Publish(ctx, r)
					}
					ops.Add(1)
				}
			}(n.e, ctxs[i], int64(i*10+w))
		}
	}
	// Kill the engines one by one, mid-load.
	for i, n := range nodes {
		for start := ops.Load(); ops.Load() < start+1000; {
			time.Sleep(time.Millisecond)
		}
		n.cancel()
		_ = n.client.Close()
		t.Logf("engine %d killed after %d operations", i, ops.Load())
	}
	wg.Wait()
	for _, n := range nodes {
		<-n.done
	}
	close(stopRec)
	recWG.Wait()

	// No TTL: exact as the scripts left them.
	wantUsageOf(t, rec, admin, "keep")
	// TTLs: once the jobs are gone, one reconcile pass.
	for deadline := time.Now().Add(20 * time.Second); ; {
		n := 0 // keys that will expire (dead jobs lose their TTL)
		it := admin.Scan(bg, 0, "j/{??}ttl/*", 1000).Iterator()
		for it.Next(bg) {
			if admin.PTTL(bg, it.Val()).Val() > 0 {
				n++
			}
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs of 200 ms TTL still there", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, err := rec.Reconcile(bg); err != nil || st.Skipped != 0 {
		t.Fatalf("reconcile: %+v %v", st, err)
	}
	wantUsageOf(t, rec, admin, "ttl")
	wantUsageOf(t, rec, admin, "keep")
}

// wantUsageOf checks the engine's count of ns against truth.
func wantUsageOf(t testing.TB, e *Engine, client redis.UniversalClient, ns string) {
	t.Helper()
	got := mustUsage(t, e, ns)
	want := truth(t, client, ns)
	if got != want {
		t.Fatalf("usage of %s = %+v, Redis holds %+v", ns, got, want)
	}
	t.Logf("usage of %s = %+v, as Redis holds", ns, got)
}

// TestUsageCountedOnce: a pool written before usage counts (no usage
// hashes, no marker) is counted whole, big queues included, when the first
// engine of this version starts.
func TestUsageCountedOnce(t *testing.T) { onTopologies(t, testUsageCountedOnce) }

func testUsageCountedOnce(t *testing.T, client redis.UniversalClient) {
	e, err := New(bg, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	var batch []*engine.PublishRequest
	for i := 0; i < 500; i++ {
		batch = append(batch, pubReq("old", "big", i%50))
	}
	for i := 0; i < reconcileMax/500+1; i++ { // more than a reconcile pass recounts
		if _, err := e.PublishBatch(bg, batch); err != nil {
			t.Fatal(err)
		}
	}
	d := pubReq("old", "small", 5)
	d.Delay = time.Hour
	if _, err := e.Publish(bg, d); err != nil {
		t.Fatal(err)
	}
	want := truth(t, client, "old")
	for g := 0; g < slotGroups; g++ {
		if err := client.Del(bg, usageKey(g)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Del(bg, usageMarker).Err(); err != nil {
		t.Fatal(err)
	}
	if u := mustUsage(t, e, "old"); u != (engine.Usage{}) {
		t.Fatalf("usage after the hashes went: %+v", u)
	}
	e2, err := New(bg, client, Options{NoAutoPipeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustUsage(t, e2, "old"); got != want || got.Jobs != int64(len(batch)*(reconcileMax/500+1)+1) {
		t.Fatalf("usage after the first start = %+v, Redis holds %+v", got, want)
	}
	if n := client.Exists(bg, usageMarker).Val(); n != 1 {
		t.Fatal("no usage marker")
	}
}
