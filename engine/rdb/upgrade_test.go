package rdb

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// oldValue is a stored job value with any header state: what the engine
// before slot groups wrote (the header format did not change).
func oldValue(state byte, tries, deliveries uint16, prio int, timeMS int64, nonce string, payload string) string {
	v := newValue(true, tries, prio, 0, "", "", []byte(payload))
	v[1] = state
	binary.LittleEndian.PutUint16(v[4:6], deliveries)
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], uint64(timeMS))
	copy(v[8:14], t[:6])
	copy(v[14:22], nonce)
	return string(v)
}

// TestUpgradeFromLegacyLayout writes a pool in the layout before slot
// groups (per-queue tags {ns/q}, one timer_index, lmstfy's m/ns
// registries) as that engine left it, starts the engine, and checks that
// every job is where it was: ready jobs in order, the priority job first,
// the delayed and in-flight jobs due when they were, the dead job in the
// dead letter, the idempotency key taken, and no old key left.
func TestUpgradeFromLegacyLayout(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			clock := newTestClock()
			now := clock.Now().UnixMilli()
			const ns, q, ns2, q2 = "old", "q", "old2", "r"
			id := func() string { return engine.NewJobID(clock.Now(), 0, false) }
			a, b, c, p, d, f, x, e2 := id(), id(), id(), id(), id(), id(), id(), id()
			jp := legacyJobPrefix(ns, q)
			old := client.Pipeline()
			set := func(k, v string, ttl time.Duration) { old.Set(ctx, k, v, ttl) }
			set(jp+a, oldValue('r', 3, 0, 0, 0, "", "a"), time.Hour)
			set(jp+b, oldValue('r', 3, 0, 0, 0, "", "b"), time.Hour)
			// c carries a trace context (format 2, as main wrote jobs
			// published with a traceparent before slot groups).
			const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			set(jp+c, string(newValue(true, 3, 0, 0, tp, "k=v", []byte("c"))), 0)
			old.LPush(ctx, legacyKey("q", ns, q), packEntry(3, a), packEntry(3, b), packEntry(3, c))
			set(jp+p, oldValue('r', 3, 0, 5, 0, "", "p"), time.Hour)
			old.ZAdd(ctx, legacyKey("p", ns, q), redis.Z{Score: float64(250<<40 + 1), Member: packEntry(3, p)})
			old.HSet(ctx, legacyKey("c", ns, q), "seq", 1, "dead_ttl", 5000)
			set(jp+d, oldValue('d', 3, 0, 0, now+3600_000, "", "d"), 2*time.Hour)
			set(jp+f, oldValue('f', 1, 1, 0, now+30_000, "12345678", "f"), time.Hour)
			old.ZAdd(ctx, legacyKey("t", ns, q), redis.Z{Score: float64(now + 3600_000), Member: d}, redis.Z{Score: float64(now + 30_000), Member: f})
			set(jp+x, oldValue('x', 0, 3, 0, now, "", "x"), 0)
			old.LPush(ctx, legacyKey("d", ns, q), packEntry(1, x))
			set(legacyUniqueKey(ns, q, "K"), a, time.Hour)
			old.ZAdd(ctx, legacyTimerIndex, redis.Z{Score: float64(now + 30_000), Member: ns + "/" + q})
			old.HSet(ctx, legacyNamespaces, ns, 1)
			old.HSet(ctx, legacyQueues(ns), q, 1)
			// A queue found only in the old index.
			set(legacyJobPrefix(ns2, q2)+e2, oldValue('d', 1, 0, 0, now+60_000, "", "e"), 0)
			old.ZAdd(ctx, legacyKey("t", ns2, q2), redis.Z{Score: float64(now + 60_000), Member: e2})
			old.ZAdd(ctx, legacyTimerIndex, redis.Z{Score: float64(now + 60_000), Member: ns2 + "/" + q2})
			// A paused schedule of the queue (paused: not in schedule_index).
			old.HSet(ctx, "sc/{old/q}/nightly", "spec", "0 3 * * *", "tz", "UTC", "missed", "skip", "paused", "1",
				"body", "n", "ttl", 0, "tries", 1, "prio", 0, "attrs", "", "versioned", "0", "next", 0, "ver", 1)
			old.SAdd(ctx, "sn/{old/q}", "nightly")
			// An active one, in main's pool-wide schedule_index (main before
			// slot groups; never released), due in two days.
			daily := now + 48*3600_000
			old.HSet(ctx, "sc/{old/q}/daily", "spec", "@daily", "tz", "UTC", "missed", "skip", "paused", "0",
				"body", "d", "ttl", 0, "tries", 1, "prio", 0, "attrs", "", "versioned", "0", "next", daily, "ver", 1)
			old.SAdd(ctx, "sn/{old/q}", "daily")
			old.ZAdd(ctx, legacyScheduleIndex, redis.Z{Score: float64(daily), Member: "old/q/daily"})
			if _, err := old.Exec(ctx); err != nil {
				t.Fatal(err)
			}

			e := startEngine(t, client, clock)
			left, err := client.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range left {
				if k == legacyTimerIndex || k == legacyNamespaces || k == legacyScheduleIndex || k == legacyQueues(ns) || strings.Contains(k, "{old/q}") || strings.Contains(k, "{old2/r}") {
					t.Errorf("old key %q left", k)
				}
			}
			if ttl := client.PTTL(ctx, jobKey(ns, q, a)).Val(); ttl <= 0 || ttl > time.Hour {
				t.Errorf("moved job a has TTL %v, want its hour", ttl)
			}
			// The jobs moved are counted as the namespaces' usage.
			for _, n := range []string{ns, ns2} {
				if u := mustUsage(t, e, n); u.Jobs == 0 {
					t.Errorf("usage of %s after the upgrade: %+v", n, u)
				}
				wantUsageOf(t, e, client, n)
			}
			info, err := e.Info(ctx)
			if err != nil || !slices.Equal(info[ns], []string{q}) || !slices.Equal(info[ns2], []string{q2}) {
				t.Errorf("Info = %v, %v", info, err)
			}
			if cfg, err := e.QueueConfig(ctx, ns, q); err != nil || cfg.DeadTTL != 5*time.Second {
				t.Errorf("config %+v %v, want the old dead TTL 5s", cfg, err)
			}
			if s, err := e.GetSchedule(ctx, ns, q, "nightly"); err != nil || s.Spec != "0 3 * * *" || !s.Paused {
				t.Errorf("old schedule after the upgrade: %+v, %v", s, err)
			}
			if ss, err := e.ListSchedules(ctx, ns, q); err != nil || len(ss) != 2 {
				t.Errorf("schedules of the queue after the upgrade: %v, %v", ss, err)
			}
			// The active schedule is in its group's schedule index, where
			// the scheduler finds it; the paused one is not.
			if m, err := client.ZRangeWithScores(ctx, scheduleIndexKey(slotGroup(ns, q)), 0, -1).Result(); err != nil ||
				len(m) != 1 || m[0].Member != "old/q/daily" || int64(m[0].Score) != daily {
				t.Errorf("schedule index after the upgrade: %v, %v", m, err)
			}
			if next, err := e.ScheduleOnce(ctx); err != nil || next != daily {
				t.Errorf("ScheduleOnce = %d, %v; want the old schedule's next tick %d", next, err, daily)
			}
			var consumed []*engine.Job
			consume := func(queue string, want ...string) {
				t.Helper()
				jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns, Queues: []string{queue}, Count: 10, TTR: 10 * time.Hour})
				if queue == q2 {
					jobs, err = e.Consume(ctx, &engine.ConsumeRequest{Namespace: ns2, Queues: []string{queue}, Count: 10, TTR: 10 * time.Hour})
				}
				if err != nil {
					t.Fatal(err)
				}
				consumed = jobs
				var got []string
				for _, j := range jobs {
					got = append(got, string(j.Body))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("consume %s: %q, want %q", queue, got, want)
				}
			}
			consume(q, "p", "a", "b", "c")
			if j := consumed[3]; j.TraceParent != tp || j.TraceState != "k=v" || consumed[0].TraceParent != "" {
				t.Errorf("moved traced job c: traceparent %q tracestate %q (p: %q); want its trace context kept", j.TraceParent, j.TraceState, consumed[0].TraceParent)
			}
			ids, err := e.PublishBatch(ctx, []*engine.PublishRequest{{Namespace: ns, Queue: q, Body: []byte("again"), Tries: 1, Key: "K"}})
			if !errors.Is(err, engine.ErrKeyExists) || len(ids) != 1 || ids[0] != a {
				t.Errorf("publish with the old key K = %v, %v; want a's ID %s and ErrKeyExists", ids, err, a)
			}
			consume(q)
			clock.Add(31 * time.Second) // f's TTR passes: it comes back
			if _, err := e.PumpOnce(ctx); err != nil {
				t.Fatal(err)
			}
			consume(q, "f")
			clock.Add(time.Hour) // d and e fall due
			if _, err := e.PumpOnce(ctx); err != nil {
				t.Fatal(err)
			}
			consume(q, "d")
			consume(q2, "e")
			if dl, err := e.PeekDeadLetter(ctx, ns, q); err != nil || dl.Size != 1 || dl.Head != x {
				t.Fatalf("dead letter %+v %v, want x", dl, err)
			}
			if n, err := e.RespawnDeadLetter(ctx, ns, q, 10, 0); err != nil || n != 1 {
				t.Fatalf("respawn %d %v", n, err)
			}
			consume(q, "x")
		})
	}
}
