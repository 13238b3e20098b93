package rdb

import (
	"context"
	"errors"
	"sort"
	"strconv"
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
	// A schedule's tick is a publish too: noisy's is missed (its next
	// moves on, nothing fired), small's fires into the reserve.
	scheduleTicks(t, e, q, "small", smallQ)

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
	n.wakeAt.Store(900) // no wake point below the threshold (TestAdmitMemoryWaits)
	n.scale.Store(1 << 10)
	st := &memState{nodes: []*memNode{n}, known: true}
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

// scheduleTicks puts a schedule ticking every second on noisy's queue q
// and on namespace quiet's quietQ, runs the scheduler until both handled
// their first tick, and checks that the reserve refused noisy's (missed:
// next moved on, nothing fired, no job) and let quiet's fire; then
// deletes both schedules and the jobs of quietQ.
func scheduleTicks(t *testing.T, e *Engine, q, quiet, quietQ string) {
	t.Helper()
	put := func(ns, queue string) *engine.Schedule {
		s, err := e.PutSchedule(bg, &engine.Schedule{Namespace: ns, Queue: queue, Name: "tick", Spec: "@every 1s", Body: []byte("tick"), Tries: 1, TTL: time.Hour})
		if err != nil {
			t.Fatalf("put %s's schedule: %v", ns, err)
		}
		return s
	}
	noisy := put("noisy", q)
	put(quiet, quietQ)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The engine's own scheduler runs too: either may handle a tick.
		_, err := e.ScheduleOnce(bg)
		gn, _ := e.GetSchedule(bg, "noisy", q, "tick")
		gq, _ := e.GetSchedule(bg, quiet, quietQ, "tick")
		if gn != nil && gq != nil && gn.Next.After(noisy.Next) && gq.Fired > 0 {
			if gn.Fired != 0 || gn.LastJob != "" {
				t.Fatalf("noisy's tick fired in the reserve: %+v", gn)
			}
			if _, err := e.PeekJob(bg, quiet, quietQ, gq.LastJob); err != nil {
				t.Fatalf("quiet's tick job %s: %v", gq.LastJob, err)
			}
			// The schedules gone, their jobs out of the way of quiet's
			// 200 (ticks the engine's own scheduler fired meanwhile too).
			for _, s := range [][2]string{{"noisy", q}, {quiet, quietQ}} {
				if err := e.DeleteSchedule(bg, s[0], s[1], "tick"); err != nil {
					t.Fatalf("delete %s's schedule: %v", s[0], err)
				}
			}
			for _, list := range []engine.JobList{engine.ListScheduled, engine.ListReady} {
				jobs, _, err := e.ListJobs(bg, quiet, quietQ, list, 0, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range jobs {
					if err := e.Delete(bg, quiet, quietQ, j.ID); err != nil {
						t.Fatalf("delete quiet's tick job %s: %v", j.ID, err)
					}
				}
			}
			if n, err := e.Size(bg, quiet, quietQ); err != nil || n != 0 {
				t.Fatalf("quiet's queue after its ticks were deleted: size %d, %v", n, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticks not handled within 10s: noisy %+v, quiet %+v (last error %v)", gn, gq, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAdmitMemoryWaits: as TestAdmitMemory, with a wake point and a
// wait: below the wake point everyone publishes; past it a poll is asked
// for (once); at the threshold the heavy namespace is refused and the
// others are admitted; while the usage is unknown a publish waits for the
// poll that reads it, and is refused or admitted by that poll's figures
// (TestAdmitMemory: admitted when the wait is over); when the usage could
// not be read nobody waits nor is refused.
func TestAdmitMemoryWaits(t *testing.T) {
	e := &Engine{pool: "p"}
	e.reserve = &reserve{frac: 0.1, nodes: map[string]*memNode{}, wake: make(chan struct{}, 1), waitMax: time.Hour}
	n := e.reserve.node("")
	n.scale.Store(1 << 10)
	n.max.Store(1000)
	n.threshold.Store(900)
	n.used.Store(900 - 2*jobOverhead)
	n.wakeAt.Store(900 - jobOverhead)
	known := func() *memState {
		st := &memState{nodes: []*memNode{n}, known: true, next: make(chan struct{})}
		for g := range st.group {
			st.group[g] = n
			st.heavy[g] = map[string]bool{"noisy": true}
		}
		return st
	}
	st := known()
	e.reserve.state.Store(st)
	woken := func() bool {
		select {
		case <-e.reserve.wake:
			return true
		default:
			return false
		}
	}

	admit := func(ns string) error { return e.admitMemory(ns, "q", jobOverhead) }
	if err := admit("noisy"); err != nil {
		t.Fatalf("noisy below the threshold: %v", err)
	}
	if w := woken(); !w || n.wakeAt.Load() != 900 {
		t.Fatalf("past the wake point: poll asked for %v, wake point %d (want the threshold, 900)", w, n.wakeAt.Load())
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
	if woken() {
		t.Fatal("a poll asked for in the reserve with the usage known")
	}

	// Unknown usage: each publish asks for a poll and waits for it, its
	// bytes not counted meanwhile; the poll's figures decide.
	for _, tc := range []struct {
		ns     string
		refuse bool
	}{{"noisy", true}, {"quiet", false}} {
		unknown := &memState{group: st.group, nodes: st.nodes, next: make(chan struct{})}
		e.reserve.state.Store(unknown)
		res := make(chan error, 1)
		go func() { res <- admit(tc.ns) }()
		<-e.reserve.wake
		if got := n.pending.Load(); got != 4*jobOverhead {
			t.Fatalf("%s waiting: pending %d, want %d (its bytes not counted)", tc.ns, got, 4*jobOverhead)
		}
		e.reserve.state.Store(known())
		close(unknown.next)
		err := <-res
		if tc.refuse != (err != nil) || err != nil && !errors.As(err, &pf) {
			t.Fatalf("%s after the poll: %v, want refused %v", tc.ns, err, tc.refuse)
		}
	}
	if got := n.pending.Load(); got != 5*jobOverhead {
		t.Fatalf("pending %d, want %d (quiet's admitted)", got, 5*jobOverhead)
	}
	// The usage could not be read: admitted at once, a poll asked for.
	e.reserve.state.Store(&memState{group: st.group, nodes: st.nodes, usageFailed: true, next: make(chan struct{})})
	if err, w := admit("noisy"), woken(); err != nil || !w {
		t.Fatalf("noisy with the usage unreadable: %v, poll asked for %v", err, w)
	}
	// No reserve: nothing is looked at.
	e.reserve.state.Store(nil)
	if err := admit("noisy"); err != nil || e.InReserve() {
		t.Fatalf("no reserve: %v, InReserve %v", err, e.InReserve())
	}
}

// pollHook holds INFO (held: entered is signalled, then it waits for
// release) and fails the usage read (failUsage) of the engine's polls.
type pollHook struct {
	mu        sync.Mutex
	held      bool
	entered   chan struct{}
	release   chan struct{}
	failUsage bool
}

func (h *pollHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pollHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		held := h.held && cmd.Name() == "info"
		h.mu.Unlock()
		if held {
			h.entered <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *pollHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		fail := h.failUsage
		h.mu.Unlock()
		for _, c := range cmds {
			if fail && c.Name() == "hgetall" {
				return errors.New("usage read failed by the test")
			}
		}
		return next(ctx, cmds)
	}
}

func (h *pollHook) set(held, failUsage bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.failUsage = held, failUsage
}

// TestReservePoll: pollMemory on a real redis-server (maxmemory 64mb),
// its INFO held and its usage read failed by a hook. A poll sets the wake
// point half way from the estimate to the threshold; the bytes counted
// before a poll stay in the estimate while its INFO is under way (a slow
// reply does not make the estimate drop) and leave it once the figure is
// in; in the reserve, a usage read that fails with no figures yet lets
// publishes in without waiting, one that succeeds refuses the heavy
// namespace, and one that fails later keeps those figures.
func TestReservePoll(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Extra: []string{"maxmemory 64mb", "maxmemory-policy noeviction"}})
	client := srv.Client()
	hook := &pollHook{entered: make(chan struct{}), release: make(chan struct{})}
	client.AddHook(hook)
	e, err := New(bg, client, Options{Pool: "default", MemoryReserve: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	e.reserve.waitMax = time.Hour // a publish that waited would not come back
	e.pollMemory(bg)
	st := e.reserve.state.Load()
	g := slotGroup("noisy", "q")
	if st == nil || st.group[g] == nil {
		t.Fatal("no reserve after a poll of a redis-server with maxmemory")
	}
	n := st.group[g]
	used, threshold := n.used.Load(), n.threshold.Load()
	if st.known || n.wakeAt.Load() != threshold-(threshold-used)/2 {
		t.Fatalf("far below the threshold: usage read %v, wake point %d; want none read, %d", st.known, n.wakeAt.Load(), threshold-(threshold-used)/2)
	}

	// 1 MB counted, then a poll whose INFO is held.
	if err := e.admitMemory("noisy", "q", 1<<20); err != nil {
		t.Fatal(err)
	}
	est := n.estimate()
	if est < used+1<<20 {
		t.Fatalf("estimate %d after 1 MB counted on %d", est, used)
	}
	hook.set(true, false)
	done := make(chan struct{})
	go func() { defer close(done); e.pollMemory(bg) }()
	<-hook.entered
	if got := n.estimate(); got < est {
		t.Fatalf("estimate %d while the poll's INFO is under way, was %d: the counted bytes left it", got, est)
	}
	hook.set(false, false)
	hook.release <- struct{}{}
	<-done
	if p := n.pending.Load(); p != 0 {
		t.Fatalf("pending %d after the poll, want 0 (in the figure read)", p)
	}

	// The node in its reserve: maxmemory just above what it holds.
	if err := client.ConfigSet(bg, "maxmemory", strconv.FormatInt(n.used.Load()*21/20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	k := usageKey(g)
	if err := client.HSet(bg, k, usageJobs("noisy"), 10, usageBytes("noisy"), 40960, usageJobs("quiet"), 1, usageBytes("quiet"), 100).Err(); err != nil {
		t.Fatal(err)
	}
	admit := func(ns string) error {
		res := make(chan error, 1)
		go func() { res <- e.admitMemory(ns, "q", jobOverhead) }()
		select {
		case err := <-res:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s's publish still waiting after 30s", ns)
			return nil
		}
	}
	var pf *engine.PoolFullError
	for _, tc := range []struct {
		step          string
		failUsage     bool
		known, failed bool
		noisyRefused  bool
	}{
		{"the usage unreadable, none read before", true, false, true, false},
		{"the usage read", false, true, false, true},
		{"the usage unreadable again: the last figures stand", true, true, false, true},
	} {
		hook.set(false, tc.failUsage)
		e.pollMemory(bg)
		st := e.reserve.state.Load()
		if st.known != tc.known || st.usageFailed != tc.failed || !e.InReserve() {
			t.Fatalf("%s: usage known %v, failed %v, InReserve %v; want %v, %v, true", tc.step, st.known, st.usageFailed, e.InReserve(), tc.known, tc.failed)
		}
		if err := admit("noisy"); tc.noisyRefused != (err != nil) || err != nil && (!errors.As(err, &pf) || !pf.Reserve) {
			t.Fatalf("%s: noisy's publish: %v, want refused %v", tc.step, err, tc.noisyRefused)
		}
		if err := admit("quiet"); err != nil {
			t.Fatalf("%s: quiet's publish: %v", tc.step, err)
		}
	}
}
