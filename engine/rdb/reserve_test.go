package rdb

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

func TestMemoryFigures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		info      string
		used, max int64
	}{
		{"noeviction", "# Memory\r\nused_memory:1000\r\nmaxmemory:4000\r\nmaxmemory_policy:noeviction\r\nmem_not_counted_for_evict:100\r\n", 900, 4000},
		{"no limit", "used_memory:1000\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n", 1000, 0},
		{"evicting", "used_memory:1000\r\nmaxmemory:4000\r\nmaxmemory_policy:allkeys-lru\r\n", 1000, 0},
		{"empty", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if used, max := memoryFigures(tc.info); used != tc.used || max != tc.max {
				t.Fatalf("memoryFigures = %d, %d; want %d, %d", used, max, tc.used, tc.max)
			}
		})
	}
}

func TestHeavyNamespaces(t *testing.T) {
	kb := func(jobs, bytes int64) engine.Usage { return engine.Usage{Jobs: jobs, Bytes: bytes} }
	for _, tc := range []struct {
		name  string
		usage map[string]engine.Usage
		want  string // heavy namespaces, sorted, comma-separated
	}{
		{"none", nil, ""},
		{"alone", map[string]engine.Usage{"a": kb(1, 10)}, "a"},
		{"noisy and quiet", map[string]engine.Usage{"noisy": kb(6000, 6000*4096), "quiet": kb(1, 4096)}, "noisy"},
		{"an empty namespace holds nothing", map[string]engine.Usage{"noisy": kb(10, 40960), "idle": kb(0, 0)}, "noisy"},
		{"equal shares", map[string]engine.Usage{"a": kb(10, 1000), "b": kb(10, 1000)}, "a,b"},
		// Many small jobs weigh as much as few big ones: 1000 × (0 + 256)
		// against 10 × (25,344 + 256).
		{"jobs weigh too", map[string]engine.Usage{"tiny": kb(1000, 0), "big": kb(10, 253440), "small": kb(1, 100)}, "big,tiny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for ns := range heavyNamespaces(tc.usage) {
				got = append(got, ns)
			}
			sort.Strings(got)
			if s := strings.Join(got, ","); s != tc.want {
				t.Fatalf("heavy = %q, want %q", s, tc.want)
			}
		})
	}
}

