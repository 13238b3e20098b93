package rdb

import (
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kairos-dev/kairos/engine"
	"github.com/kairos-dev/kairos/engine/tracing"
)

// TestPumpReportsAcrossGroups: the pump runs one script per slot group
// (one slot each on a cluster), and each reports its own queues' expired
// TTRs (for the history) and moved job IDs (for tracing). Three queues of
// three groups expire or fall due in one PumpOnce: the history counts each
// queue's retried and dead jobs, the namespace's and pool's the sums, and
// there is one pump span per queue with its job IDs — on one Redis and on
// a real cluster.
func TestPumpReportsAcrossGroups(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			client := tier.client(t)
			clock := newTestClock()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			e, err := New(bg, client, Options{Now: clock.Now, HistoryFlush: 5 * time.Second, Tracer: tp.Tracer("test")})
			if err != nil {
				t.Fatal(err)
			}
			const ns = "rep"
			// Three queues of three different groups.
			var qs []string
			seen := map[int]bool{}
			for i := 0; len(qs) < 3; i++ {
				q := fmt.Sprint("q", i)
				if g := slotGroup(ns, q); !seen[g] {
					seen[g] = true
					qs = append(qs, q)
				}
			}
			retry, die, delayed := qs[0], qs[1], qs[2]
			minute := clock.Now().Truncate(time.Minute)
			ids := map[string]string{}
			for q, r := range map[string]engine.PublishRequest{
				retry:   {Tries: 2},
				die:     {Tries: 1},
				delayed: {Tries: 1, Delay: time.Second},
			} {
				r.Namespace, r.Queue, r.Body = ns, q, []byte(q)
				id, err := e.Publish(bg, &r)
				if err != nil {
					t.Fatal(err)
				}
				ids[q] = id
			}
			for _, q := range []string{retry, die} {
				jobs, err := e.Consume(bg, &engine.ConsumeRequest{Namespace: ns, Queues: []string{q}, TTR: time.Second, Count: 1})
				if err != nil || len(jobs) != 1 {
					t.Fatalf("consume %s: %v, %v", q, jobs, err)
				}
			}
			clock.Add(2 * time.Second)
			if _, err := e.PumpOnce(bg); err != nil {
				t.Fatal(err)
			}
			if err := e.FlushHistory(bg); err != nil {
				t.Fatal(err)
			}
			// The 2 s may cross a minute: sum the two minutes.
			at := func(q string) engine.Counts {
				t.Helper()
				got, err := e.History(bg, ns, q, minute, 2)
				if err != nil || len(got) != 2 {
					t.Fatalf("History(%s): %v, %v", q, got, err)
				}
				c := got[0]
				c.Published += got[1].Published
				c.Consumed += got[1].Consumed
				c.Acked += got[1].Acked
				c.Retried += got[1].Retried
				c.Dead += got[1].Dead
				return c
			}
			wantCounts(t, "retried queue", at(retry), 1, 1, 0, 1, 0)
			wantCounts(t, "dead queue", at(die), 1, 1, 0, 0, 1)
			wantCounts(t, "delayed queue", at(delayed), 1, 0, 0, 0, 0)
			wantCounts(t, "namespace", at(""), 3, 2, 0, 1, 1)

			spans := map[string]string{} // queue → job IDs
			for _, s := range rec.Ended() {
				if s.Name() != tracing.SpanPump {
					continue
				}
				var q, id string
				for _, a := range s.Attributes() {
					switch a.Key {
					case tracing.AttrQueue:
						q = a.Value.AsString()
					case tracing.AttrJobID:
						id = a.Value.Emit()
					}
				}
				if _, dup := spans[q]; dup {
					t.Errorf("two pump spans of queue %s", q)
				}
				spans[q] = id
			}
			for _, q := range qs {
				if spans[q] != ids[q] {
					t.Errorf("pump span of queue %s: job IDs %q, want %q (spans %v)", q, spans[q], ids[q], spans)
				}
			}
		})
	}
}
