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
	// Explicit zeros and out-of-range settings are usage errors, not the
	// server's defaults; a short --ttr alone gets a timeout under it.
	for _, bad := range [][]string{{"--concurrency", "0"}, {"--concurrency", "65"}, {"--ttr", "0"}, {"--ttr", "25h"}, {"--timeout", "0"}, {"--ttr", "5s", "--timeout", "5s"}} {
		kairos(t, env, "", append([]string{"webhook", "set", "emails", "--url", "http://127.0.0.1:1/hook", "--secret", "s"}, bad...)...).want(t, exitUsage)
	}
	if r = kairos(t, env, "", "webhook", "set", "emails", "--url", "http://127.0.0.1:1/hook", "--secret", "s", "--ttr", "5s", "--json").want(t, exitOK); !strings.Contains(r.stdout, "4999") {
		t.Fatalf("set --ttr 5s: want the server's timeout just under the TTR:\n%s", r.stdout)
	}
	kairos(t, env, "", "webhook", "delete", "emails").want(t, exitOK)
	kairos(t, env, "", "webhook", "get", "emails").want(t, exitNotFound)
}
