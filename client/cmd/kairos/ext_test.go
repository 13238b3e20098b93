package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kairos-dev/kairos/client"
)

var receiptRE = regexp.MustCompile(`receipt=([0-9a-f]{16})`)

func TestExtensionCommands(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()

	// Priority, job key and cancel.
	kairos(t, env, "", "publish", "p", "low").want(t, exitOK)
	kairos(t, env, "", "publish", "p", "high", "--priority", "9").want(t, exitOK)
	if r := kairos(t, env, "", "peek", "p").want(t, exitOK); !strings.Contains(r.stdout, "priority=9") || !strings.HasSuffix(r.stdout, "\nhigh\n") {
		t.Fatalf("peek: %q", r.stdout)
	}
	first := strings.TrimSpace(kairos(t, env, "", "publish", "k", "once", "--job-key", "order-1").want(t, exitOK).stdout)
	second := strings.TrimSpace(kairos(t, env, "", "publish", "k", "twice", "--job-key", "order-1").want(t, exitOK).stdout)
	if first != second {
		t.Fatalf("--job-key published twice: %s, %s", first, second)
	}
	if r := kairos(t, env, "", "cancel", "k", "order-1").want(t, exitOK); strings.TrimSpace(r.stdout) != first {
		t.Fatalf("cancel: %q", r.stdout)
	}
	kairos(t, env, "", "cancel", "k", "order-1").want(t, exitNotFound)
	kairos(t, env, "", "publish", "p", "--priority", "300", "x").want(t, exitUsage)
	kairos(t, env, "", "publish", "p", "--file", "-", "--job-key", "k").want(t, exitUsage)
	kairos(t, env, "", "publish", "p", "x", "--due-at", "soon").want(t, exitUsage)
	kairos(t, env, "", "publish", "p", "x", "--due-at", "2030-01-01T00:00:00Z", "--delay", "1s").want(t, exitUsage)

	// due-at and millisecond delays.
	due := time.Now().Add(400 * time.Millisecond)
	id := strings.TrimSpace(kairos(t, env, "", "publish", "d", "at", "--due-at", due.UTC().Format(time.RFC3339Nano)).want(t, exitOK).stdout)
	if r := kairos(t, env, "", "peek", "d", id).want(t, exitOK); !strings.Contains(r.stdout, "state=delayed") {
		t.Fatalf("peek of a due-at job: %q", r.stdout)
	}
	kairos(t, env, "", "consume", "d", "--wait", "3s", "--ack").want(t, exitOK)
	if time.Now().Before(due) {
		t.Fatal("a --due-at job was consumed early")
	}

	// Receipts: release, touch.
	c.Publish(ctx, "r", []byte("work"), client.Tries(3))
	r := kairos(t, env, "", "consume", "r", "--ttr", "1m").want(t, exitOK)
	m := receiptRE.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("consume printed no receipt: %q", r.stdout)
	}
	jobID := strings.Fields(r.stdout)[0]
	if r := kairos(t, env, "", "--json", "touch", "r", jobID, "--receipt", m[1], "--ttr", "90s").want(t, exitOK); !strings.Contains(r.stdout, `"due_at_ms":`) {
		t.Fatalf("touch: %q", r.stdout)
	}
	kairos(t, env, "", "release", "r", jobID).want(t, exitUsage) // no receipt
	kairos(t, env, "", "release", "r", jobID, "--receipt", m[1], "--keep-try").want(t, exitOK)
	kairos(t, env, "", "release", "r", jobID, "--receipt", m[1]).want(t, exitFailure) // stale: 409
	r = kairos(t, env, "", "--json", "consume", "r").want(t, exitOK)
	var j struct {
		RemainTries int    `json:"remain_tries"`
		Receipt     string `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.RemainTries != 2 || j.Receipt == "" || j.Receipt == m[1] {
		t.Fatalf("after release --keep-try: %q", r.stdout)
	}

	// Pause and resume.
	kairos(t, env, "", "pause", "pz").want(t, exitOK)
	c.Publish(ctx, "pz", []byte("x"))
	kairos(t, env, "", "consume", "pz", "--wait", "0").want(t, exitNotFound)
	if r := kairos(t, env, "", "queue-config", "pz").want(t, exitOK); r.stdout != "backoff=none dead_ttl=0s paused=true shards=1\n" {
		t.Fatalf("queue-config: %q", r.stdout)
	}
	kairos(t, env, "", "resume", "pz").want(t, exitOK)
	kairos(t, env, "", "consume", "pz", "--wait", "2s", "--ack").want(t, exitOK)
	if r := kairos(t, env, "", "--json", "queue-config", "pz", "--backoff", "1s,5s", "--dead-ttl", "1h", "--paused").want(t, exitOK); r.stdout != `{"backoff":"1s,5s","dead_ttl_ms":3600000,"paused":true,"shards":1}`+"\n" {
		t.Fatalf("queue-config set: %q", r.stdout)
	}
	if r := kairos(t, env, "", "queue-config", "pz", "--shards", "4").want(t, exitOK); r.stdout != "backoff=1s,5s dead_ttl=1h0m0s paused=true shards=4\n" {
		t.Fatalf("queue-config --shards 4: %q", r.stdout)
	}
	kairos(t, env, "", "queue-config", "pz", "--shards", "65").want(t, exitUsage)
	kairos(t, env, "", "queue-config", "pz", "--backoff", "sometimes").want(t, exitUsage)

	// Dead-letter browsing, one-job respawn and delete, limit all.
	var dead []string
	for _, b := range []string{"a", "b", "c"} {
		id, _ := c.Publish(ctx, "dl", []byte(b))
		dead = append(dead, id)
		j, err := c.Consume(ctx, "dl", time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	r = kairos(t, env, "", "deadletter", "list", "dl", "--limit", "2").want(t, exitOK)
	if !strings.HasPrefix(r.stdout, dead[0]) || !strings.Contains(r.stdout, "dead_reason=") || !strings.HasSuffix(r.stdout, "next_offset=2\n") {
		t.Fatalf("deadletter list: %q", r.stdout)
	}
	r = kairos(t, env, "", "--json", "deadletter", "list", "dl", "--offset", "2").want(t, exitOK)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || lines[1] != `{"next_offset":-1}` {
		t.Fatalf("deadletter list --json: %q", r.stdout)
	}
	r = kairos(t, env, "", "deadletter", "list", "dl", "--newest", "--limit", "2").want(t, exitOK)
	if !strings.HasPrefix(r.stdout, dead[2]) || !strings.Contains(r.stdout, dead[1]) || strings.Contains(r.stdout, dead[0]) || !strings.HasSuffix(r.stdout, "next_offset=2 total=3\n") {
		t.Fatalf("deadletter list --newest: %q", r.stdout)
	}
	r = kairos(t, env, "", "--json", "deadletter", "list", "dl", "--newest", "--offset", "2", "--reason", "nacked").want(t, exitOK)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.Contains(lines[0], dead[0]) || lines[1] != `{"next_offset":-1,"total":3}` {
		t.Fatalf("deadletter list --newest --reason nacked --json: %q", r.stdout)
	}
	if r := kairos(t, env, "", "deadletter", "list", "dl", "--reason", "ttr_expired").want(t, exitOK); r.stdout != "next_offset=-1 total=3\n" {
		t.Fatalf("deadletter list --reason ttr_expired: %q", r.stdout)
	}
	kairos(t, env, "", "deadletter", "list", "dl", "--reason", "bored").want(t, exitUsage)
	kairos(t, env, "", "deadletter", "respawn", "dl", "--job", dead[0]).want(t, exitOK)
	kairos(t, env, "", "deadletter", "delete", "dl", "--job", dead[1]).want(t, exitOK)
	kairos(t, env, "", "deadletter", "delete", "dl", "--job", dead[1]).want(t, exitNotFound)
	kairos(t, env, "", "deadletter", "delete", "dl", "--job", dead[2], "--limit", "2").want(t, exitUsage)
	kairos(t, env, "", "deadletter", "delete", "dl", "--limit", "none").want(t, exitUsage)
	if r := kairos(t, env, "", "deadletter", "respawn", "dl", "--limit", "all").want(t, exitOK); r.stdout != "respawned 1\n" {
		t.Fatalf("respawn --limit all: %q", r.stdout)
	}
	if n, _ := c.QueueSize(ctx, "dl"); n != 2 {
		t.Fatalf("QueueSize: %d, want 2", n)
	}
}

// TestPublishTraceParent: publish --traceparent stores it with the job,
// and consume prints it (and its JSON carries both).
// TestGroupCommands (issue #32): publish --group, the group in a job's
// header, queue-config's limits and weights, queue-groups.
func TestGroupCommands(t *testing.T) {
	_, env, _ := setup(t)
	if r := kairos(t, env, "", "queue-config", "gq", "--max-in-flight", "3", "--group-max-in-flight", "1", "--group-weight", "vip=4", "--group-weight", "b=2").want(t, exitOK); r.stdout != "backoff=none dead_ttl=0s paused=false shards=1 max_in_flight=3 group_max_in_flight=1 group_weights=b=2,vip=4\n" {
		t.Fatalf("queue-config limits: %q", r.stdout)
	}
	if r := kairos(t, env, "", "--json", "queue-config", "gq").want(t, exitOK); r.stdout != `{"backoff":"none","dead_ttl_ms":0,"group_max_in_flight":1,"group_weights":{"b":2,"vip":4},"max_in_flight":3,"paused":false,"shards":1}`+"\n" {
		t.Fatalf("queue-config --json: %q", r.stdout)
	}
	kairos(t, env, "", "queue-config", "gq", "--group-weight", "vip").want(t, exitUsage)
	kairos(t, env, "", "queue-config", "gq", "--group-weight", "vip=1", "--clear-group-weights").want(t, exitUsage)
	kairos(t, env, "", "queue-config", "gq", "--max-in-flight", "-1").want(t, exitUsage)
	for _, g := range []string{"vip", "vip", "vip", "b", "b"} {
		kairos(t, env, "", "publish", "gq", "x", "--group", g).want(t, exitOK)
	}
	kairos(t, env, "", "publish", "gq", "x", "--group", "a b").want(t, exitUsage)
	// Which group the rotation serves first is the engine's; either way
	// the consumed job names it, and it is then at its limit of 1.
	r := kairos(t, env, "", "consume", "gq", "--wait", "0").want(t, exitOK)
	want := "in flight 1, max_in_flight 3, group_max_in_flight 1, 2 groups\n" +
		"GROUP  READY  IN FLIGHT  WEIGHT  LIMITED\n"
	switch {
	case strings.Contains(r.stdout, " group=vip\n"):
		want += "vip    2      1          4       true\n" +
			"b      2      0          2       false\n"
	case strings.Contains(r.stdout, " group=b\n"):
		want += "vip    3      0          4       false\n" +
			"b      1      1          2       true\n"
	default:
		t.Fatalf("consume: %q", r.stdout)
	}
	r = kairos(t, env, "", "queue-groups", "gq").want(t, exitOK)
	if r.stdout != want {
		t.Fatalf("queue-groups:\n%s\nwant\n%s", r.stdout, want)
	}
	kairos(t, env, "", "queue-groups", "gq", "--limit", "0").want(t, exitUsage)
	if r := kairos(t, env, "", "queue-config", "gq", "--clear-group-weights", "--max-in-flight", "0").want(t, exitOK); r.stdout != "backoff=none dead_ttl=0s paused=false shards=1 group_max_in_flight=1\n" {
		t.Fatalf("queue-config clear: %q", r.stdout)
	}
}

func TestPublishTraceParent(t *testing.T) {
	_, env, _ := setup(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	kairos(t, env, "", "publish", "tr", "x", "--traceparent", tp, "--tracestate", "k=v").want(t, exitOK)
	if r := kairos(t, env, "", "consume", "tr", "--wait", "0").want(t, exitOK); !strings.Contains(r.stdout, " traceparent="+tp) {
		t.Fatalf("consume: %q", r.stdout)
	}
	kairos(t, env, "", "publish", "tr", "y", "--traceparent", tp).want(t, exitOK)
	r := kairos(t, env, "", "consume", "tr", "--wait", "0", "--json").want(t, exitOK)
	var j struct{ TraceParent string }
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.TraceParent != tp {
		t.Fatalf("consume --json: %q %v", r.stdout, err)
	}
	kairos(t, env, "", "publish", "tr", "x", "--traceparent", "nope").want(t, exitUsage)
	kairos(t, env, "", "publish", "tr", "x", "--tracestate", "k=v").want(t, exitUsage)
}

// TestWhyCommands: release --error shows in peek's attempts and in the
// dead letter's list, which --error filters; respawn --ids and delete
// --matching act on several dead jobs.
func TestWhyCommands(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	var ids []string
	for i, text := range []string{"db timeout after 5s", "card declined", "db timeout after 9s"} {
		id, err := c.Publish(ctx, "w", []byte(fmt.Sprint("job ", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		r := kairos(t, env, "", "consume", "w", "--ttr", "1m").want(t, exitOK)
		m := receiptRE.FindStringSubmatch(r.stdout)
		if m == nil || strings.Fields(r.stdout)[0] != id {
			t.Fatalf("consume: %q", r.stdout)
		}
		kairos(t, env, "", "release", "w", id, "--receipt", m[1], "--error", text+"\nat line 2").want(t, exitOK)
	}
	r := kairos(t, env, "", "peek", "w", ids[1]).want(t, exitOK)
	if !strings.Contains(r.stdout, "state=dead") || !regexp.MustCompile(`\nattempt 1 nacked start=\S+ duration=\S+\n    card declined\n    at line 2\n`).MatchString(r.stdout) {
		t.Fatalf("peek: %q", r.stdout)
	}
	r = kairos(t, env, "", "deadletter", "list", "w", "--newest", "--error", "db timeout").want(t, exitOK)
	if !strings.Contains(r.stdout, ids[2]) || !strings.Contains(r.stdout, ids[0]) || strings.Contains(r.stdout, ids[1]) ||
		strings.Index(r.stdout, ids[2]) > strings.Index(r.stdout, ids[0]) || !strings.Contains(r.stdout, `last_error="db timeout after 9s"`) {
		t.Fatalf("list --newest --error: %q", r.stdout)
	}
	kairos(t, env, "", "deadletter", "delete", "w", "--error", "x").want(t, exitUsage) // --error needs --matching
	kairos(t, env, "", "deadletter", "respawn", "w", "--ids", ids[1]+",nope", "--matching").want(t, exitUsage)
	if r := kairos(t, env, "", "deadletter", "respawn", "w", "--ids", ids[1]+",01ZZZZZZZZZZZZZZZZZZZZZZZZ").want(t, exitOK); r.stdout != "respawned 1\nnot dead: 01ZZZZZZZZZZZZZZZZZZZZZZZZ\n" {
		t.Fatalf("respawn --ids: %q", r.stdout)
	}
	if r := kairos(t, env, "", "deadletter", "delete", "w", "--matching", "--error", "db timeout").want(t, exitOK); r.stdout != "deleted 2\n" {
		t.Fatalf("delete --matching: %q", r.stdout)
	}
	if n, err := c.DeadLetterSize(ctx, "w"); err != nil || n != 0 {
		t.Fatalf("dead letter left: %d %v", n, err)
	}
	if n, err := c.QueueSize(ctx, "w"); err != nil || n != 1 {
		t.Fatalf("ready after respawn: %d %v", n, err)
	}
}
