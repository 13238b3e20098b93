package rdb

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// TestReclaimWithoutConsumer checks, on miniredis and on a real Redis, that
// the entries of jobs whose TTL ran out are removed from every structure
// that can hold one (ready list, priority set, timer, dead letter) by the
// running engine alone, with no consumer: at the consume end and stranded
// behind live jobs. Only the live jobs and the queues' registries are left.
func TestReclaimWithoutConsumer(t *testing.T) {
	for _, tier := range []struct {
		name  string
		start func(t *testing.T) (*redis.Client, func(time.Duration))
	}{
		{"miniredis", func(t *testing.T) (*redis.Client, func(time.Duration)) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c, m.FastForward
		}},
		{"redis", func(t *testing.T) (*redis.Client, func(time.Duration)) {
			return realClient(t), time.Sleep
		}},
	} {
		t.Run(tier.name, func(t *testing.T) {
			client, elapse := tier.start(t)
			testReclaim(t, client, elapse)
		})
	}
}

func testReclaim(t *testing.T, client *redis.Client, elapse func(time.Duration)) {
	clock := newTestClock()
	e := startEngine(t, client, clock)
	const short = 200 * time.Millisecond
	pub := func(q string, ttl time.Duration, mod func(*engine.PublishRequest)) string {
		t.Helper()
		r := &engine.PublishRequest{Namespace: "ns", Queue: q, Body: []byte("x"), TTL: ttl, Tries: 1}
		if mod != nil {
			mod(r)
		}
		id, err := e.Publish(bg, r)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// uni: one TTL, more entries than one call's budget, at the consume end.
	var uni []*engine.PublishRequest
	for range 1500 {
		uni = append(uni, &engine.PublishRequest{Namespace: "ns", Queue: "uni", Body: []byte("x"), TTL: short, Tries: 1})
	}
	if _, err := e.PublishBatch(bg, uni); err != nil {
		t.Fatal(err)
	}
	// mixed: expired entries stranded between two jobs without TTL.
	first := pub("mixed", 0, nil)
	for range 300 {
		pub("mixed", short, nil)
	}
	last := pub("mixed", 0, nil)
	// prio: a live job of the highest priority in front of expired ones.
	prioLive := pub("prio", 0, func(r *engine.PublishRequest) { r.Priority = 9 })
	for range 20 {
		pub("prio", short, func(r *engine.PublishRequest) { r.Priority = 1 })
	}
	// timer: a job in flight (long TTR) whose TTL runs out.
	pub("timer", short, nil)
	if jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"timer"}, TTR: time.Hour, Count: 1}); err != nil || len(jobs) != 1 {
		t.Fatalf("consume timer: %v %v", jobs, err)
	}
	// dead: a dead job kept for the queue's dead TTL only.
	if err := e.SetQueueConfig(bg, "ns", "dead", engine.QueueConfig{DeadTTL: short}); err != nil {
		t.Fatal(err)
	}
	pub("dead", 0, nil)
	if jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"dead"}, TTR: time.Second, Count: 1}); err != nil || len(jobs) != 1 {
		t.Fatalf("consume dead: %v %v", jobs, err)
	}
	clock.Add(2 * time.Second)
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	if n, _ := client.LLen(bg, deadKey("ns", "dead")).Result(); n != 1 {
		t.Fatalf("dead letter holds %d entries, want 1", n)
	}

	elapse(short + 100*time.Millisecond)

	want := map[string]int64{
		readyKey("ns", "uni"):   0,
		readyKey("ns", "mixed"): 2,
		prioKey("ns", "prio"):   1,
		timerKey("ns", "timer"): 0,
		deadKey("ns", "dead"):   0,
	}
	length := func(k string) int64 {
		var n int64
		var err error
		if strings.HasPrefix(k, "q/") || strings.HasPrefix(k, "d/") {
			n, err = client.LLen(bg, k).Result()
		} else {
			n, err = client.ZCard(bg, k).Result()
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// No consumer: the engine's own loop must clear them (a pass a second;
	// 10 s were not enough for miniredis under -race at load average 20).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var diff []string
		for k, n := range want {
			if got := length(k); got != n {
				diff = append(diff, fmt.Sprintf("%s: %d entries, want %d", k, got, n))
			}
		}
		if len(diff) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries of expired jobs still there after 30 s without a consumer:\n%s", strings.Join(diff, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for q, n := range map[string]int64{"uni": 0, "mixed": 2, "prio": 1, "dead": 0, "timer": 0} {
		if got, err := e.Size(bg, "ns", q); err != nil || got != n {
			t.Errorf("size %s = %d, %v; want %d", q, got, err, n)
		}
	}
	// Only the live jobs' keys are left, besides per-queue keys.
	keys, err := client.Keys(bg, "j/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Errorf("job keys left: %v, want the 3 live jobs", keys)
	}
	// The live jobs are intact and in order.
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"prio", "mixed"}, TTR: time.Minute, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if got, w := strings.Join(ids, ","), strings.Join([]string{prioLive, first, last}, ","); got != w {
		t.Errorf("consumed %s, want %s", got, w)
	}
}

