package rdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestImport writes jobs in every state through Import and checks what
// Kairos makes of them: ready ones after the jobs already there, in the
// order given; delayed and in-flight ones due at their times (the
// in-flight one with no try left dies then); the dead one in the dead
// letter; TTLs and payloads kept; a second Import of the same jobs writes
// none.
func TestImport(t *testing.T) {
	for _, tier := range coalesceTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			clock := newTestClock()
			e := startEngine(t, client, clock)
			now := clock.Now()
			id := func() string { return engine.NewJobID(clock.Now(), 0, false) }
			// A job published to Kairos before the import: the imported ready
			// jobs are older and come out first.
			if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "ns", Queue: "q", Body: []byte("kairos"), Tries: 1}); err != nil {
				t.Fatal(err)
			}
			r1, r2, d, f, last, x := id(), id(), id(), id(), id(), engine.NewJobID(now, 0, true)
			jobs := []ImportJob{
				// Newest first, as read from the head of lmstfy's list.
				{ID: r2, Payload: []byte("r2"), TTL: time.Hour, State: engine.StateReady, Tries: 3},
				{ID: r1, Payload: []byte("r1"), TTL: time.Hour, State: engine.StateReady, Tries: 3},
				{ID: d, Payload: []byte("d"), State: engine.StateDelayed, Tries: 2, At: now.Add(time.Minute)},
				{ID: f, Payload: []byte("f"), TTL: time.Hour, State: engine.StateInFlight, Tries: 1, Deliveries: 1, At: now.Add(30 * time.Second)},
				{ID: last, Payload: []byte("last"), State: engine.StateInFlight, Tries: 0, Deliveries: 1, At: now.Add(30 * time.Second)},
				{ID: x, Payload: []byte(`{"body":"eA==","attributes":{"k":"v"}}`), State: engine.StateDead, Deliveries: 1, At: now},
			}
			if n, err := e.Import(ctx, "ns", "q", jobs); err != nil || n != len(jobs) {
				t.Fatalf("Import = %d, %v; want %d", n, err, len(jobs))
			}
			if n, err := e.Import(ctx, "ns", "q", jobs); err != nil || n != 0 {
				t.Fatalf("second Import = %d, %v; want 0 (every job exists)", n, err)
			}
			wantUsage(t, e, client, "ns", int64(len(jobs))+1) // the jobs imported once
			if _, err := e.Import(ctx, "ns", "q/x", jobs[:1]); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("Import into an invalid queue name: %v", err)
			}
			if j, err := e.PeekJob(ctx, "ns", "q", d); err != nil || j.State != engine.StateDelayed || !j.DueAt.Equal(now.Add(time.Minute).Truncate(time.Millisecond)) {
				t.Errorf("delayed job: %+v, %v", j, err)
			}
			if j, err := e.PeekJob(ctx, "ns", "q", f); err != nil || j.State != engine.StateInFlight || j.Tries != 1 || j.TTL <= 59*time.Minute {
				t.Errorf("in-flight job: %+v, %v", j, err)
			}
			if dl, err := e.PeekDeadLetter(ctx, "ns", "q"); err != nil || dl.Size != 1 || dl.Head != x {
				t.Errorf("dead letter: %+v, %v; want %s", dl, err, x)
			}
			consume := func(want ...string) {
				t.Helper()
				got, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 10, TTR: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				var bodies []string
				for _, j := range got {
					bodies = append(bodies, string(j.Body))
				}
				if len(bodies) != len(want) {
					t.Fatalf("consumed %q, want %q", bodies, want)
				}
				for i := range want {
					if bodies[i] != want[i] {
						t.Fatalf("consumed %q, want %q", bodies, want)
					}
				}
			}
			consume("r1", "r2", "kairos")
			clock.Add(31 * time.Second) // f's and last's TTR run out
			if _, err := e.PumpOnce(ctx); err != nil {
				t.Fatal(err)
			}
			consume("f")
			if dl, err := e.PeekDeadLetter(ctx, "ns", "q"); err != nil || dl.Size != 2 {
				t.Errorf("dead letter after the TTR: %+v, %v; want x and last", dl, err)
			}
			clock.Add(30 * time.Second) // d falls due
			if _, err := e.PumpOnce(ctx); err != nil {
				t.Fatal(err)
			}
			consume("d")
			if n, err := e.RespawnDeadLetter(ctx, "ns", "q", 1, 0); err != nil || n != 1 {
				t.Fatalf("respawn: %d, %v", n, err)
			}
			got, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "ns", Queues: []string{"q"}, Count: 1, TTR: time.Hour})
			if err != nil || len(got) != 1 || got[0].ID != x || string(got[0].Body) != "x" || got[0].Attributes["k"] != "v" {
				t.Fatalf("respawned v1 job: %+v, %v; want %s with body x and attribute k=v", got, err, x)
			}
			info, err := e.Info(ctx)
			if err != nil || len(info["ns"]) != 1 {
				t.Errorf("Info = %v, %v; want the queue registered", info, err)
			}
		})
	}
}
