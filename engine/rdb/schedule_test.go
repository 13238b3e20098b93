package rdb

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

// onTopologies runs f on a throwaway Redis, on the shared Redis Cluster
// (flushed: every schedule script must touch one slot, and the scheduler
// must find the ticks of every slot group, on every master), and on
// miniredis (the embedded store, [Kairos] Embedded, runs the same scripts).
func onTopologies(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) { f(t, realClient(t)) })
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		f(t, client)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		c.Flush(t)
		f(t, c.Client(t))
	})
}

// schedEngines returns n engines of one pool on client, sharing a frozen
// clock (their scheduler loops are not running: tests call ScheduleOnce).
func schedEngines(t *testing.T, client redis.UniversalClient, n int) ([]*Engine, *frozenClock) {
	t.Helper()
	clock := &frozenClock{t: time.UnixMilli(1_800_000_000_000).Add(300 * time.Millisecond)}
	var out []*Engine
	for i := 0; i < n; i++ {
		e, err := New(bg, client, Options{Now: clock.Now, NoAutoPipeline: true})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out, clock
}

func putEvery(t *testing.T, e *Engine, name, spec string, missed engine.MissedPolicy) *engine.Schedule {
	t.Helper()
	return putOn(t, e, "q", name, spec, missed)
}

// putOn puts schedule name on queue ns/q.
func putOn(t *testing.T, e *Engine, q, name, spec string, missed engine.MissedPolicy) *engine.Schedule {
	t.Helper()
	s, err := e.PutSchedule(bg, &engine.Schedule{
		Namespace: "ns", Queue: q, Name: name, Spec: spec, Missed: missed,
		Body: []byte("tick " + name), TTL: time.Minute, Tries: 2, Priority: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// drain advances the clock past every published tick, pumps, and consumes
// every job of ns/q, returning them.
func drain(t *testing.T, e *Engine, clock *frozenClock) []*engine.Job {
	t.Helper()
	clock.Add(2 * time.Second)
	return drainQueue(t, e, "q")
}

// drainQueue pumps and consumes every job of ns/q.
func drainQueue(t *testing.T, e *Engine, q string) []*engine.Job {
	t.Helper()
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	var all []*engine.Job
	for {
		jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{q}, TTR: time.Hour, Count: engine.MaxBatchConsume})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return all
		}
		all = append(all, jobs...)
	}
}

// TestScheduleExactlyOnce runs three engines' schedulers at once, tick
// after tick of @every 1s schedules on queues of slot groups on every
// master of a cluster: every tick fires exactly once, due at its tick,
// with the template.
func TestScheduleExactlyOnce(t *testing.T) { onTopologies(t, testScheduleExactlyOnce) }

func testScheduleExactlyOnce(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 3)
	s := putEvery(t, es[0], "every", "@every 1s", "")
	first := s.Next
	if !first.Equal(clock.Now().Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("next = %v at %v", s.Next, clock.Now())
	}
	others := queuesOnMasters("ns")
	for _, q := range others {
		putOn(t, es[1], q, "every", "@every 1s", "")
	}
	const steps = 60
	for i := 0; i < steps; i++ {
		clock.Add(time.Second)
		var wg sync.WaitGroup
		for _, e := range es {
			for k := 0; k < 2; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := e.ScheduleOnce(bg); err != nil {
						t.Error(err)
					}
				}()
			}
		}
		wg.Wait()
	}
	// At now = first+59.3s the lead (1 s) reaches first+60s: 61 ticks.
	got, err := es[1].GetSchedule(bg, "ns", "q", "every")
	if err != nil {
		t.Fatal(err)
	}
	const want = steps + 1
	if got.Fired != want || !got.LastTick.Equal(first.Add((want-1)*time.Second)) || !got.Next.Equal(first.Add(want*time.Second)) {
		t.Fatalf("fired %d, last tick %v, next %v; want %d ticks from %v", got.Fired, got.LastTick, got.Next, want, first)
	}
	jobs := drain(t, es[2], clock)
	if len(jobs) != want {
		t.Fatalf("%d jobs, want %d", len(jobs), want)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		if seen[j.ID] || string(j.Body) != "tick every" || j.Priority != 3 {
			t.Fatalf("job %+v (dup %v)", j, seen[j.ID])
		}
		seen[j.ID] = true
	}
	if !seen[got.LastJob] {
		t.Fatalf("last job %s not among the jobs", got.LastJob)
	}
	for _, q := range others {
		o, err := es[0].GetSchedule(bg, "ns", q, "every")
		if err != nil {
			t.Fatal(err)
		}
		if o.Fired != want || !o.Next.Equal(first.Add(want*time.Second)) {
			t.Fatalf("ns/%s (group %d): fired %d, next %v; want %d", q, slotGroup("ns", q), o.Fired, o.Next, want)
		}
		ids := map[string]bool{}
		for _, j := range drainQueue(t, es[0], q) {
			ids[j.ID] = true
		}
		if len(ids) != want || !ids[o.LastJob] {
			t.Fatalf("ns/%s: %d distinct jobs, want %d", q, len(ids), want)
		}
	}
}