// TestReclaimWindows drives reclaimScript's window part directly, on both
// tiers, with a small LREM walk: stale entries near the right end are
// removed by an LREM from the right, those near the left end by one from the
// left, and those out of reach of both become tombstones that consume, peek
// and size skip, and that a later call removes once an end is near.
func TestReclaimWindows(t *testing.T) {
	mini := func(t *testing.T) *redis.Client {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, tier := range []struct {
		name   string
		client func(t *testing.T) *redis.Client
	}{{"miniredis", mini}, {"redis", func(t *testing.T) *redis.Client { return realClient(t) }}} {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			e, err := New(bg, client, Options{})
			if err != nil {
				t.Fatal(err)
			}
			const ns, q = "ns", "q"
			jp := jobKeyPrefix(ns, q)
			// Right to left (consume order): 10 live, 5 stale, 30 live, 5
			// stale, 30 live, 5 stale, 10 live.
			var entries []string // left to right
			var live []string    // consume order
			n := 0
			add := func(k int, alive bool) {
				for range k {
					id := fmt.Sprintf("%026d", n)
					n++
					entries = append([]string{packEntry(1, id)}, entries...)
					if alive {
						live = append(live, id)
						if err := client.Set(bg, jp+id, newValue(true, 1, 0, 0, "", "", []byte("x")), 0).Err(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			add(10, true)
			add(5, false)
			add(30, true)
			add(5, false)
			add(30, true)
			add(5, false)
			add(10, true)
			if err := client.RPush(bg, readyKey(ns, q), entries).Err(); err != nil {
				t.Fatal(err)
			}
			keys := []string{readyKey(ns, q), prioKey(ns, q), timerKey(ns, q), deadKey(ns, q), jp, usageKey(slotGroup(ns, q)), configKey(ns, q)}
			call := func(win, cur, walk int) []int64 {
				t.Helper()
				res, err := reclaimScript.Run(bg, client, keys, 1000, win, cur, 0, 0, 0, walk, "PUBLISH", readyChannel(ns, q)).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			// A window over everything, an LREM may walk 20 entries: the
			// first stale run (10 live from the right) and the last (10
			// live from the left) are removed, the middle one is left as
			// tombstones.
			res := call(200, 0, 20)
			if res[0] != 10 || res[2] != 5 || res[3] != 0 {
				t.Fatalf("reply %v, want 10 removed, 5 tombstones, cursor 0", res)
			}
			if got, _ := client.LLen(bg, readyKey(ns, q)).Result(); got != 85 {
				t.Fatalf("list length %d, want 85", got)
			}
			if got, err := e.Size(bg, ns, q); err != nil || got != 85 {
				t.Fatalf("size %d %v: stale entries behind live ones count until removed", got, err)
			}
			// With a longer walk the tombstones go too.
			res = call(200, 0, 1000)
			if res[0] != 5 || res[2] != 0 {
				t.Fatalf("second reply %v, want 5 removed, no tombstones", res)
			}
			if got, _ := client.LLen(bg, readyKey(ns, q)).Result(); got != 80 {
				t.Fatalf("list length %d, want 80", got)
			}
			jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Minute, Count: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != len(live) {
				t.Fatalf("consumed %d jobs, want %d", len(jobs), len(live))
			}
			for i, j := range jobs {
				if j.ID != live[i] {
					t.Fatalf("job %d is %s, want %s (FIFO order kept)", i, j.ID, live[i])
				}
			}
		})
	}
}

// TestTombstonesSkipped: a tombstone left in a ready list is skipped by
// consume, peek and size like any stale entry, and cut at the consume end.
func TestTombstonesSkipped(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	e, err := New(bg, client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("x"), Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.RPush(bg, readyKey("ns", "q"), "\x00\x00\x00\x00", "\x00\x00\x00\x00").Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Size(bg, "ns", "q"); err != nil || n != 1 {
		t.Fatalf("size %d %v, want 1", n, err)
	}
	if j, err := e.PeekQueue(bg, "ns", "q"); err != nil || j.ID != id {
		t.Fatalf("peek %+v %v", j, err)
	}
	if _, err := e.ReclaimOnce(bg); err != nil {
		t.Fatal(err)
	}
	if n, _ := client.LLen(bg, readyKey("ns", "q")).Result(); n != 1 {
		t.Fatalf("list length %d after reclaim, want 1", n)
	}
	if j, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, TTR: time.Minute, Count: 1}); err != nil || len(j) != 1 || j[0].ID != id {
		t.Fatalf("consume %v %v", j, err)
	}
}
