package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kairos-dev/kairos/client/bench"
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

// TestBenchInterleave: with --interleave the scenarios' runs alternate,
// and each scenario still gets its row, in the order asked, with --runs
// runs behind its min-max.
func TestBenchInterleave(t *testing.T) {
	_, env, _ := setup(t)
	r := kairos(t, env, "", "bench", "publish", "publish-go", "-c", "2", "-d", "150ms", "--runs", "2", "--interleave", "--json").want(t, exitOK)
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var got []string
	for dec.More() {
		var out struct {
			Result struct {
				Scenario string `json:"scenario"`
				Ops      int64  `json:"ops"`
			} `json:"result"`
			Runs int `json:"runs"`
		}
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("json %q: %v", r.stdout, err)
		}
		if out.Result.Ops == 0 || out.Runs != 2 {
			t.Fatalf("row %+v: want jobs and 2 runs", out)
		}
		got = append(got, out.Result.Scenario)
	}
	if strings.Join(got, " ") != "publish publish_go" {
		t.Fatalf("rows %v, want publish then publish_go", got)
	}
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

// TestBenchShards: --shards K sets each bench queue's shards through the
// admin API before publishing to it. A server without hot-queue shards
// refuses the key (400): the bench must then fail and say so, never
// measure an unsharded queue as a sharded one.
func TestBenchShards(t *testing.T) {
	srv, env, _ := setup(t)
	req, err := http.NewRequest(http.MethodPut, "http://"+srv.Admin+"/queue/cli/shards-probe/config", strings.NewReader(`{"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var cfg struct {
		Shards int `json:"shards"`
	}
	supported := resp.StatusCode == http.StatusOK && json.Unmarshal(body, &cfg) == nil && cfg.Shards == 2

	t.Logf("PUT {\"shards\":2}: %d %s", resp.StatusCode, bytes.TrimSpace(body))
	r := kairos(t, env, "", "bench", "publish", "consume", "-c", "2", "-d", "200ms", "--jobs", "50", "--shards", "2")
	if supported {
		r.want(t, exitOK)
	} else {
		r.want(t, exitFailure)
		if !strings.Contains(r.stderr, "--shards") || !strings.Contains(r.stderr, "400") || !strings.Contains(r.stderr, "shards") {
			t.Fatalf("a server that refuses shards (%d %s): stderr %q does not say so", resp.StatusCode, body, r.stderr)
		}
		if strings.Contains(r.stdout, "publish") {
			t.Fatalf("figures printed for a queue whose shards were not set:\n%s", r.stdout)
		}
	}
	kairos(t, env, "", "bench", "publish", "--shards", "-1").want(t, exitUsage)
}

// TestPrintMasters: the table of Redis CPU per job by cluster master.
func TestPrintMasters(t *testing.T) {
	rows := []benchRow{
		{median: bench.Result{Scenario: "publish", RedisCPUUS: 12, RedisReplicasCPUUS: 5.5, RedisMasters: []bench.MasterCPU{
			{Addr: "127.0.0.1:7001", Slots: 5461, CPUUS: 9, Share: 0.75}, {Addr: "127.0.0.1:7002", Slots: 5462, CPUUS: 3, Share: 0.25}}}},
		{median: bench.Result{Scenario: "consume_ack", RedisCPUUS: 20}},
	}
	var b strings.Builder
	printMasters(&b, rows)
	out := b.String()
	for _, want := range []string{"by cluster master", "127.0.0.1:7001 (5461 slots)", "127.0.0.1:7002 (5462 slots)", "9.0 (75%)", "3.0 (25%)", "5.5", "12.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "consume_ack") {
		t.Errorf("a row without a split printed:\n%s", out)
	}
	b.Reset()
	printMasters(&b, rows[1:])
	if b.Len() != 0 {
		t.Errorf("a standalone Redis printed a split:\n%s", b.String())
	}
}

// TestSetShardsAnswers: --shards trusts only an answer that carries the
// shards it asked for. An admin API that tolerates unknown keys and
// answers 200 without "shards" (a server that ignored it) fails the bench,
// as does one that answers another count; the request is the documented
// PUT with the admin account.
func TestSetShardsAnswers(t *testing.T) {
	var answer string
	var got struct {
		method, path, pool, body, user string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		user, _, _ := r.BasicAuth()
		got.method, got.path, got.pool, got.body, got.user = r.Method, r.URL.EscapedPath(), r.URL.Query().Get("pool"), string(b), user
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	c := &cli{adminAddr: srv.URL, adminUser: "admin", adminPass: "pw"}
	set := c.setShards("ns", "p1", 3)
	ctx := context.Background()

	answer = `{"backoff":"none","dead_ttl_ms":0,"paused":false}`
	if err := set(ctx, "q/1"); err == nil || !strings.Contains(err.Error(), "did not set the shards") {
		t.Fatalf("an answer without shards: %v", err)
	}
	if got.method != http.MethodPut || got.path != "/queue/ns/q%2F1/config" || got.pool != "p1" || got.body != `{"shards":3}` || got.user != "admin" {
		t.Fatalf("request %+v", got)
	}
	answer = `{"backoff":"none","shards":2}`
	if err := set(ctx, "q"); err == nil {
		t.Fatal("an answer with another shard count was taken")
	}
	answer = "{\n  \"backoff\": \"none\",\n  \"shards\": 3\n}"
	if err := set(ctx, "q"); err != nil {
		t.Fatalf("an answer with shards 3: %v", err)
	}
}
