package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestBench(t *testing.T) {
	_, env, _ := setup(t)
	t.Setenv(cliChildEnv, "1") // --ceiling re-executes this binary as the CLI
	r := kairos(t, env, "", "bench", "publish", "consume", "-c", "4", "-d", "300ms", "--jobs", "200", "--ceiling", "--runs", "2").want(t, exitOK)
	for _, want := range []string{"publish", "consume_ack", "ceiling/s", "share"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = kairos(t, env, "", "bench", "publish", "-c", "2", "-d", "200ms", "--json").want(t, exitOK)
	var out struct {
		Result struct {
			Scenario string  `json:"scenario"`
			Ops      int64   `json:"ops"`
			PerSec   float64 `json:"per_sec"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Result.Scenario != "publish" || out.Result.Ops == 0 {
		t.Fatalf("json %q: %v", r.stdout, err)
	}
	kairos(t, env, "", "bench", "nosuch").want(t, exitUsage)
}

// TestBenchRedis meters Redis's CPU with --redis, and waits out a snapshot
// (stretched by rdb-key-save-delay) before the measured phase.
func TestBenchRedis(t *testing.T) {
	srv, env, _ := setup(t)
	rc := srv.Redis.Client()
	defer rc.Close()
	ctx := context.Background()
	if err := rc.ConfigSet(ctx, "rdb-key-save-delay", "100000").Err(); err != nil { // µs per key: about 0.5 s
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := rc.Set(ctx, fmt.Sprint("bench-test-", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := kairos(t, env, "", "bench", "publish", "-c", "2", "-d", "200ms", "--redis", srv.Redis.Addr, "--json").want(t, exitOK)
	if !strings.Contains(r.stderr, "for Redis to end a snapshot or AOF rewrite") {
		t.Fatalf("no wait for the snapshot reported; stderr:\n%s", r.stderr)
	}
	var out struct {
		Result struct {
			RedisCPUUS float64 `json:"redis_cpu_us_per_job"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Result.RedisCPUUS <= 0 {
		t.Fatalf("no Redis CPU per job in %q: %v", r.stdout, err)
	}
}