// startReserve runs an engine of pool "default" over client with a
// reserve of 10 %.
func startReserve(t *testing.T, client redis.UniversalClient) *Engine {
	t.Helper()
	e, err := New(bg, client, Options{Pool: "default", MemoryReserve: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// TestReserveQuietPublishes is issue #31's scenario on a real redis-server
// (maxmemory 32mb, noeviction) with a reserve of 10 %: namespace noisy
// publishes 4 KB delayed jobs from 8 clients until refused, and each
// refusal is the reserve's (507, before Redis is full); then namespace
// quiet publishes 200 jobs of 4 KB into the reserve, consumes and ACKs
// them all, while noisy stays refused. A third namespace that keeps
// publishing into the reserve meets Redis's own refusal (OOM), the same
// 507.
func TestReserveQuietPublishes(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 32mb", "maxmemory-policy noeviction"}})
	client := srv.Client()
	e := startReserve(t, client)
	reserveScenario(t, e, "q", "quiet-q", "small-q", func() (used, max int64) {
		info := client.Info(bg, "memory").Val()
		return memoryFigures(info)
	})
}

// TestReserveQuietPublishesCluster: the scenario on the real Redis
// Cluster, each master given 32 MB more than it holds: the reserve is
// that of the master holding the queues' slot group.
func TestReserveQuietPublishesCluster(t *testing.T) {
	c := fullCluster(t, 32<<20)
	client := c.Client(t)
	e := startReserve(t, client)
	const q = "q"
	master := redis.NewClient(&redis.Options{Addr: c.MasterOf(t, timerIndexKey(slotGroup("noisy", q)))})
	t.Cleanup(func() { _ = master.Close() })
	reserveScenario(t, e, q, sameGroup(t, "quiet", q), sameGroup(t, "small", q), func() (used, max int64) {
		return memoryFigures(master.Info(bg, "memory").Val())
	})
}

// reserveScenario runs the scenario on engine e: noisy's queue q, quiet's
// quietQ and small's smallQ are on one Redis node, whose memory mem reads.
func reserveScenario(t *testing.T, e *Engine, q, quietQ, smallQ string, mem func() (used, max int64)) {
	body := []byte(strings.Repeat("x", 4096))
	// Wait for the first poll: the reserve is in force from it on.
	deadline := time.Now().Add(5 * time.Second)
	for e.reserve.state.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no memory poll within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// noisy: 8 clients publish 4 KB delayed jobs until refused.
	var wg sync.WaitGroup
	var mu sync.Mutex
	published := 0
	refusals := make([]error, 8)
	for i := range refusals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100000; n++ {
				_, err := e.Publish(bg, &engine.PublishRequest{Namespace: "noisy", Queue: q, Body: body, Tries: 1, Delay: time.Hour, TTL: 2 * time.Hour})
				if err != nil {
					refusals[i] = err
					return
				}
				mu.Lock()
				published++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, err := range refusals {
		var pf *engine.PoolFullError
		if !errors.As(err, &pf) || pf.Pool != "default" || !pf.Reserve {
			t.Fatalf("noisy client %d after %d jobs in all: %v, want the reserve's engine.PoolFullError", i, published, err)
		}
	}
	used, max := mem()
	t.Logf("noisy published %d jobs of 4 KB; used %d of maxmemory %d (%.1f%%)", published, used, max, 100*float64(used)/float64(max))
	if used >= max || used < max*8/10 {
		t.Fatalf("noisy refused at %d bytes of %d: want within the last 20 %% but below maxmemory", used, max)
	}
	if !e.InReserve() {
		t.Fatal("InReserve false while noisy is refused")
	}

	// quiet: 200 jobs of 4 KB into the reserve, consumed and ACKed.
	for i := 0; i < 200; i++ {
		if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "quiet", Queue: quietQ, Body: body, Tries: 1, TTL: time.Hour}); err != nil {
			used, _ := mem()
			t.Fatalf("quiet's publish %d: %v (used %d of %d)", i+1, err, used, max)
		}
	}
	// A bulk publish of noisy is refused too; so is one more single job.
	if _, err := e.PublishBatch(bg, []*engine.PublishRequest{{Namespace: "noisy", Queue: q, Body: body, Tries: 1}, {Namespace: "noisy", Queue: q, Body: body, Tries: 1}}); !errors.Is(err, engine.ErrPoolFull) {
		t.Fatalf("noisy's bulk publish in the reserve: %v", err)
	}
	if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "noisy", Queue: q, Body: body, Tries: 1}); !errors.Is(err, engine.ErrPoolFull) {
		t.Fatalf("noisy's publish in the reserve after quiet's: %v", err)
	}
	acked := 0
	for acked < 200 {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "quiet", Queues: []string{quietQ}, TTR: time.Minute, Count: 50})
		if err != nil || len(jobs) == 0 {
			t.Fatalf("quiet's consume after %d ACKs: %d jobs, %v", acked, len(jobs), err)
		}
		for _, j := range jobs {
			if err := e.Ack(bg, "quiet", quietQ, j.ID, j.Receipt); err != nil {
				t.Fatalf("quiet's ACK %d: %v", acked+1, err)
			}
			acked++
		}
	}
	if n, err := e.Size(bg, "quiet", quietQ); err != nil || n != 0 {
		t.Fatalf("quiet's queue after 200 ACKs: size %d, %v", n, err)
	}

	// small keeps publishing 4 KB jobs: into the reserve until Redis
	// refuses (OOM), long before it weighs noisy's share.
	for i := 0; ; i++ {
		_, err := e.Publish(bg, &engine.PublishRequest{Namespace: "small", Queue: smallQ, Body: body, Tries: 1, TTL: time.Hour})
		if err == nil {
			if i > 100000 {
				t.Fatal("small published 100,000 jobs into the reserve")
			}
			continue
		}
		var pf *engine.PoolFullError
		if !errors.As(err, &pf) || pf.Reserve || !isOOM(pf.Err) {
			t.Fatalf("small's publish %d: %v, want Redis's OOM as engine.PoolFullError", i+1, err)
		}
		t.Logf("small published %d jobs into the reserve before Redis refused", i)
		if i < 100 {
			t.Fatalf("small published only %d jobs into the reserve", i)
		}
		break
	}
}

