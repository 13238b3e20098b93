package rdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// TestClusterReadsDuringSlotMove: a queue's slot is moved by hand as
// redis-cli --cluster reshard does (IMPORTING on the target, MIGRATING on
// the source, MIGRATE of its keys, then the new owner on every node), in
// two steps that last 400 ms each:
//
//   - mid-migration: the job keys are on the target, the lists and hashes
//     still on the source. A command of several keys of the slot is
//     refused (TRYAGAIN), a script that names the job key prefix too: the
//     dashboard's queue details and job lists.
//   - the nodes disagree: every key is on the target and the source names
//     it the owner, while the target still imports the slot and names the
//     source (MOVED back and forth, as while the new owner spreads). Every
//     command of the slot is refused: sizes, the dead letter, the
//     namespace's queues, the registries (Info, Stats), the queue's
//     settings, and the history's flush (HINCRBY) and reads.
//
// Calls made meanwhile answer, and right, once the slot settles; the
// flush counts each event once. Before, they failed with the cluster's
// error (TRYAGAIN, MOVED), which the HTTP layer answers 503, and the
// flush failed after writing part of its increments, which the next flush
// wrote again.
func TestClusterReadsDuringSlotMove(t *testing.T) {
	c := redistest.SharedCluster(t)
	client := c.Client(t)
	e, err := New(bg, client, Options{HistoryFlush: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const ns, q = "readmove", "q"
	// Nothing of this namespace before (an earlier run on the shared
	// cluster) nor after (the queue's registry entry and keys are in a slot
	// group that other tests' queues may share).
	clean := func() {
		if _, err := e.Destroy(bg, ns, q); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if err := client.ForEachMaster(bg, func(ctx context.Context, n *redis.Client) error {
			keys, err := n.Keys(ctx, "*"+ns+"*").Result()
			for _, k := range keys {
				if err == nil {
					err = n.Del(ctx, k).Err()
				}
			}
			return err
		}); err != nil {
			t.Errorf("clean: %v", err)
		}
	}
	clean()
	pub := func(delay time.Duration) string {
		t.Helper()
		id, err := e.Publish(bg, &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: time.Hour, Tries: 1, Delay: delay})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for range 6 {
		pub(0)
	}
	pub(time.Hour)
	pub(time.Hour)
	// Two jobs to the dead letter: consumed, released with no try left.
	jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, Count: 2, TTR: time.Minute})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("consume: %d jobs, %v", len(jobs), err)
	}
	for _, j := range jobs {
		if err := e.Release(bg, &engine.ReleaseRequest{Namespace: ns, Queue: q, ID: j.ID, Receipt: j.Receipt}); err != nil {
			t.Fatal(err)
		}
	}
	deadHead := jobs[0].ID

	slot := slotOf(t, client, ns, q)
	from := c.MasterOf(t, readyKey(ns, q))
	to := ""
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	src, dst := redis.NewClient(&redis.Options{Addr: from}), redis.NewClient(&redis.Options{Addr: to})
	defer src.Close()
	defer dst.Close()
	srcID, err := src.Do(bg, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(bg, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("slot %d from %s to %s: %v", slot, from, to, err)
		}
	}
	// settle ends the move (also when the test fails half way) and moves
	// the slot back, for the tests after this one.
	var settled sync.Once
	settle := func() {
		settled.Do(func() {
			must(dst.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
			for _, m := range c.Masters(t) {
				if m != to {
					o := redis.NewClient(&redis.Options{Addr: m})
					must(o.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
					_ = o.Close()
				}
			}
			c.Wait(t)
		})
	}
	t.Cleanup(func() { settle(); moveSlot(t, c, int(slot), from); clean() })
	host, port, _ := strings.Cut(to, ":")
	migrate := func(jobKeys bool) {
		keys, err := src.ClusterGetKeysInSlot(bg, int(slot), 10000).Result()
		must(err)
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			if strings.HasPrefix(k, "j/") || !jobKeys {
				args = append(args, k)
			}
		}
		if len(args) > 7 {
			must(src.Do(bg, args...).Err())
		}
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	check := func(what string, err error, ok bool, got any) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil || !ok {
			failures = append(failures, fmt.Sprintf("%s: got %+v, err %v", what, got, err))
		}
	}

	// Step 1: mid-migration.
	must(dst.Do(bg, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(bg, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	migrate(true)
	if err := client.Exists(bg, readyKey(ns, q), jobKeyPrefix(ns, q)).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("mid-migration, EXISTS of a list and the job key prefix: %v; want TRYAGAIN (the test's premise)", err)
	}
	wg.Go(func() {
		d, err := e.QueueDetails(bg, ns, []string{q})
		check("queue details mid-migration", err, len(d) == 1 && d[0].Ready == 4 && d[0].Delayed == 2 && d[0].DeadLetter == 2 && d[0].InFlight == 0, d)
	})
	wg.Go(func() {
		jobs, _, err := e.ListJobs(bg, ns, q, engine.ListReady, 0, 10)
		check("list ready jobs mid-migration", err, len(jobs) == 4, len(jobs))
	})
	wg.Go(func() {
		n, err := e.Size(bg, ns, q)
		check("size mid-migration", err, n == 4, n)
	})
	time.Sleep(400 * time.Millisecond)

	// Step 2: the nodes disagree.
	migrate(false)
	must(src.Do(bg, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	if err := client.LLen(bg, deadKey(ns, q)).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("while the nodes disagree, LLEN: %v; want MOVED (the test's premise)", err)
	}
	step2 := time.Now()
	var took sync.Map
	timed := func(what string, f func()) {
		wg.Go(func() {
			f()
			took.Store(what, time.Since(step2))
		})
	}
	timed("dead letter size", func() {
		n, err := e.DeadLetterSize(bg, ns, q)
		check("dead letter size", err, n == 2, n)
	})
	timed("peek dead letter", func() {
		dl, err := e.PeekDeadLetter(bg, ns, q)
		check("peek dead letter", err, dl.Size == 2 && dl.Head == deadHead, dl)
	})
	timed("namespace queues", func() {
		st, err := e.NamespaceQueues(bg, ns)
		check("namespace queues", err, len(st) == 1 && st[0].Queue == q && st[0].Ready == 4 && st[0].Timer == 2 && st[0].DeadLetter == 2, st)
	})
	timed("info", func() {
		info, err := e.Info(bg)
		check("info", err, slices.Equal(info[ns], []string{q}), info[ns])
	})
	timed("stats", func() {
		st, err := e.Stats(bg)
		i := slices.IndexFunc(st, func(s engine.QueueStats) bool { return s.Namespace == ns && s.Queue == q })
		check("stats", err, i >= 0 && st[i].Ready == 4 && st[i].Timer == 2 && st[i].DeadLetter == 2, st)
	})
	timed("queue config", func() {
		_, err := e.QueueConfig(bg, ns, q)
		check("queue config", err, true, nil)
	})
	now := time.Now()
	timed("history", func() {
		if err := e.flushHistory(bg, now); err != nil {
			check("history flush", err, false, nil)
			return
		}
		h, err := e.History(bg, ns, q, now, 1)
		check("history read", err, len(h) == 1 && h[0].Published == 8 && h[0].Consumed == 2 && h[0].Dead == 2, h)
	})
	time.Sleep(400 * time.Millisecond)
	settle()
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		return
	}
	took.Range(func(k, v any) bool {
		if d := v.(time.Duration); d < 300*time.Millisecond {
			t.Errorf("%s answered %v into the disagreement: it never met it", k, d)
		}
		return true
	})
	// Each event counted once: a second flush writes nothing more, and the
	// namespace's history (another slot) agrees with the queue's.
	if err := e.flushHistory(bg, now); err != nil {
		t.Fatal(err)
	}
	for _, qq := range []string{q, ""} {
		h, err := e.History(bg, ns, qq, now, 1)
		if err != nil || len(h) != 1 || h[0].Published != 8 || h[0].Consumed != 2 || h[0].Dead != 2 {
			t.Errorf("history of %q after the move: %+v, %v; want 8 published, 2 consumed, 2 dead", qq, h, err)
		}
	}
}
