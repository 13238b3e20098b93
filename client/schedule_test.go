package client_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

func TestSchedules(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	s, err := e.C.PutSchedule(ctx, "sq", "tick", client.ScheduleSpec{Cron: "@every 1s", Missed: "last"},
		[]byte("hi"), client.TTL(time.Minute), client.Tries(2), client.Priority(4), client.Attribute("kind", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "tick" || s.Cron != "@every 1s" || s.TZ != "UTC" || s.Missed != "last" || s.NextAt.IsZero() ||
		string(s.Job.Body) != "hi" || s.Job.TTL != time.Minute || s.Job.Tries != 2 || s.Job.Priority != 4 ||
		!s.Job.Versioned || s.Job.Attributes["kind"] != "t" {
		t.Fatalf("put: %+v", s)
	}
	job, err := e.C.Consume(ctx, "sq", 30*time.Second, 5*time.Second)
	if err != nil || string(job.Body) != "hi" || job.Attributes["kind"] != "t" {
		t.Fatalf("tick job %+v %v", job, err)
	}
	eventually(t, 5*time.Second, "fired", func() bool {
		g, err := e.C.GetSchedule(ctx, "sq", "tick")
		return err == nil && g.Fired >= 1 && g.LastJobID != "" && !g.LastTickAt.IsZero()
	})
	p, err := e.C.PauseSchedule(ctx, "sq", "tick")
	if err != nil || !p.Paused || !p.NextAt.IsZero() {
		t.Fatalf("pause: %+v %v", p, err)
	}
	r, err := e.C.ResumeSchedule(ctx, "sq", "tick")
	if err != nil || r.Paused || r.NextAt.IsZero() {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if _, err := e.C.PutSchedule(ctx, "sq", "berlin", client.ScheduleSpec{Cron: "0 2 * * *", TZ: "Europe/Berlin"}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := e.C.ListSchedules(ctx, "sq")
	if err != nil || len(list) != 2 || list[0].Name != "berlin" || list[1].Name != "tick" {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := e.C.DeleteSchedule(ctx, "sq", "tick"); err != nil {
		t.Fatal(err)
	}
	_, err = e.C.GetSchedule(ctx, "sq", "tick")
	wantErr(t, "get deleted", err, client.ErrNotFound, 404)
	wantErr(t, "delete deleted", e.C.DeleteSchedule(ctx, "sq", "tick"), client.ErrNotFound, 404)
	_, err = e.C.PutSchedule(ctx, "sq", "x", client.ScheduleSpec{Cron: "@every 1s", TZ: "Nowhere/Land"}, nil)
	wantErr(t, "bad tz", err, client.ErrBadRequest, 400)
	if !strings.Contains(err.Error(), "invalid tz") {
		t.Fatalf("bad tz: %v", err)
	}
	_, err = e.C.PutSchedule(ctx, "sq", "x", client.ScheduleSpec{Cron: "@every 1s"}, nil, client.Delay(time.Second))
	wantErr(t, "delay", err, client.ErrBadRequest, 0)
	_, err = e.C.PutSchedule(ctx, "sq", "", client.ScheduleSpec{Cron: "@every 1s"}, nil)
	wantErr(t, "no name", err, client.ErrBadRequest, 0)
}
