package rdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	got := gatherGauges(t, NewLimitsCollector(e))
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

// TestQueueActivityLimits: the dashboard's queue activity (and details)
// read a queue's max_in_flight and its jobs in flight as the metrics do,
// and AtLimit says whether the limit holds back ready jobs: a queue at its
// limit with a ready job is, one below it or with nothing ready is not, a
// sharded queue is when a shard is at its part of the limit.
func TestQueueActivityLimits(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e := startEngineOpts(t, client, Options{Now: newTestClock().Now})
	ctx := context.Background()
	type setup struct {
		cfg              engine.QueueConfig
		publish, consume int
		limit, inFlight  int64
		atLimit          bool
	}
	cases := map[string]setup{
		"held":    {cfg: engine.QueueConfig{MaxInFlight: 2}, publish: 3, consume: 2, limit: 2, inFlight: 2, atLimit: true},
		"room":    {cfg: engine.QueueConfig{MaxInFlight: 3}, publish: 3, consume: 1, limit: 3, inFlight: 1},
		"drained": {cfg: engine.QueueConfig{MaxInFlight: 1}, publish: 1, consume: 1, limit: 1, inFlight: 1},
		// One group: every job in one shard, whose part of the limit is 1.
		"sharded": {cfg: engine.QueueConfig{MaxInFlight: 2, Shards: 2}, publish: 4, consume: 1, limit: 2, inFlight: 1, atLimit: true},
		"plain":   {publish: 3, consume: 3},
	}
	var names []string
	for q, c := range cases {
		names = append(names, q)
		if err := e.SetQueueConfig(ctx, "al", q, c.cfg); err != nil {
			t.Fatal(err)
		}
		for range c.publish {
			if _, err := e.Publish(ctx, &engine.PublishRequest{Namespace: "al", Queue: q, Body: []byte("x"), Tries: 1, Group: "g"}); err != nil {
				t.Fatal(err)
			}
		}
		for range c.consume {
			if jobs, err := e.Consume(ctx, &engine.ConsumeRequest{Namespace: "al", Queues: []string{q}, TTR: time.Hour, Count: 1}); err != nil || len(jobs) != 1 {
				t.Fatalf("consume %s: %d jobs, %v", q, len(jobs), err)
			}
		}
	}
	for name, read := range map[string]func(context.Context, string, []string) ([]engine.QueueDetail, error){
		"activity": e.QueueActivity, "details": e.QueueDetails,
	} {
		ds, err := read(ctx, "al", names)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			c := cases[names[i]]
			if d.Queue != names[i] || d.MaxInFlight != c.limit || d.LimitInFlight != c.inFlight || d.AtLimit != c.atLimit ||
				d.Ready != int64(c.publish-c.consume) {
				t.Errorf("%s of %s: max_in_flight %d, in flight %d, at limit %v, ready %d; want %d, %d, %v, %d", name, names[i],
					d.MaxInFlight, d.LimitInFlight, d.AtLimit, d.Ready, c.limit, c.inFlight, c.atLimit, c.publish-c.consume)
			}
		}
	}
}