// TestScheduleOnTime: a tick published ahead is a delayed job due at its
// tick, to the millisecond.
func TestScheduleOnTime(t *testing.T) { onTopologies(t, testScheduleOnTime) }

func testScheduleOnTime(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 1)
	e := es[0]
	s := putEvery(t, e, "daily", "0 0 * * *", "")
	clock.Add(s.Next.Sub(clock.Now()) - 400*time.Millisecond) // 0.4 s before the tick
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	got, _ := e.GetSchedule(bg, "ns", "q", "daily")
	if got.Fired != 1 || got.LastJob == "" {
		t.Fatalf("not fired ahead: %+v", got)
	}
	score, err := client.ZScore(bg, timerKey("ns", "q"), got.LastJob).Result()
	if err != nil || int64(score) != s.Next.UnixMilli() {
		t.Fatalf("timer score %v (%v), want the tick %d", score, err, s.Next.UnixMilli())
	}
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Size(bg, "ns", "q"); n != 0 {
		t.Fatalf("ready before its tick: %d", n)
	}
	// The template's TTL (a minute) counts from the tick.
	if ttl := client.PTTL(bg, jobKey("ns", "q", got.LastJob)).Val(); ttl < time.Minute || ttl > time.Minute+time.Second {
		t.Fatalf("job TTL %v", ttl)
	}
	clock.Add(400 * time.Millisecond)
	if _, err := e.PumpOnce(bg); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Size(bg, "ns", "q"); n != 1 {
		t.Fatalf("not ready at its tick: %d", n)
	}
}

func TestScheduleMissed(t *testing.T) { onTopologies(t, testScheduleMissed) }

func testScheduleMissed(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 1)
	e := es[0]
	skip := putEvery(t, e, "skip", "@every 10s", engine.MissedSkip)
	last := putEvery(t, e, "last", "@every 10s", engine.MissedLast)
	// Down for an hour: skip fires nothing; last fires the latest tick.
	clock.Add(time.Hour)
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	gs, _ := e.GetSchedule(bg, "ns", "q", "skip")
	gl, _ := e.GetSchedule(bg, "ns", "q", "last")
	if gs.Fired != 0 || !gs.Next.After(now) || gs.Next.Sub(skip.Next)%(10*time.Second) != 0 {
		t.Fatalf("skip: %+v at %v", gs, now)
	}
	wantLast := skip.Next.Add(now.Sub(skip.Next) / (10 * time.Second) * (10 * time.Second))
	if gl.Fired != 1 || !gl.LastTick.Equal(wantLast) || !gl.Next.Equal(wantLast.Add(10*time.Second)) || last.Fired != 0 {
		t.Fatalf("last: %+v, want last tick %v", gl, wantLast)
	}
	if jobs := drain(t, e, clock); len(jobs) != 1 || string(jobs[0].Body) != "tick last" {
		t.Fatalf("jobs %v", jobs)
	}
	// Late by less than MissedAfter: late ticks fire one by one.
	clock.Add(gs.Next.Sub(clock.Now()) + 25*time.Second)
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	if gs, _ = e.GetSchedule(bg, "ns", "q", "skip"); gs.Fired != 3 {
		t.Fatalf("late ticks: fired %d, want 3", gs.Fired)
	}
}

func TestSchedulePauseResumeDelete(t *testing.T) { onTopologies(t, testSchedulePauseResumeDelete) }

func testSchedulePauseResumeDelete(t *testing.T, client redis.UniversalClient) {
	es, clock := schedEngines(t, client, 1)
	index := scheduleIndexKey(slotGroup("ns", "q"))
	e := es[0]
	putEvery(t, e, "a", "@every 1s", "")
	putEvery(t, e, "b", "@every 1s", "")
	p, err := e.PauseSchedule(bg, "ns", "q", "a", true)
	if err != nil || !p.Paused || !p.Next.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if n := client.ZCard(bg, index).Val(); n != 1 {
		t.Fatalf("index holds %d, want 1 (b)", n)
	}
	// A replace keeps a paused schedule paused.
	if r := putEvery(t, e, "a", "@every 2s", ""); !r.Paused {
		t.Fatalf("replace unpaused it: %+v", r)
	}
	clock.Add(5 * time.Second)
	if _, err := e.ScheduleOnce(bg); err != nil {
		t.Fatal(err)
	}
	list, err := e.ListSchedules(bg, "ns", "q")
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[0].Fired != 0 || list[1].Fired == 0 {
		t.Fatalf("list %v %v", list, err)
	}
	r, err := e.PauseSchedule(bg, "ns", "q", "a", false)
	if err != nil || r.Paused || !r.Next.Equal(clock.Now().Truncate(time.Second).Add(2*time.Second)) || r.Spec != "@every 2s" {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if err := e.DeleteSchedule(bg, "ns", "q", "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteSchedule(bg, "ns", "q", "a"); !errors.Is(err, engine.ErrScheduleNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := e.GetSchedule(bg, "ns", "q", "a"); !errors.Is(err, engine.ErrScheduleNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := e.PauseSchedule(bg, "ns", "q", "a", true); !errors.Is(err, engine.ErrScheduleNotFound) {
		t.Fatalf("pause deleted: %v", err)
	}
	if m := client.ZRange(bg, index, 0, -1).Val(); len(m) != 1 || m[0] != "ns/q/b" {
		t.Fatalf("index %v", m)
	}
	for _, bad := range []*engine.Schedule{
		{Namespace: "ns", Queue: "q", Name: "x/y", Spec: "@hourly", Tries: 1},
		{Namespace: "ns", Queue: "q", Name: "x", Spec: "@every 10ms", Tries: 1},
		{Namespace: "ns", Queue: "q", Name: "x", Spec: "@hourly", TZ: "Nowhere/Atlantis", Tries: 1},
		{Namespace: "ns", Queue: "q", Name: "x", Spec: "@hourly", Tries: 0},
	} {
		if _, err := e.PutSchedule(bg, bad); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("put %+v: %v", bad, err)
		}
	}
}

