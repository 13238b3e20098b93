package migration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/enginetest"
	"github.com/kairos-dev/kairos/engine/rdb"
	"github.com/kairos-dev/kairos/engine/rdb/redistest"
)

var bg = context.Background()

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// pair runs two engines on two Redis servers with one clock.
func pair(t *testing.T, oldC, newC redis.UniversalClient, elapse func(time.Duration)) (*Engine, *enginetest.Harness) {
	t.Helper()
	c := &clock{}
	var engines []*rdb.Engine
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for _, cl := range []redis.UniversalClient{oldC, newC} {
		e, err := rdb.New(bg, cl, rdb.Options{Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	m := New(engines[0], engines[1])
	return m, &enginetest.Harness{
		Engine: m,
		Advance: func(d time.Duration) {
			c.off.Add(int64(d))
			// Both pools' pumps at once, as their servers run them: one
			// pumping after the other would read the clock later by the
			// first one's round trips (real time flows too).
			errs := make(chan error, len(engines))
			for _, e := range engines {
				go func() { _, err := e.PumpOnce(bg); errs <- err }()
			}
			for range engines {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		},
		Elapse: elapse,
	}
}

func miniPair(t *testing.T) (*Engine, *enginetest.Harness) {
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	ca := redis.NewClient(&redis.Options{Addr: a.Addr()})
	cb := redis.NewClient(&redis.Options{Addr: b.Addr()})
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	return pair(t, ca, cb, func(d time.Duration) { a.FastForward(d); b.FastForward(d) })
}

// The migration engine is an engine like any other: it passes the contract.
func TestContract(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) *enginetest.Harness { _, h := miniPair(t); return h })
	enginetest.RunExtended(t, func(t *testing.T) *enginetest.Harness { _, h := miniPair(t); return h })
}

// The contract on real Redis: two redis-servers, flushed for each test.
func TestContractRealRedis(t *testing.T) {
	oldS, newS := redistest.Start(t), redistest.Start(t)
	f := func(t *testing.T) *enginetest.Harness {
		for _, s := range []*redistest.Server{oldS, newS} {
			if err := s.Client().FlushAll(bg).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_, h := pair(t, oldS.Client(), newS.Client(), time.Sleep)
		return h
	}
	enginetest.Run(t, f)
	enginetest.RunExtended(t, f)
}

// A consumer waiting on a migrating pool is woken by a job made ready in
// either pool: one published (to the new pool), one that comes back to the
// old pool (released there), one of the old pool falling due. Waits with
// Consume and with Watch (the event loops').
func TestWaitWokenByEitherPool(t *testing.T) {
	m, _ := miniPair(t)
	publish := func(e engine.Engine, delay time.Duration) func(t *testing.T) string {
		return func(t *testing.T) string {
			id, err := e.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 2, Delay: delay})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	// inFlight is a job of the old pool that a consumer holds.
	var inFlight *engine.Job
	takeOld := func(t *testing.T) {
		publish(m.Old, 0)(t)
		jobs, err := m.Old.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("consume from the old pool: %v %v", jobs, err)
		}
		inFlight = jobs[0]
	}
	release := func(t *testing.T) string {
		if err := m.Old.Release(bg, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: inFlight.ID, Receipt: inFlight.Receipt, KeepTry: true}); err != nil {
			t.Fatal(err)
		}
		return inFlight.ID
	}
	consume := func() *engine.Job {
		jobs, err := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: 3 * time.Second})
		if err != nil || len(jobs) != 1 {
			return nil
		}
		return jobs[0]
	}
	watch := func() *engine.Job {
		deadline := time.After(3 * time.Second)
		for {
			fired := make(chan struct{}, 1)
			stop, look, ok := m.Watch("ns", []string{"q"}, func() { fired <- struct{}{} })
			if !ok {
				t.Error("the migration engine cannot watch")
				return nil
			}
			if look {
				if jobs, _ := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute}); len(jobs) == 1 {
					stop()
					return jobs[0]
				}
			}
			select {
			case <-fired:
				if jobs, _ := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute}); len(jobs) == 1 {
					return jobs[0]
				}
			case <-deadline:
				stop()
				return nil
			}
		}
	}
	for _, wait := range []struct {
		name string
		fn   func() *engine.Job
	}{{"Consume", consume}, {"Watch", watch}} {
		for _, tc := range []struct {
			name  string
			setup func(t *testing.T)
			job   func(t *testing.T) string
			delay time.Duration
		}{
			{"published", nil, publish(m, 0), 0},
			{"released in the old pool", takeOld, release, 0},
			{"due in the old pool", nil, publish(m.Old, 300*time.Millisecond), 300 * time.Millisecond},
		} {
			t.Run(wait.name+"/"+tc.name, func(t *testing.T) {
				if tc.setup != nil {
					tc.setup(t)
				}
				got := make(chan *engine.Job, 1)
				go func() { got <- wait.fn() }()
				time.Sleep(100 * time.Millisecond)
				start := time.Now()
				id := tc.job(t)
				j := <-got
				if j == nil || j.ID != id {
					t.Fatalf("waiting consumer got %+v, want %s", j, id)
				}
				if d := time.Since(start); d > tc.delay+700*time.Millisecond {
					t.Fatalf("woken %v after the job", d)
				}
				if err := m.Delete(bg, "ns", "q", id); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// The batches of the event loops span both pools: publishes go to the new
// pool, consumes take the old pool's jobs first, ACKs reach either pool.
func TestBatchesSpanBothPools(t *testing.T) {
	m, _ := miniPair(t)
	oldID, err := m.Old.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 2, Body: []byte("old")})
	if err != nil {
		t.Fatal(err)
	}
	ids, errs := make([]string, 1), make([]error, 1)
	m.PublishEach(bg, []*engine.PublishRequest{{Namespace: "ns", Queue: "q", Tries: 2, Body: []byte("new")}}, ids, errs)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	newID := ids[0]
	if _, err := m.New.PeekJob(bg, "ns", "q", newID); err != nil {
		t.Fatalf("the published job is not in the new pool: %v", err)
	}
	if _, err := m.Old.PeekJob(bg, "ns", "q", newID); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("the published job is in the old pool: %v", err)
	}
	req := &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Second}
	jobs, cerrs := make([][]*engine.Job, 2), make([]error, 2)
	m.ConsumeEach(bg, []*engine.ConsumeRequest{req, req}, jobs, cerrs)
	if cerrs[0] != nil || cerrs[1] != nil || len(jobs[0]) != 1 || len(jobs[1]) != 1 || jobs[0][0].ID != oldID || jobs[1][0].ID != newID {
		t.Fatalf("ConsumeEach = %v %v, want the old job, then the new one", jobs, cerrs)
	}
	derrs := make([]error, 2)
	m.DeleteEach(bg, []engine.JobRef{{Namespace: "ns", Queue: "q", ID: oldID}, {Namespace: "ns", Queue: "q", ID: newID}}, derrs)
	if derrs[0] != nil || derrs[1] != nil {
		t.Fatal(derrs)
	}
	for _, p := range []engine.Engine{m.Old, m.New} {
		for _, id := range []string{oldID, newID} {
			if _, err := p.PeekJob(bg, "ns", "q", id); !errors.Is(err, engine.ErrJobNotFound) {
				t.Fatalf("job %s after its ACK: %v", id, err)
			}
		}
	}
}

