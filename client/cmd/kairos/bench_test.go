package main

import (
	"encoding/json"
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
