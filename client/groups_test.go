package client_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

// TestGroups (issue #32): the Group option on Publish, BatchPublish and
// RePublish, Job.Group on consume and peek, the limits and weights of the
// queue config, and Admin.QueueGroups, against a real server; a bad group
// is refused before any request.
func TestGroups(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, bad := range []string{"", "a b", string(make([]byte, 65))} {
		if _, err := e.C.Publish(ctx, "g", []byte("x"), client.Group(bad)); !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("Publish with group %q: %v", bad, err)
		}
	}
	two, five := 2, 5
	cfg, err := e.Admin.SetQueueConfig(ctx, "", e.NS, "g", client.QueueConfigPatch{
		MaxInFlight: &five, GroupMaxInFlight: &two, GroupWeights: map[string]int{"vip": 3},
	})
	if err != nil || cfg.MaxInFlight != 5 || cfg.GroupMaxInFlight != 2 || !reflect.DeepEqual(cfg.GroupWeights, map[string]int{"vip": 3}) {
		t.Fatalf("SetQueueConfig: %+v, %v", cfg, err)
	}
	if _, err := e.C.Publish(ctx, "g", []byte("v"), client.Group("vip")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.C.BatchPublish(ctx, "g", []any{"b1", "b2", "b3"}, client.Group("basic")); err != nil {
		t.Fatal(err)
	}
	old, err := e.C.Publish(ctx, "g", []byte("o"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.C.RePublish(ctx, "g", old, []byte("r"), client.Group("basic")); err != nil {
		t.Fatal(err)
	}
	jobs, err := e.C.BatchConsume(ctx, []string{"g"}, 10, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, j := range jobs {
		per[j.Group]++
	}
	// basic stops at group_max_in_flight 2 of its 4 jobs.
	if len(jobs) != 3 || per["vip"] != 1 || per["basic"] != 2 {
		t.Fatalf("consumed %d jobs by group %v", len(jobs), per)
	}
	if p, err := e.C.PeekJob(ctx, "g", jobs[0].ID); err != nil || p.Group != jobs[0].Group {
		t.Fatalf("PeekJob: %+v, %v", p, err)
	}
	g, err := e.Admin.QueueGroups(ctx, "", e.NS, "g", 1)
	if err != nil || g.InFlight != 3 || g.MaxInFlight != 5 || g.GroupMaxInFlight != 2 || g.Total != 2 || !g.Truncated ||
		len(g.Groups) != 1 || g.Groups[0].Group != "basic" || g.Groups[0].Ready != 2 || g.Groups[0].InFlight != 2 || !g.Groups[0].Limited {
		t.Fatalf("QueueGroups: %+v, %v", g, err)
	}
	zero := 0
	if cfg, err = e.Admin.SetQueueConfig(ctx, "", e.NS, "g", client.QueueConfigPatch{MaxInFlight: &zero, GroupWeights: map[string]int{}}); err != nil ||
		cfg.MaxInFlight != 0 || cfg.GroupMaxInFlight != 2 || cfg.GroupWeights != nil {
		t.Fatalf("SetQueueConfig clearing: %+v, %v", cfg, err)
	}
}