// TestScheduleDSTFakeClock walks a frozen clock through Europe/Berlin's
// 2026 changes with 0 2 * * *: one job on the spring-forward day, at 03:00
// CEST; one on the fall-back day, at the first 02:00; and on 29 February
// 2028 a leap-day schedule fires.
func TestScheduleDSTFakeClock(t *testing.T) {
	es, clock := schedEngines(t, realClient(t), 2)
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	step := func(to time.Time) {
		t.Helper()
		clock.Add(to.Sub(clock.Now()))
		for _, e := range es {
			if _, err := e.ScheduleOnce(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Walk in 25-second steps (a tick is late by less than MissedAfter
	// when its step comes), recording each tick fired.
	walk := func(name string, from, to time.Time) []string {
		t.Helper()
		var fired []string
		prev := int64(0)
		if s, err := es[0].GetSchedule(bg, "ns", "q", name); err == nil {
			prev = s.Fired
		}
		for at := from; at.Before(to); at = at.Add(25 * time.Second) {
			step(at)
			s, err := es[0].GetSchedule(bg, "ns", "q", name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Fired != prev {
				fired = append(fired, s.LastTick.In(ber).Format(time.RFC3339))
				prev = s.Fired
			}
		}
		return fired
	}
	clock.Add(time.Date(2026, 3, 28, 22, 0, 0, 0, ber).Sub(clock.Now()))
	if _, err := es[0].PutSchedule(bg, &engine.Schedule{Namespace: "ns", Queue: "q", Name: "daily", Spec: "0 2 * * *", TZ: "Europe/Berlin", Tries: 1}); err != nil {
		t.Fatal(err)
	}
	got := walk("daily", time.Date(2026, 3, 29, 1, 30, 0, 0, ber), time.Date(2026, 3, 29, 3, 30, 0, 0, ber))
	if len(got) != 1 || got[0] != "2026-03-29T03:00:00+02:00" {
		t.Fatalf("spring forward: fired %v", got)
	}
	// Fall back: the clock jumps to the eve (ticks between are missed and
	// skipped), then walks through the repeated hour.
	step(time.Date(2026, 10, 24, 22, 0, 0, 0, ber))
	got = walk("daily", time.Date(2026, 10, 25, 1, 30, 0, 0, ber), time.Date(2026, 10, 25, 3, 30, 0, 0, time.FixedZone("CET", 3600)))
	if len(got) != 1 || got[0] != "2026-10-25T02:00:00+02:00" {
		t.Fatalf("fall back: fired %v", got)
	}
	s, _ := es[0].GetSchedule(bg, "ns", "q", "daily")
	if want := time.Date(2026, 10, 26, 2, 0, 0, 0, ber); !s.Next.Equal(want) {
		t.Fatalf("next after fall back %v, want %v", s.Next.In(ber), want)
	}
	// Leap day.
	step(time.Date(2028, 2, 28, 12, 0, 0, 0, time.UTC))
	if _, err := es[1].PutSchedule(bg, &engine.Schedule{Namespace: "ns", Queue: "q", Name: "leap", Spec: "0 0 29 2 *", Tries: 1}); err != nil {
		t.Fatal(err)
	}
	got = walk("leap", time.Date(2028, 2, 28, 23, 59, 0, 0, time.UTC), time.Date(2028, 2, 29, 0, 1, 0, 0, time.UTC))
	if len(got) != 1 || got[0] != time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC).In(ber).Format(time.RFC3339) {
		t.Fatalf("leap day: fired %v", got)
	}
	l, _ := es[0].GetSchedule(bg, "ns", "q", "leap")
	if !l.Next.Equal(time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("next leap day %v", l.Next)
	}
}
