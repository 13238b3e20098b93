package rdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// TestLimitsCollector: kairos_queue_in_flight and kairos_queue_max_in_flight
// for the queues with a max_in_flight (a sharded one's shards summed), and
// nothing for a queue without one.
func TestLimitsCollector(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngineOpts(t, client, Options{Now: newTestClock().Now})
	ctx := context.Background()
	for q, cfg := range map[string]engine.QueueConfig{
		"lim":     {MaxInFlight: 3},
		"sharded": {MaxInFlight: 4, Shards: 2},
	} {
		if err := e.SetQueueConfig(ctx, "lm", q, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"lim", "sharded", "plain"} {
		for i := range 6 {
			g := fmt.Sprintf("g%d", i%3)
			if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "lm", Queue: q, Body: []byte("x"), Tries: 1, Group: g}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "lm", Queues: []string{q}, TTR: time.Hour, Count: 1}); err != nil || len(jobs) != 1 {
				t.Fatalf("consume %s: %d jobs, %v", q, len(jobs), err)
			}
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewLimitsCollector(e))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[fmt.Sprint(f.GetName(), labels)] = fmt.Sprint(m.GetGauge().GetValue())
		}
	}
	want := map[string]string{
		"kairos_queue_in_flight[namespace=lm pool=default queue=lim]":         "2",
		"kairos_queue_max_in_flight[namespace=lm pool=default queue=lim]":     "3",
		"kairos_queue_in_flight[namespace=lm pool=default queue=sharded]":     "2",
		"kairos_queue_max_in_flight[namespace=lm pool=default queue=sharded]": "4",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
