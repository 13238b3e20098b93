package main

import (
	"strings"
	"testing"
)

func TestWebhookCommands(t *testing.T) {
	_, env, _ := setup(t)
	kairos(t, env, "", "webhook", "set", "emails", "--url", "http://127.0.0.1:1/hook").want(t, exitUsage)
	r := kairos(t, env, "", "webhook", "set", "emails", "--url", "http://127.0.0.1:1/hook", "--secret", "s3cret", "--concurrency", "2").want(t, exitOK)
	if !strings.Contains(r.stdout, "http://127.0.0.1:1/hook") || !strings.Contains(r.stdout, "emails") {
		t.Fatalf("set output:\n%s", r.stdout)
	}
	if r = kairos(t, env, "", "webhook", "list", "--json").want(t, exitOK); !strings.Contains(r.stdout, `"concurrency": 2`) && !strings.Contains(r.stdout, `"concurrency":2`) {
		t.Fatalf("list output:\n%s", r.stdout)
	}
	kairos(t, env, "", "webhook", "get", "emails").want(t, exitOK)
	kairos(t, env, "", "webhook", "delete", "emails").want(t, exitOK)
	kairos(t, env, "", "webhook", "get", "emails").want(t, exitNotFound)
}
