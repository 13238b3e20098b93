package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestScheduleCommands(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	r := kairos(t, env, "", "schedule", "set", "sq", "tick", "hello", "--cron", "@every 1s", "--ttl", "1m", "--tries", "2", "--attr", "k=v").want(t, exitOK)
	if !strings.Contains(r.stdout, "tick") || !strings.Contains(r.stdout, "@every 1s") || !strings.Contains(r.stdout, "UTC") {
		t.Fatalf("set: %q", r.stdout)
	}
	job, err := c.Consume(ctx, "sq", 30*time.Second, 5*time.Second)
	if err != nil || string(job.Body) != "hello" || job.Attributes["k"] != "v" {
		t.Fatalf("tick job %+v %v", job, err)
	}
	kairos(t, env, "", "schedule", "set", "sq", "nightly", "x", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--missed", "last").want(t, exitOK)
	r = kairos(t, env, "", "--json", "schedule", "list", "sq").want(t, exitOK)
	var list []struct {
		Name, TZ, Missed string
		NextAt           *string `json:"next_at"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[0].Name != "nightly" ||
		list[0].TZ != "Europe/Berlin" || list[0].Missed != "last" || list[0].NextAt == nil || list[1].Name != "tick" {
		t.Fatalf("list: %q %v", r.stdout, err)
	}
	if r := kairos(t, env, "", "schedule", "pause", "sq", "tick").want(t, exitOK); !strings.Contains(r.stdout, "true") {
		t.Fatalf("pause: %q", r.stdout)
	}
	if r := kairos(t, env, "", "schedule", "resume", "sq", "tick").want(t, exitOK); !strings.Contains(r.stdout, "false") {
		t.Fatalf("resume: %q", r.stdout)
	}
	kairos(t, env, "", "schedule", "get", "sq", "tick").want(t, exitOK)
	kairos(t, env, "", "schedule", "delete", "sq", "tick").want(t, exitOK)
	kairos(t, env, "", "schedule", "get", "sq", "tick").want(t, exitNotFound)
	kairos(t, env, "", "schedule", "set", "sq", "x", "b").want(t, exitUsage) // no --cron
	kairos(t, env, "", "schedule", "set", "sq", "x", "b", "--cron", "@every 1s", "--tz", "Nowhere/Land").want(t, exitUsage)
	kairos(t, env, "", "schedule", "set", "sq", "x", "b", "--cron", "0 0 30 2 *").want(t, exitUsage)
}
