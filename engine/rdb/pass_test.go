package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestTogether checks an event-loop pass's steps (engine.Pipeliner): their
// calls share round trips, run in step order, and steps that make several
// calls, none, or lead a coalesced batch all finish.
func TestTogether(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			e := startEngine(t, client, newTestClock())
			ctx := context.Background()
			p := e.pipe.Load()
			for end := time.Now().Add(5 * time.Second); p == nil && time.Now().Before(end); p = e.pipe.Load() {
				time.Sleep(time.Millisecond) // Run starts it
			}
			if p == nil {
				t.Fatal("no auto-pipeline while Run runs")
			}
			// within runs steps with a deadline and returns the round trips
			// and calls they made.
			within := func(steps ...func(context.Context)) (sends, calls int64) {
				t.Helper()
				s0, c0 := p.nSends.Load(), p.nCalls.Load()
				done := make(chan struct{})
				go func() { defer close(done); e.Together(ctx, steps...) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("Together did not return: its steps wait for each other")
				}
				return p.nSends.Load() - s0, p.nCalls.Load() - c0
			}
			publish := func(ctx context.Context, q, body string) string {
				t.Helper()
				ids, errs := make([]string, 1), make([]error, 1)
				e.PublishEach(ctx, []*engine.PublishRequest{{Namespace: "tg", Queue: q, Tries: 1, Body: []byte(body)}}, ids, errs)
				if errs[0] != nil {
					t.Errorf("publish to %s: %v", q, errs[0])
				}
				return ids[0]
			}
			consume := func(ctx context.Context, q string) []*engine.Job {
				t.Helper()
				jobs, errs := make([][]*engine.Job, 1), make([]error, 1)
				e.ConsumeEach(ctx, []*engine.ConsumeRequest{{Namespace: "tg", Queues: []string{q}, TTR: time.Minute, Count: 1}}, jobs, errs)
				if errs[0] != nil {
					t.Errorf("consume from %s: %v", q, errs[0])
				}
				return jobs[0]
			}

			// ACK, publish and consume in one round trip, in that order: the
			// consume gets the job published beside it.
			old := publish(ctx, "a", "old")
			if got := consume(ctx, "a"); len(got) != 1 || got[0].ID != old {
				t.Fatalf("consume before the pass: %v", got)
			}
			var ackErr error
			var id string
			var got []*engine.Job
			sends, calls := within(
				func(ctx context.Context) {
					errs := make([]error, 1)
					e.DeleteEach(ctx, []engine.JobRef{{Namespace: "tg", Queue: "a", ID: old}}, errs)
					ackErr = errs[0]
				},
				func(ctx context.Context) { id = publish(ctx, "a", "new") },
				func(ctx context.Context) { got = consume(ctx, "a") },
			)
			if ackErr != nil || len(got) != 1 || got[0].ID != id || string(got[0].Body) != "new" {
				t.Fatalf("ack %v, consumed %v, want the job published in the same pass (%s)", ackErr, got, id)
			}
			if sends != 1 || calls != 3 {
				t.Errorf("ack + publish + consume: %d calls in %d round trips, want 3 in 1", calls, sends)
			}
			if _, err := e.PeekJob(ctx, "tg", "a", old); err == nil {
				t.Errorf("job %s still there after its ACK", old)
			}

			// Step order, not arrival order: a consume given first runs
			// before the publish beside it and finds nothing.
			sends, _ = within(
				func(ctx context.Context) { got = consume(ctx, "b") },
				func(ctx context.Context) { id = publish(ctx, "b", "later") },
			)
			if len(got) != 0 || sends != 1 {
				t.Errorf("consume then publish: consumed %v in %d round trips, want nothing in 1", got, sends)
			}
			if got = consume(ctx, "b"); len(got) != 1 || got[0].ID != id {
				t.Errorf("the job published beside the consume: %v, want %s", got, id)
			}

			// A step with two calls, one with none, one with one: two rounds.
			var first, second string
			sends, calls = within(
				func(ctx context.Context) {
					first = publish(ctx, "c", "1")
					second = publish(ctx, "c", "2")
				},
				func(context.Context) {},
				func(ctx context.Context) { got = consume(ctx, "c") },
			)
			if sends != 2 || calls != 3 {
				t.Errorf("2 + 0 + 1 calls: %d calls in %d round trips, want 3 in 2", calls, sends)
			}
			if len(got) != 1 || got[0].ID != first {
				t.Errorf("consumed %v beside the first publish, want %s", got, first)
			}
			if got = consume(ctx, "c"); len(got) != 1 || got[0].ID != second {
				t.Errorf("then %v, want %s", got, second)
			}

			// A step that leads a coalesced batch (Publish) does not wait for
			// the pass's round, which waits for it.
			var led string
			within(
				func(ctx context.Context) {
					var err error
					if led, err = e.Publish(ctx, &engine.PublishRequest{Namespace: "tg", Queue: "d", Tries: 1, Body: []byte("led")}); err != nil {
						t.Errorf("coalesced publish in a step: %v", err)
					}
				},
				func(ctx context.Context) { got = consume(ctx, "e") },
			)
			if got = consume(ctx, "d"); len(got) != 1 || got[0].ID != led {
				t.Errorf("the job published by a coalesced batch in a step: %v, want %s", got, led)
			}
		})
	}
}

// TestTogetherOtherEngine: a pass step that calls another engine (a
// decorator over two pools, such as the migration engine, may) reaches
// that engine's Redis, not the pass's.
func TestTogetherOtherEngine(t *testing.T) {
	ctx := context.Background()
	mini := coalesceTiers[0].client
	a := startEngine(t, mini(t), newTestClock())
	b := startEngine(t, mini(t), newTestClock())
	for end := time.Now().Add(5 * time.Second); (a.pipe.Load() == nil || b.pipe.Load() == nil) && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // Run starts the pipelines
	}
	ids := map[*Engine]string{}
	for _, e := range []*Engine{a, b} {
		id, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: "q", Tries: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids[e] = id
	}
	var got [][]*engine.Job
	var ackErr error
	a.Together(ctx,
		func(ctx context.Context) {
			got = make([][]*engine.Job, 1)
			errs := make([]error, 1)
			b.ConsumeEach(ctx, []*engine.ConsumeRequest{{Namespace: "ns", Queues: []string{"q"}, TTR: time.Minute, Count: 1}}, got, errs)
			if errs[0] != nil {
				t.Error(errs[0])
			}
		},
		func(ctx context.Context) {
			errs := make([]error, 1)
			b.DeleteEach(ctx, []engine.JobRef{{Namespace: "ns", Queue: "q", ID: "01M7YVBFN8AAS205RQ04000000"}}, errs)
			ackErr = errs[0]
		})
	if ackErr != nil {
		t.Fatal(ackErr)
	}
	if len(got[0]) != 1 || got[0][0].ID != ids[b] {
		t.Fatalf("b's consume in a's pass got %v, want b's job %s", got[0], ids[b])
	}
	if _, err := a.PeekQueue(ctx, "ns", "q"); err != nil {
		t.Fatalf("a's job is gone from a's queue: %v", err)
	}
}
