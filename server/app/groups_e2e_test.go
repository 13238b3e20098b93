package app_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// TestE2EGroups: issue #32's two scenarios through the whole app and the
// Go client, on a real Redis and (under TestE2ECluster) on the real Redis
// Cluster. Fairness: a backlog of one group published first does not hold
// back ten other groups' jobs (at least 475 of their 500 among the first
// 600 consumes; 5,000 jobs of the big group here, which is the same test
// as 20,000 once the backlog outlasts the 600 consumes — TestGroupsOverHTTP
// in ./server has the 20,000). Limits: with max_in_flight 5, 20 waiting
// consumers get exactly 5 jobs, and an ACK lets exactly one more through;
// with group_max_in_flight 2 and three groups, 2 of each.
func TestE2EGroups(t *testing.T) {
	cfg := e2eRedisConfig(t)()
	k := startKairos(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(k.API, client.WithToken(k.newToken(t, "shop")), client.WithNamespace("shop"))
	if err != nil {
		t.Fatal(err)
	}
	adm, err := client.NewAdmin(k.Admin)
	if err != nil {
		t.Fatal(err)
	}

	// Fairness.
	batch := make([]any, 64)
	for i := range batch {
		batch[i] = "b"
	}
	for n := 0; n < 5000; n += len(batch) {
		if _, err := c.BatchPublish(ctx, "fair", batch, client.Group("big")); err != nil {
			t.Fatalf("bulk publish of group big: %v", err)
		}
	}
	for g := range 10 {
		small := make([]any, 50)
		for i := range small {
			small[i] = fmt.Sprintf("g%d-%d", g, i)
		}
		if _, err := c.BatchPublish(ctx, "fair", small, client.Group(fmt.Sprintf("small%d", g))); err != nil {
			t.Fatalf("bulk publish of group small%d: %v", g, err)
		}
	}
	smallSeen, next := 0, map[string]int{}
	for consumed := 0; consumed < 600; {
		jobs, err := c.BatchConsume(ctx, []string{"fair"}, 100, time.Minute, 0)
		if err != nil || len(jobs) == 0 {
			t.Fatalf("consume after %d: %d jobs, %v", consumed, len(jobs), err)
		}
		for _, j := range jobs {
			consumed++
			if j.Group != "big" {
				smallSeen++
				// FIFO within a group.
				if want := fmt.Sprintf("%q", fmt.Sprintf("g%s-%d", j.Group[len("small"):], next[j.Group])); string(j.Body) != want { // bulk bodies are JSON values
					t.Fatalf("group %s: got %q, want %q (FIFO within a group)", j.Group, j.Body, want)
				}
				next[j.Group]++
			}
		}
	}
	if smallSeen < 475 {
		t.Fatalf("%d of the small groups' 500 jobs among the first 600 consumes, want ≥ 475", smallSeen)
	}
	groups, err := adm.QueueGroups(ctx, "", "shop", "fair", 3)
	if err != nil || len(groups.Groups) == 0 || groups.Groups[0].Group != "big" || groups.Total < 1 {
		t.Fatalf("QueueGroups: %+v, %v", groups, err)
	}

	// max_in_flight 5: 20 consumers waiting, exactly 5 delivered.
	five := 5
	if _, err := adm.SetQueueConfig(ctx, "", "shop", "capped", client.QueueConfigPatch{MaxInFlight: &five}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := c.Publish(ctx, "capped", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan *client.Job, 20)
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				j, err := c.Consume(wctx, "capped", time.Minute, 2*time.Second)
				if err == nil && j != nil {
					got <- j
					return
				}
			}
		}()
	}
	var held []*client.Job
	for len(held) < 5 {
		select {
		case j := <-got:
			held = append(held, j)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d jobs delivered under max_in_flight 5, want 5", len(held))
		}
	}
	select { // the 15 others keep waiting
	case j := <-got:
		t.Fatalf("a 6th job delivered under max_in_flight 5: %s", j.ID)
	case <-time.After(1500 * time.Millisecond):
	}
	if err := c.AckJob(ctx, held[0]); err != nil {
		t.Fatal(err)
	}
	select { // the ACK frees one slot: one waiting consumer gets it
	case j := <-got:
		held = append(held[1:], j)
	case <-time.After(20 * time.Second):
		t.Fatal("no waiting consumer got a job after an ACK freed a slot")
	}
	select {
	case j := <-got:
		t.Fatalf("two jobs delivered for one freed slot: %s", j.ID)
	case <-time.After(time.Second):
	}
	wcancel()
	wg.Wait()
	for _, j := range held {
		if err := c.AckJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	// group_max_in_flight 2, three groups: 2 of each.
	two := 2
	if _, err := adm.SetQueueConfig(ctx, "", "shop", "pergroup", client.QueueConfigPatch{GroupMaxInFlight: &two}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b", "c"} {
		for i := range 5 {
			if _, err := c.Publish(ctx, "pergroup", []byte(g+fmt.Sprint(i)), client.Group(g)); err != nil {
				t.Fatal(err)
			}
		}
	}
	per := map[string]int{}
	for {
		jobs, err := c.BatchConsume(ctx, []string{"pergroup"}, 100, time.Minute, 0)
		if errors.Is(err, client.ErrNoJob) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			per[j.Group]++
		}
	}
	if len(per) != 3 || per["a"] != 2 || per["b"] != 2 || per["c"] != 2 {
		t.Fatalf("jobs in flight per group under group_max_in_flight 2: %v, want 2 of each of a, b, c", per)
	}
}