// TestAdmitMemory: the decision alone, on a node whose figures are set:
// below the threshold everyone publishes; at it, the heavy namespace is
// refused (its bytes not counted) and the others are admitted, their
// bytes counted; while the usage is unknown nobody is refused.
// RefusesPublish refuses what admitMemory would, counting nothing.
func TestAdmitMemory(t *testing.T) {
	e := &Engine{pool: "p"}
	e.reserve = &reserve{frac: 0.1, nodes: map[string]*memNode{}, wake: make(chan struct{}, 1)}
	n := e.reserve.node("")
	n.max.Store(1000)
	n.threshold.Store(900)
	n.used.Store(900 - 2*jobOverhead)
	st := &memState{nodes: []*memNode{n}}
	for g := range st.group {
		st.group[g] = n
		st.heavy[g] = map[string]bool{"noisy": true}
	}
	e.reserve.state.Store(st)
	e.shards.m.Store(&shardMap{}) // no sharded queue

	admit := func(ns string) error { return e.admitMemory(ns, "q", jobOverhead) }
	if err := admit("noisy"); err != nil {
		t.Fatalf("noisy below the threshold: %v", err)
	}
	if e.InReserve() {
		t.Fatal("InReserve below the threshold")
	}
	var pf *engine.PoolFullError
	if err := admit("noisy"); !errors.As(err, &pf) || !pf.Reserve || pf.Pool != "p" || !errors.Is(err, engine.ErrPoolFull) {
		t.Fatalf("noisy at the threshold: %v, want the reserve's PoolFullError", err)
	}
	if got := n.pending.Load(); got != jobOverhead {
		t.Fatalf("pending %d after a refusal, want %d (the admitted job only)", got, jobOverhead)
	}
	if !e.InReserve() {
		t.Fatal("InReserve false after a refusal")
	}
	for i := 0; i < 3; i++ {
		if err := admit("quiet"); err != nil {
			t.Fatalf("quiet in the reserve: %v", err)
		}
	}
	if got := n.pending.Load(); got != 4*jobOverhead {
		t.Fatalf("pending %d, want %d", got, 4*jobOverhead)
	}
	// RefusesPublish: what admitMemory would refuse, counting nothing.
	if err := e.RefusesPublish("noisy", "q"); !errors.As(err, &pf) || !pf.Reserve || pf.Pool != "p" {
		t.Fatalf("RefusesPublish(noisy) in the reserve: %v, want the reserve's PoolFullError", err)
	}
	if err := e.RefusesPublish("quiet", "q"); err != nil {
		t.Fatalf("RefusesPublish(quiet) in the reserve: %v", err)
	}
	if got := n.pending.Load(); got != 4*jobOverhead {
		t.Fatalf("pending %d after RefusesPublish, want %d (unchanged)", got, 4*jobOverhead)
	}
	n.used.Store(900 - 5*jobOverhead) // the next poll: below the threshold again
	if err := e.RefusesPublish("noisy", "q"); err != nil {
		t.Fatalf("RefusesPublish(noisy) below the threshold: %v", err)
	}
	n.used.Store(900 - 2*jobOverhead)
	// Unknown usage: admitted, and a poll is asked for.
	e.reserve.state.Store(&memState{group: st.group, nodes: st.nodes})
	if err := e.RefusesPublish("noisy", "q"); err != nil {
		t.Fatalf("RefusesPublish(noisy) with the usage unknown: %v", err)
	}
	if err := admit("noisy"); err != nil {
		t.Fatalf("noisy with the usage unknown: %v", err)
	}
	select {
	case <-e.reserve.wake:
	default:
		t.Fatal("no poll asked for with the usage unknown")
	}
	// No reserve: nothing is looked at.
	e.reserve.state.Store(nil)
	if err := admit("noisy"); err != nil || e.InReserve() {
		t.Fatalf("no reserve: %v, InReserve %v", err, e.InReserve())
	}
	if err := e.RefusesPublish("noisy", "q"); err != nil {
		t.Fatalf("RefusesPublish without a reserve: %v", err)
	}
}

