package main

import (
	"strings"
	"testing"
)

// TestNamesCheckedLocally: every command that takes a namespace or queue
// refuses a name the server would refuse before sending anything: a usage
// error (exit 2) that names it, not the router's 404 "api not found".
func TestNamesCheckedLocally(t *testing.T) {
	_, env, _ := setup(t)
	queueCmds := [][]string{
		{"publish", "Q", "body"},
		{"consume", "Q"},
		{"consume", "ok,Q"},
		{"consume", "ok", "Q"},
		{"ack", "Q", "01J5Z8R6Q1X0V3M2B7K9C4D000"},
		{"peek", "Q"},
		{"peek", "Q", "01J5Z8R6Q1X0V3M2B7K9C4D000"},
		{"size", "ok", "Q"},
		{"destroy", "Q", "--yes"},
		{"deadletter", "peek", "Q"},
		{"deadletter", "size", "Q"},
		{"deadletter", "respawn", "Q"},
		{"deadletter", "delete", "Q"},
		{"deadletter", "list", "Q"},
		{"release", "Q", "01J5Z8R6Q1X0V3M2B7K9C4D000", "--receipt", "0123456789abcdef"},
		{"touch", "Q", "01J5Z8R6Q1X0V3M2B7K9C4D000", "--receipt", "0123456789abcdef"},
		{"cancel", "Q", "key"},
		{"pause", "Q"},
		{"resume", "ok", "Q"},
		{"queue-config", "Q"},
		{"webhook", "set", "Q", "--url", "http://127.0.0.1:1/x", "--secret", "s"},
		{"webhook", "get", "Q"},
		{"webhook", "delete", "Q"},
		{"token", "create", "-d", "x", "--queues", "ok,Q"},
		{"bench", "publish", "--queue", "Q", "--duration", "1ms"},
	}
	for _, bad := range []string{"bad/queue", "_reserved", "a b", "", strings.Repeat("q", 256)} {
		for _, argv := range queueCmds {
			if bad == "" && argv[0] == "token" {
				continue // an empty item of a comma-separated list is dropped
			}
			argv = append([]string(nil), argv...)
			for i, a := range argv {
				argv[i] = strings.ReplaceAll(a, "Q", bad)
			}
			r := kairos(t, env, "", argv...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "invalid queue name") {
				t.Errorf("kairos %q: exit %d, stderr %q; want %d and \"invalid queue name\"", argv, r.code, r.stderr, exitUsage)
			}
		}
	}
	nsCmds := [][]string{
		{"-n", "NS", "publish", "q", "body"},
		{"-n", "NS", "consume", "q"},
		{"-n", "NS", "size", "q"},
		{"-n", "NS", "queue-config", "q"},
		{"token", "create", "NS", "-d", "x"},
		{"token", "list", "NS"},
		{"token", "delete", "NS", "tok"},
		{"stats", "NS", "--once"},
		{"-n", "NS", "bench", "publish", "--duration", "1ms"},
	}
	for _, bad := range []string{"bad/ns", "a.b", strings.Repeat("n", 256)} {
		for _, argv := range nsCmds {
			argv = append([]string(nil), argv...)
			for i, a := range argv {
				argv[i] = strings.ReplaceAll(a, "NS", bad)
			}
			r := kairos(t, env, "", argv...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "invalid namespace") {
				t.Errorf("kairos %q: exit %d, stderr %q; want %d and \"invalid namespace\"", argv, r.code, r.stderr, exitUsage)
			}
		}
	}
	// Names the server takes still work, '_' inside and '-' included.
	kairos(t, env, "", "publish", "ok_queue-1", "x").want(t, exitOK)
	kairos(t, env, "", "consume", "ok_queue-1,other", "--wait", "0").want(t, exitOK)
}

// TestFlagHelpTellsTheTruth: flags left out are not sent, so the server's
// default applies: their help says so and shows no made-up default, and
// an explicit 0 that would silently become the default is refused.
func TestFlagHelpTellsTheTruth(t *testing.T) {
	_, env, _ := setup(t)
	for _, argv := range [][]string{{"publish", "--help"}, {"consume", "--help"}, {"release", "--help"}, {"touch", "--help"}, {"queue-config", "--help"}, {"webhook", "set", "--help"}} {
		r := kairos(t, env, "", argv...).want(t, exitOK)
		for _, lie := range []string{"(default 0s)", "unless configured) (default", "(default )"} {
			if strings.Contains(r.stdout, lie) {
				t.Errorf("kairos %q shows %q:\n%s", argv, lie, r.stdout)
			}
		}
	}
	if r := kairos(t, env, "", "publish", "--help"); !strings.Contains(r.stdout, "TTLSecond, 24h unless configured") {
		t.Errorf("publish --help does not say what a left-out --ttl gives:\n%s", r.stdout)
	}
	kairos(t, env, "", "consume", "q", "--ttr", "0").want(t, exitUsage)
	kairos(t, env, "", "touch", "q", "01J5Z8R6Q1X0V3M2B7K9C4D000", "--receipt", "0123456789abcdef", "--ttr", "0").want(t, exitUsage)
}