// A wake-up that a watcher of a migrating pool gets and does not use (the
// consumer left) goes to the next watcher.
func TestWatchPassesWakeUpOn(t *testing.T) {
	m, _ := miniPair(t)
	q := []string{"q"}
	take := func() *engine.Job {
		jobs, err := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: q, Count: 1, TTR: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return nil
		}
		return jobs[0]
	}
	// Both pools listen to the queue's channel first, so that no
	// confirmation of a subscription wakes the watchers below.
	for _, p := range []engine.Engine{m.Old, m.New} {
		fired := make(chan struct{}, 1)
		stop, _, ok := m.Watch("ns", q, func() { fired <- struct{}{} })
		if !ok {
			t.Fatal("cannot watch")
		}
		if _, err := p.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-fired:
		case <-time.After(2 * time.Second):
			t.Fatal("warm-up watch not woken")
		}
		stop()
		if take() == nil {
			t.Fatal("warm-up job not consumed")
		}
	}
	firstC, secondC := make(chan struct{}, 1), make(chan struct{}, 1)
	stopFirst, _, _ := m.Watch("ns", q, func() { firstC <- struct{}{} })
	time.Sleep(20 * time.Millisecond)
	stopSecond, _, _ := m.Watch("ns", q, func() { secondC <- struct{}{} })
	defer stopSecond()
	id, err := m.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstC:
		stopFirst() // the consumer leaves without looking
	case <-secondC:
		stopFirst()
		t.Log("the second watcher was woken first")
	case <-time.After(2 * time.Second):
		t.Fatal("no watcher woken by the publish")
	}
	select {
	case <-secondC:
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the wake-up the first watcher did not use did not reach the second")
	}
	if j := take(); j == nil || j.ID != id {
		t.Fatalf("second watcher's look got %+v, want %s", j, id)
	}
}

