package rdb

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/engine"
)

// TestPublishDueAt: a DueAt is stored as is, to the millisecond (rounded
// up), on every publish path, although the engine's clock moves between
// readings; the job ID carries the delay; a DueAt in the past is ready at
// once; DueAt with Delay is refused.
func TestPublishDueAt(t *testing.T) {
	for _, tier := range engineTiers {
		t.Run(tier.name, func(t *testing.T) {
			ctx := context.Background()
			client := tier.client(t)
			var reads atomic.Int64
			e := startEngineOpts(t, client, Options{Now: func() time.Time {
				return time.Now().Add(time.Duration(reads.Add(1)) * 9 * time.Millisecond)
			}})
			const ns = "due"
			ms := time.Now().Add(time.Hour).UnixMilli()
			due := time.UnixMilli(ms).Add(300 * time.Microsecond) // rounded up to ms+1
			req := func(q string) *engine.PublishRequest {
				return &engine.PublishRequest{Namespace: ns, Queue: q, Body: []byte("x"), TTL: 2 * time.Hour, Tries: 1, DueAt: due}
			}
			var ids []string
			id, err := e.Publish(ctx, req("one")) // coalesced
			ids = append(ids, id)
			if err != nil {
				t.Fatal(err)
			}
			keyed := req("keyed")
			keyed.Key = "k"
			if id, err = e.Publish(ctx, keyed); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			batch, err := e.PublishBatch(ctx, []*engine.PublishRequest{req("batch"), req("batch")})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, batch...)
			each, errs := make([]string, 2), make([]error, 2)
			e.PublishEach(ctx, []*engine.PublishRequest{req("each"), req("each")}, each, errs)
			if errs[0] != nil || errs[1] != nil {
				t.Fatal(errs)
			}
			ids = append(ids, each...)
			for _, q := range []string{"one", "keyed", "batch", "each"} {
				got, err := client.ZRangeWithScores(ctx, timerKey(ns, q), 0, -1).Result()
				if err != nil || len(got) == 0 {
					t.Fatalf("%s: timer %v, %v", q, got, err)
				}
				for _, z := range got {
					if int64(z.Score) != ms+1 {
						t.Errorf("%s: stored due time %d, want %d", q, int64(z.Score), ms+1)
					}
				}
			}
			for _, id := range ids {
				info, err := engine.ParseJobID(id)
				if err != nil || info.Delay < 59*time.Minute || info.Delay > time.Hour {
					t.Errorf("job ID %s: delay %v, %v; want about an hour", id, info.Delay, err)
				}
			}

			past := req("past")
			past.DueAt = time.Now().Add(-time.Minute)
			if _, err := e.Publish(ctx, past); err != nil {
				t.Fatal(err)
			}
			if n, _ := client.LLen(ctx, readyKey(ns, "past")).Result(); n != 1 {
				t.Errorf("a DueAt in the past: %d jobs ready, want 1", n)
			}
			both := req("both")
			both.Delay = time.Second
			if _, err := e.Publish(ctx, both); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("DueAt with Delay: %v, want ErrInvalid", err)
			}
		})
	}
}
