package rdb

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/kairos-dev/kairos/engine"
)

// TestScheduleGroup: a schedule's template may carry a group (issue #32):
// it is stored, read back, and every tick's job is in that group; an
// invalid group is refused; a replace without one puts the jobs back in
// the default group.
func TestScheduleGroup(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	es, clock := schedEngines(t, client, 1)
	e := es[0]
	put := func(group string) (*engine.Schedule, error) {
		return e.PutSchedule(bg, &engine.Schedule{
			Namespace: "ns", Queue: "q", Name: "g", Spec: "@every 1s",
			Body: []byte("tick"), TTL: time.Minute, Tries: 1, Group: group,
		})
	}
	if _, err := put("bad group"); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("a schedule with an invalid group: %v", err)
	}
	s, err := put("shop-7")
	if err != nil || s.Group != "shop-7" {
		t.Fatalf("put: %+v, %v", s, err)
	}
	if got, err := e.GetSchedule(bg, "ns", "q", "g"); err != nil || got.Group != "shop-7" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	tick := func() []*engine.Job {
		t.Helper()
		clock.Add(time.Second)
		if _, err := e.ScheduleOnce(bg); err != nil {
			t.Fatal(err)
		}
		return drain(t, e, clock)
	}
	groups := func(jobs []*engine.Job) map[string]int {
		m := map[string]int{}
		for _, j := range jobs {
			m[j.Group]++
		}
		return m
	}
	if g := groups(tick()); len(g) != 1 || g["shop-7"] == 0 {
		t.Fatalf("the ticks' jobs by group: %v", g)
	}
	if s, err = put(""); err != nil || s.Group != "" {
		t.Fatalf("replace without a group: %+v, %v", s, err)
	}
	if g := groups(tick()); len(g) != 1 || g[""] == 0 {
		t.Fatalf("the ticks' jobs by group after the replace: %v", g)
	}
}
