package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kairos-dev/kairos/client"
	"github.com/kairos-dev/kairos/client/internal/kairostest"
)

// cliChildEnv, set in the environment, makes the test binary run the CLI's
// main instead of the tests: commands that re-execute their own binary
// (bench --ceiling starts "kairos bench ceiling-server") then start the CLI,
// not another run of the test suite.
const cliChildEnv = "KAIROS_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(cliChildEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for a reader and a writer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is the outcome of one invocation.
type result struct {
	code           int
	stdout, stderr string
}

// kairos runs the CLI in-process with env as its whole environment.
func kairos(t *testing.T, env map[string]string, stdin string, argv ...string) result {
	t.Helper()
	return kairosCtx(context.Background(), t, env, stdin, argv...)
}

func kairosCtx(ctx context.Context, t *testing.T, env map[string]string, stdin string, argv ...string) result {
	t.Helper()
	var out, errOut syncBuffer
	code := run(ctx, argv, stdio{in: strings.NewReader(stdin), out: &out, err: &errOut},
		func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// setup starts a server and returns the environment of a namespace with
// its token, and a client for checks.
func setup(t *testing.T) (*kairostest.Server, map[string]string, *client.Client) {
	t.Helper()
	srv := kairostest.Start(t)
	tok := srv.Token(t, "cli", "")
	env := map[string]string{
		"KAIROS_ADDR": srv.API, "KAIROS_ADMIN_ADDR": srv.Admin,
		"KAIROS_NAMESPACE": "cli", "KAIROS_TOKEN": tok,
	}
	c, err := client.New(srv.API, client.WithNamespace("cli"), client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return srv, env, c
}

func TestHelpOnEveryCommand(t *testing.T) {
	var paths [][]string
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range cmd.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk((&cli{}).rootCmd(), nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, p := range paths {
		t.Run(strings.Join(append([]string{"kairos"}, p...), " "), func(t *testing.T) {
			r := kairos(t, nil, "", append(p, "--help")...).want(t, exitOK)
			if !strings.Contains(r.stdout, "Usage:") {
				t.Fatalf("--help printed no usage: %q", r.stdout)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	env := map[string]string{"KAIROS_NAMESPACE": "ns", "KAIROS_ADDR": "127.0.0.1:1"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", env, nil, "missing command"},
		{"unknown command", env, []string{"bogus"}, `unknown command "bogus"`},
		{"unknown subcommand", env, []string{"deadletter", "bogus"}, `unknown command "bogus"`},
		{"missing subcommand", env, []string{"token"}, "missing subcommand"},
		{"unknown flag", env, []string{"publish", "q", "x", "--bogus"}, "unknown flag"},
		{"bad duration", env, []string{"publish", "q", "x", "--delay", "soon"}, "invalid duration"},
		{"negative duration", env, []string{"consume", "q", "--ttr", "-1s"}, "negative duration"},
		{"too many args", env, []string{"publish", "q", "a", "b"}, "accepts between 1 and 2 arg(s)"},
		{"no queue", env, []string{"consume"}, "requires at least 1 arg(s)"},
		{"no namespace", nil, []string{"publish", "q", "x"}, "no namespace"},
		{"bad attr", env, []string{"publish", "q", "x", "--attr", "novalue"}, "want key=value"},
		{"tries 0", env, []string{"publish", "q", "x", "--tries", "0"}, "--tries must be 1..65535"},
		{"count 0", env, []string{"consume", "q", "--count", "0"}, "--count must be 1..100"},
		{"body twice", env, []string{"publish", "q", "x", "--body-file", "f"}, "not both"},
		{"file and body", env, []string{"publish", "q", "x", "--file", "f"}, "give no BODY"},
		{"missing file", env, []string{"publish", "q", "--file", "/nonexistent/jobs.jsonl"}, "no such file"},
		{"destroy without --yes", env, []string{"destroy", "q"}, "--yes"},
		{"token without description", env, []string{"token", "create"}, "--description is required"},
		{"bad address", map[string]string{"KAIROS_NAMESPACE": "ns", "KAIROS_ADDR": "ftp://x"}, []string{"peek", "q"}, "scheme must be http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := kairos(t, tc.env, "", tc.args...).want(t, exitUsage)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q, want it to mention %q", r.stderr, tc.want)
			}
		})
	}
	// --json errors are JSON on stderr.
	r := kairos(t, env, "", "--json", "publish", "q", "x", "--tries", "0").want(t, exitUsage)
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stderr), &out); err != nil || out["exit_code"] != float64(exitUsage) {
		t.Fatalf("--json error %q: %v", r.stderr, err)
	}
}

func TestPublishConsumeAck(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()

	id := strings.TrimSpace(kairos(t, env, "", "publish", "q", "from-arg", "--ttl", "1h", "--tries", "2", "--attr", "trace=abc").want(t, exitOK).stdout)
	job, err := c.PeekJob(ctx, "q", id)
	if err != nil || string(job.Body) != "from-arg" || job.RemainTries != 2 || job.Attributes["trace"] != "abc" || job.TTL > time.Hour {
		t.Fatalf("published job: %+v, %v", job, err)
	}
	r := kairos(t, env, "line1\nline2\n", "--json", "publish", "q").want(t, exitOK)
	var pub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &pub); err != nil || pub.JobID == "" {
		t.Fatalf("--json publish: %q, %v", r.stdout, err)
	}
	if job, err := c.PeekJob(ctx, "q", pub.JobID); err != nil || string(job.Body) != "line1\nline2\n" {
		t.Fatalf("body from stdin: %+v, %v", job, err)
	}
	bodyFile := filepath.Join(t.TempDir(), "body")
	os.WriteFile(bodyFile, []byte{0, 1, 2, 0xff}, 0o600)
	binID := strings.TrimSpace(kairos(t, env, "", "publish", "q", "--body-file", bodyFile).want(t, exitOK).stdout)

	// consume prints a header line and the body.
	r = kairos(t, env, "", "consume", "q", "--ttr", "60").want(t, exitOK)
	if !strings.HasPrefix(r.stdout, id+" cli/q remain_tries=1 ttl=") || !strings.Contains(r.stdout, `trace="abc"`) ||
		!strings.HasSuffix(r.stdout, "\nfrom-arg\n") {
		t.Fatalf("consume output: %q", r.stdout)
	}
	// --json: the API's job format, one per line; --ack deletes.
	r = kairos(t, env, "", "--json", "consume", "q", "--count", "5", "--ack").want(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("consume --count 5 printed %d jobs: %q", len(lines), r.stdout)
	}
	var got struct {
		JobID string `json:"job_id"`
		Data  string `json:"data"`
	}
	json.Unmarshal([]byte(lines[1]), &got)
	if b, _ := base64.StdEncoding.DecodeString(got.Data); got.JobID != binID || !bytes.Equal(b, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("binary job: %q", lines[1])
	}
	if _, err := c.PeekJob(ctx, "q", binID); err == nil {
		t.Fatal("consume --ack did not ACK")
	}
	// The first job was consumed without --ack: ack it by hand.
	kairos(t, env, "", "ack", "q", id).want(t, exitOK)
	if _, err := c.PeekJob(ctx, "q", id); err == nil {
		t.Fatal("ack did not delete the job")
	}
	// Nothing left: exit status 3.
	r = kairos(t, env, "", "consume", "q", "--wait", "0").want(t, exitNotFound)
	if !strings.Contains(r.stderr, "no job available") {
		t.Fatalf("stderr: %q", r.stderr)
	}
	// Flags win over the environment.
	bad := map[string]string{"KAIROS_ADDR": "127.0.0.1:1", "KAIROS_NAMESPACE": "other", "KAIROS_TOKEN": "bad"}
	kairos(t, bad, "", "--addr", env["KAIROS_ADDR"], "-n", "cli", "--token", env["KAIROS_TOKEN"], "publish", "q", "x").want(t, exitOK)
}

func TestConsumeSeveralQueuesAndFollow(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	for _, q := range []string{"low", "high"} {
		if _, err := c.Publish(ctx, q, []byte(q)); err != nil {
			t.Fatal(err)
		}
	}
	r := kairos(t, env, "", "consume", "high,low", "--ack", "--wait", "0").want(t, exitOK)
	if !strings.HasSuffix(r.stdout, "\nhigh\n") {
		t.Fatalf("priority: %q", r.stdout)
	}
	r = kairos(t, env, "", "consume", "high", "low", "--ack", "--wait", "0").want(t, exitOK)
	if !strings.HasSuffix(r.stdout, "\nlow\n") {
		t.Fatalf("second queue: %q", r.stdout)
	}

	// --follow prints jobs as they come until interrupted.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(fctx, []string{"--json", "consume", "f", "--follow", "--ack", "--wait", "1s"},
			stdio{in: strings.NewReader(""), out: &out, err: &errOut}, func(k string) string { return env[k] })
	}()
	for i := range 3 {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Publish(ctx, "f", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\n") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("--follow printed %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("--follow exit status %d; stderr %q", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("--follow did not stop when interrupted")
	}
	if n, _ := c.QueueSize(ctx, "f"); n != 0 {
		t.Fatalf("%d jobs left", n)
	}
}

func TestPeekSizeDestroyDeadletter(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	kairos(t, env, "", "peek", "q").want(t, exitNotFound)
	kairos(t, env, "", "peek", "q", "01J00000000000000000000000").want(t, exitNotFound)
	id, _ := c.Publish(ctx, "q", []byte("dead soon"), client.Tries(1))
	if r := kairos(t, env, "", "peek", "q").want(t, exitOK); !strings.HasPrefix(r.stdout, id) {
		t.Fatalf("peek: %q", r.stdout)
	}
	if r := kairos(t, env, "", "peek", "q", id).want(t, exitOK); !strings.HasSuffix(r.stdout, "\ndead soon\n") {
		t.Fatalf("peek job: %q", r.stdout)
	}
	noToken := map[string]string{"KAIROS_ADDR": env["KAIROS_ADDR"], "KAIROS_NAMESPACE": "cli"}
	if r := kairos(t, noToken, "", "size", "q", "empty").want(t, exitOK); r.stdout != "cli/q ready=1 deadletter=0\ncli/empty ready=0 deadletter=0\n" {
		t.Fatalf("size: %q", r.stdout)
	}
	if _, err := c.Consume(ctx, "q", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := kairos(t, noToken, "", "deadletter", "size", "q").want(t, exitOK)
		if r.stdout == "1\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deadletter size: %q", r.stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := kairos(t, env, "", "--json", "deadletter", "peek", "q").want(t, exitOK); r.stdout !=
		`{"deadletter_head":"`+id+`","deadletter_size":1,"namespace":"cli","queue":"q"}`+"\n" {
		t.Fatalf("deadletter peek: %q", r.stdout)
	}
	if r := kairos(t, env, "", "dlq", "respawn", "q", "--limit", "5", "--ttl", "1h").want(t, exitOK); r.stdout != "respawned 1\n" {
		t.Fatalf("respawn: %q", r.stdout)
	}
	if _, err := c.Consume(ctx, "q", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	kairos(t, env, "", "deadletter", "delete", "q", "--limit", "10").want(t, exitOK)
	if r := kairos(t, env, "", "deadletter", "peek", "q").want(t, exitOK); r.stdout != "size=0 head=\n" {
		t.Fatalf("deadletter peek after delete: %q", r.stdout)
	}
	c.Publish(ctx, "q", []byte("x"), client.Delay(time.Hour))
	kairos(t, env, "", "destroy", "q", "--yes").want(t, exitOK)
	if r := kairos(t, env, "", "--json", "size", "q").want(t, exitOK); r.stdout != `{"deadletter_size":0,"namespace":"cli","queue":"q","size":0}`+"\n" {
		t.Fatalf("size --json: %q", r.stdout)
	}
}

func TestExitCodes(t *testing.T) {
	srv, env, _ := setup(t)
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range env {
			m[a] = b
		}
		m[k] = v
		return m
	}
	kairos(t, with("KAIROS_TOKEN", "wrong"), "", "publish", "q", "x").want(t, exitAuth)
	scoped := srv.Token(t, "cli", "queues=mine")
	kairos(t, with("KAIROS_TOKEN", scoped), "", "publish", "other", "x").want(t, exitAuth)
	kairos(t, with("KAIROS_ADDR", "127.0.0.1:1"), "", "--request-timeout", "2s", "publish", "q", "x").want(t, exitFailure)
	r := kairos(t, env, "", "--json", "publish", "q", "x", "--ttl", "1s", "--delay", "1m").want(t, exitUsage)
	var e struct {
		Status    int    `json:"status"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e.Status != 400 || e.Message != "ttl is shorter than delay" || e.RequestID == "" {
		t.Fatalf("--json error: %q", r.stderr)
	}
	kairos(t, env, "", "token", "create", "--description", "x").want(t, exitOK)
	r = kairos(t, env, "", "limits").want(t, exitOK)
	admin, _ := client.NewAdmin(srv.Admin)
	if err := admin.SetLimit(context.Background(), "cli", env["KAIROS_TOKEN"], client.Limit{Write: 1, Interval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if r := kairos(t, env, "", "limits").want(t, exitOK); !strings.Contains(r.stdout, env["KAIROS_TOKEN"]) {
		t.Fatalf("limits: %q", r.stdout)
	}
	deadline := time.Now().Add(5 * time.Second)
	for kairos(t, env, "", "publish", "q", "x").code != exitRateLimited {
		if time.Now().After(deadline) {
			t.Fatal("never rate limited")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTokenPoolsStatsVersion(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	tok := strings.TrimSpace(kairos(t, env, "", "token", "create", "team", "-d", "workers", "--queues", "a,b", "--roles", "consume").want(t, exitOK).stdout)
	if len(tok) != 26 {
		t.Fatalf("token create: %q", tok)
	}
	r := kairos(t, env, "", "token", "list", "team").want(t, exitOK)
	if !strings.Contains(r.stdout, "TOKEN") || !strings.Contains(r.stdout, tok+"  workers") {
		t.Fatalf("token list: %q", r.stdout)
	}
	r = kairos(t, env, "", "--json", "token", "list", "team", "--pool", "default").want(t, exitOK)
	if !strings.Contains(r.stdout, `"default:`+tok+`":"workers"`) {
		t.Fatalf("token list --json --pool: %q", r.stdout)
	}
	kairos(t, env, "", "token", "delete", "team", tok).want(t, exitOK)
	if r := kairos(t, env, "", "--json", "token", "list", "team").want(t, exitOK); r.stdout != `{"namespace":"team","tokens":{}}`+"\n" {
		t.Fatalf("token list after delete: %q", r.stdout)
	}
	// The namespace comes from -n when not given.
	tok = strings.TrimSpace(kairos(t, env, "", "token", "create", "-d", "mine", "--secret", "my-own-secret-token-0001").want(t, exitOK).stdout)
	if tok != "my-own-secret-token-0001" {
		t.Fatalf("token create --secret: %q", tok)
	}
	kairos(t, env, "", "token", "delete", tok).want(t, exitOK)

	if r := kairos(t, env, "", "pools").want(t, exitOK); r.stdout != "default\n" {
		t.Fatalf("pools: %q", r.stdout)
	}
	if r := kairos(t, env, "", "--json", "pools").want(t, exitOK); r.stdout != `["default"]`+"\n" {
		t.Fatalf("pools --json: %q", r.stdout)
	}

	for range 3 {
		c.Publish(ctx, "a", []byte("x"))
	}
	c.Publish(ctx, "b", []byte("x"))
	r = kairos(t, env, "", "stats").want(t, exitOK) // not a terminal: printed once
	for _, want := range []string{"NAMESPACE", "READY", "DEADLETTER", "cli", " 3 ", "total"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("stats: %q lacks %q", r.stdout, want)
		}
	}
	r = kairos(t, env, "", "--json", "stats", "cli", "--once").want(t, exitOK)
	var rows []queueStat
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 2 || rows[0] != (queueStat{Namespace: "cli", Queue: "a", Size: 3}) {
		t.Fatalf("stats --json: %q, %v", r.stdout, err)
	}
	// --watch refreshes until interrupted.
	wctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	r = kairosCtx(wctx, t, env, "", "--json", "stats", "--watch", "--interval", "200ms").want(t, exitOK)
	if n := strings.Count(r.stdout, "\n"); n < 2 {
		t.Fatalf("stats --watch refreshed %d times: %q", n, r.stdout)
	}

	if r := kairos(t, env, "", "version").want(t, exitOK); !strings.Contains(r.stdout, "kairos dev") || !strings.Contains(r.stdout, "server: ") {
		t.Fatalf("version: %q", r.stdout)
	}
}

// TestBulkPublish100k publishes a generated 100,000-line file in one
// command and checks the count, the progress output and some bodies.
func TestBulkPublish100k(t *testing.T) {
	_, env, c := setup(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	const lines = 100000
	blank, plain := 0, 0
	for i := range lines {
		switch {
		case i%10007 == 5:
			w.WriteString("  \n") // skipped
			blank++
		case i%9973 == 7:
			fmt.Fprintf(w, "plain text %d <&>\n", i) // not JSON: published alone, as is
			plain++
		default:
			fmt.Fprintf(w, "{\"n\": %d, \"s\": \"<%d>\"}\r\n", i, i)
		}
	}
	w.WriteString(`"last line without newline"`)
	w.Flush()
	f.Close()
	want := lines + 1 - blank

	start := time.Now()
	r := kairos(t, env, "", "publish", "bulk", "--file", path, "--ttl", "1h", "--concurrency", "8", "--progress-every", "300ms").want(t, exitOK)
	took := time.Since(start)
	t.Logf("published %d jobs in %v; stdout %q; %d progress lines", want, took, r.stdout, strings.Count(r.stderr, "\n"))
	if took > 50*time.Second {
		t.Fatalf("bulk publish of 100k lines took %v", took)
	}
	if !strings.HasPrefix(r.stdout, fmt.Sprintf("published %d jobs from %d lines (%d blank) to bulk", want, lines+1, blank)) {
		t.Fatalf("summary: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "100.0% published") || !strings.Contains(r.stderr, "jobs/s") {
		t.Fatalf("progress: %q", r.stderr)
	}
	if n, err := c.QueueSize(ctx, "bulk"); err != nil || n != want {
		t.Fatalf("QueueSize: %d, %v; want %d", n, err, want)
	}
	jobs, err := c.BatchConsume(ctx, []string{"bulk"}, 100, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		var v struct{ N int }
		if err := json.Unmarshal(j.Body, &v); err == nil {
			if wantBody := fmt.Sprintf("{\"n\": %d, \"s\": \"<%d>\"}", v.N, v.N); string(j.Body) != wantBody {
				t.Fatalf("body %q, want %q (byte for byte, without the \\r\\n)", j.Body, wantBody)
			}
		} else if !strings.HasPrefix(string(j.Body), "plain text ") {
			t.Fatalf("unexpected body %q", j.Body)
		}
	}
}

func TestBulkPublishStopsAtFirstFailure(t *testing.T) {
	srv, env, c := setup(t)
	var in strings.Builder
	for i := range 200 {
		fmt.Fprintf(&in, "%d\n", i)
	}
	// A token limited to another queue: the first request fails, nothing
	// more is sent.
	scoped := map[string]string{}
	for k, v := range env {
		scoped[k] = v
	}
	scoped["KAIROS_TOKEN"] = srv.Token(t, "cli", "queues=elsewhere")
	r := kairos(t, scoped, in.String(), "publish", "q", "--file", "-", "--concurrency", "1", "--no-progress").want(t, exitAuth)
	if !strings.Contains(r.stderr, "lines 1-64 not published") || !strings.Contains(r.stderr, "0 jobs published before stopping") {
		t.Fatalf("stderr: %q", r.stderr)
	}
	if r.stdout != "" {
		t.Fatalf("stdout: %q", r.stdout)
	}
	// A line over 1 MiB is refused with its number; the lines before it
	// were sent.
	long := "1\n2\n\"" + strings.Repeat("x", maxLine) + "\"\n4\n"
	r = kairos(t, env, long, "publish", "big", "--file", "-", "--no-progress").want(t, exitUsage)
	if !strings.Contains(r.stderr, "line 3 is longer than") {
		t.Fatalf("stderr: %q", r.stderr)
	}
	// --json summary.
	r = kairos(t, env, "1\n\n[2]\n", "--json", "publish", "j", "--file", "-", "--no-progress").want(t, exitOK)
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum["published"] != 2.0 || sum["lines"] != 3.0 || sum["skipped"] != 1.0 {
		t.Fatalf("--json summary: %q, %v", r.stdout, err)
	}
	if n, _ := c.QueueSize(context.Background(), "j"); n != 2 {
		t.Fatalf("QueueSize: %d", n)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{"0", 0, true},
		{"1m30s", 90 * time.Second, true},
		{"500ms", 500 * time.Millisecond, true},
		{"-1s", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, err := parseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