// A re-publish in a batch deletes the job it replaces, in the old pool.
func TestPublishEachReplacesOldJob(t *testing.T) {
	m, _ := miniPair(t)
	oldID, err := m.Old.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ids, errs := make([]string, 2), make([]error, 2)
	m.PublishEach(bg, []*engine.PublishRequest{
		{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("plain")},
		{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("again"), Replaces: oldID},
	}, ids, errs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if _, err := m.Old.PeekJob(bg, "ns", "q", oldID); !errors.Is(err, engine.ErrJobNotFound) {
		t.Fatalf("replaced job: %v", err)
	}
	for _, id := range ids {
		if _, err := m.New.PeekJob(bg, "ns", "q", id); err != nil {
			t.Fatalf("job %s not in the new pool: %v", id, err)
		}
	}
}

func TestMain(m *testing.M) { redistest.Main(m) }

// MigrateTo from a standalone pool into a cluster pool: the contract.
func TestContractIntoCluster(t *testing.T) {
	oldS, newC := redistest.Start(t), redistest.SharedCluster(t)
	newClient := newC.Client(t)
	f := func(t *testing.T) *enginetest.Harness {
		if err := oldS.Client().FlushAll(bg).Err(); err != nil {
			t.Fatal(err)
		}
		newC.Flush(t)
		_, h := pair(t, oldS.Client(), newClient, time.Sleep)
		return h
	}
	enginetest.Run(t, f)
	enginetest.RunExtended(t, f)
}

func TestMigrationOnRealRedis(t *testing.T) {
	oldS := redistest.Start(t)
	t.Run("standalone", func(t *testing.T) {
		newS := redistest.Start(t)
		testMigration(t, oldS.Client(), newS.Client())
	})
	t.Run("into a cluster", func(t *testing.T) {
		if err := oldS.Client().FlushAll(bg).Err(); err != nil {
			t.Fatal(err)
		}
		c := redistest.SharedCluster(t)
		c.Flush(t)
		testMigration(t, oldS.Client(), c.Client(t))
	})
}

func testMigration(t *testing.T, oldC, newC redis.UniversalClient) {
	m, _ := pair(t, oldC, newC, time.Sleep)
	// Jobs published before the migration sit in the old pool.
	oldID, err := m.Old.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 2, Body: []byte("old")})
	if err != nil {
		t.Fatal(err)
	}
	newID, err := m.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1, Body: []byte("new")})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := newC.Exists(bg, rdb.JobKey("ns", "q", newID)).Result(); n != 1 {
		t.Fatal("a publish during migration did not land in the new pool")
	}
	if n, _ := m.Size(bg, "ns", "q"); n != 2 {
		t.Fatalf("size = %d, want both pools' 2", n)
	}
	p, err := m.PeekJob(bg, "ns", "q", oldID)
	if err != nil || string(p.Body) != "old" {
		t.Fatalf("peek of an old job: %v %v", p, err)
	}
	// Consumers drain the old pool first, then the new one.
	jobs, err := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: time.Second})
	if err != nil || len(jobs) != 1 || jobs[0].ID != oldID {
		t.Fatalf("first consume = %v %v, want the old job", jobs, err)
	}
	// A receipt from the old pool still releases there.
	if err := m.Release(bg, &engine.ReleaseRequest{Namespace: "ns", Queue: "q", ID: oldID, Receipt: jobs[0].Receipt, KeepTry: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{oldID, newID} {
		jobs, err = m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: time.Second})
		if err != nil || len(jobs) != 1 || jobs[0].ID != want {
			t.Fatalf("consume = %v %v, want %s", jobs, err, want)
		}
		if err := m.Delete(bg, "ns", "q", want); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer waiting during the migration is woken by a publish (to
	// the new pool).
	got := make(chan []*engine.Job, 1)
	go func() {
		jobs, _ := m.Consume(bg, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Minute, Timeout: 3 * time.Second})
		got <- jobs
	}()
	time.Sleep(100 * time.Millisecond)
	id, _ := m.Publish(bg, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
	if jobs := <-got; len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("waiting consumer got %v", jobs)
	}
}
