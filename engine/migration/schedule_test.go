package migration

import (
	"errors"
	"testing"

	"github.com/kairos-dev/kairos/engine"
)

// TestSchedules: a schedule made before the migration (in the old pool)
// stays visible and manageable; a put moves it to the new pool.
func TestSchedules(t *testing.T) {
	m, _ := miniPair(t)
	old := m.Old.(engine.Scheduler)
	tmpl := func(name, spec string) *engine.Schedule {
		return &engine.Schedule{Namespace: "ns", Queue: "q", Name: name, Spec: spec, Tries: 1}
	}
	if _, err := old.PutSchedule(bg, tmpl("a", "@hourly")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutSchedule(bg, tmpl("b", "@daily")); err != nil {
		t.Fatal(err)
	}
	if s, err := m.GetSchedule(bg, "ns", "q", "a"); err != nil || s.Spec != "@hourly" {
		t.Fatalf("get old: %+v %v", s, err)
	}
	if s, err := m.PauseSchedule(bg, "ns", "q", "a", true); err != nil || !s.Paused {
		t.Fatalf("pause old: %+v %v", s, err)
	}
	list, err := m.ListSchedules(bg, "ns", "q")
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list %v %v", list, err)
	}
	// A put moves a to the new pool: one copy, not two firing.
	if _, err := m.PutSchedule(bg, tmpl("a", "@every 1m")); err != nil {
		t.Fatal(err)
	}
	if _, err := old.GetSchedule(bg, "ns", "q", "a"); !errors.Is(err, engine.ErrScheduleNotFound) {
		t.Fatalf("old copy left: %v", err)
	}
	if s, err := m.New.(engine.Scheduler).GetSchedule(bg, "ns", "q", "a"); err != nil || s.Spec != "@every 1m" {
		t.Fatalf("new copy: %+v %v", s, err)
	}
	if err := m.DeleteSchedule(bg, "ns", "q", "a"); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSchedule(bg, "ns", "q", "a"); !errors.Is(err, engine.ErrScheduleNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