// TestReserveTwoServers: noisy publishes through two engines (two
// servers) on one redis-server (maxmemory 32mb) from 4 clients each: each
// engine sees the other's publishes only at its polls, yet both refuse
// noisy for the reserve before Redis is full (the growth each sees per
// byte it published scales its estimate), and quiet then publishes 200
// jobs of 4 KB through either.
func TestReserveTwoServers(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 32mb", "maxmemory-policy noeviction"}})
	engines := []*Engine{startReserve(t, srv.Client()), startReserve(t, srv.Client())}
	body := []byte(strings.Repeat("x", 4096))
	for _, e := range engines {
		for e.reserve.state.Load() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	refusals := make([]error, 8)
	for i := range refusals {
		e := engines[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 100000; n++ {
				if _, err := e.Publish(bg, &engine.PublishRequest{Namespace: "noisy", Queue: "q", Body: body, Tries: 1, Delay: time.Hour, TTL: 2 * time.Hour}); err != nil {
					refusals[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	used, max := memoryFigures(srv.Client().Info(bg, "memory").Val())
	t.Logf("noisy refused at %d of %d bytes (%.1f%%)", used, max, 100*float64(used)/float64(max))
	for i, err := range refusals {
		var pf *engine.PoolFullError
		if !errors.As(err, &pf) || !pf.Reserve {
			t.Fatalf("noisy client %d (engine %d): %v, want the reserve's refusal", i, i%2, err)
		}
	}
	for i := 0; i < 200; i++ {
		if _, err := engines[i%2].Publish(bg, &engine.PublishRequest{Namespace: "quiet", Queue: "quiet-q", Body: body, Tries: 1, TTL: time.Hour}); err != nil {
			t.Fatalf("quiet's publish %d: %v", i+1, err)
		}
	}
}

// TestHeavyByNode: on a cluster, a namespace's share is counted among the
// namespaces on the node: noisy, which filled master A, is heavy there
// although big holds more across the pool (on master B), and quiet is
// heavy nowhere.
func TestHeavyByNode(t *testing.T) {
	a, b := &memNode{addr: "a"}, &memNode{addr: "b"}
	var group [slotGroups]*memNode
	var per [slotGroups]map[string]engine.Usage
	for g := range group {
		group[g], per[g] = a, map[string]engine.Usage{}
		if g >= slotGroups/2 {
			group[g] = b
		}
	}
	group[5] = nil // a group without a reserve has no heavy namespaces
	per[3]["noisy"] = engine.Usage{Jobs: 7000, Bytes: 30 << 20}
	per[4]["quiet"] = engine.Usage{Jobs: 200, Bytes: 1 << 20}
	per[40]["big"] = engine.Usage{Jobs: 7000, Bytes: 30 << 20}
	per[41]["big"] = engine.Usage{Jobs: 7000, Bytes: 30 << 20}
	per[42]["quiet"] = engine.Usage{Jobs: 1, Bytes: 100}
	if pool := heavyNamespaces(map[string]engine.Usage{"noisy": {Jobs: 7000, Bytes: 30 << 20}, "quiet": {Jobs: 201, Bytes: 1<<20 + 100}, "big": {Jobs: 14000, Bytes: 60 << 20}}); pool["noisy"] {
		t.Fatal("noisy heavy across the pool: the case shows nothing")
	}
	heavy := heavyByNode(&group, &per)
	for _, tc := range []struct {
		g    int
		want string
	}{{0, "noisy"}, {3, "noisy"}, {31, "noisy"}, {32, "big"}, {63, "big"}, {5, ""}} {
		var got []string
		for ns := range heavy[tc.g] {
			got = append(got, ns)
		}
		sort.Strings(got)
		if s := strings.Join(got, ","); s != tc.want {
			t.Errorf("group %d: heavy %q, want %q", tc.g, s, tc.want)
		}
	}
	if heavy[5] != nil {
		t.Error("group 5 (no reserve) has a heavy map")
	}
}
