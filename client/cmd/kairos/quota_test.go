package main

import (
	"strings"
	"testing"
)

// TestQuotaCommands: kairos quota set, get, list and delete against a real
// server, and a publish refused by the quota exits with status 6.
func TestQuotaCommands(t *testing.T) {
	_, env, _ := setup(t)
	kairos(t, env, "", "quota", "set").want(t, exitUsage)                       // no limit given
	kairos(t, env, "", "quota", "set", "--max-jobs", "-1").want(t, exitUsage)   // negative
	kairos(t, env, "", "quota", "set", "--max-jobs", "many").want(t, exitUsage) // not a number
	kairos(t, env, "", "quota", "get", "bad name!").want(t, exitUsage)          // bad namespace
	r := kairos(t, env, "", "quota", "set", "--max-jobs", "1").want(t, exitOK)  // --namespace: cli
	if !strings.Contains(r.stdout, "cli") || !strings.Contains(r.stdout, "own") {
		t.Fatalf("set output:\n%s", r.stdout)
	}
	// The quota reaches the publishes within the engine's refresh: publish
	// until one is refused.
	var refused result
	for i := 0; i < 50; i++ {
		refused = kairos(t, env, "", "publish", "q", "hello")
		if refused.code != exitOK {
			break
		}
	}
	refused.want(t, exitQuota)
	if !strings.Contains(refused.stderr, "namespace quota exceeded: max_jobs 1") {
		t.Fatalf("refused publish: %q", refused.stderr)
	}
	r = kairos(t, env, "", "--json", "quota", "get").want(t, exitOK)
	if !strings.Contains(r.stdout, `"max_jobs":1`) && !strings.Contains(r.stdout, `"max_jobs": 1`) {
		t.Fatalf("get --json:\n%s", r.stdout)
	}
	if r = kairos(t, env, "", "quota", "list").want(t, exitOK); !strings.Contains(r.stdout, "cli") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	kairos(t, env, "", "quota", "delete").want(t, exitOK)
	if r = kairos(t, env, "", "quota", "get", "cli").want(t, exitOK); !strings.Contains(r.stdout, "default") {
		t.Fatalf("get after delete:\n%s", r.stdout)
	}
}
